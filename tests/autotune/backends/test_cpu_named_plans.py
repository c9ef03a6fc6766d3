"""Every named plan of every built-in, compiled by the CPU backend at small dims, matches the
float64 reference within the workload's tolerance (and is not trivially zero)."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.backends.base import verify
from autotune.backends.cpu.executor import CompiledPlan
from autotune.reference import reference
from search_spaces import builtin_names
from search_spaces.plans import NAMED_PLANS, named_plan
from search_spaces.space import SearchSpace


@pytest.fixture(scope="module")
def kernel_cache(tmp_path_factory):
    # shared by the plans of a module: a group two plans have in common compiles once
    return tmp_path_factory.mktemp("cpu-kernels")


@pytest.mark.parametrize("name", builtin_names())
def test_named_plans_verify_on_cpu(name, small, kernel_cache):
    w = small(name)
    inputs = w.random_inputs(seed=7)
    ref = reference(w, inputs)
    space = SearchSpace(w)
    for plan_name in NAMED_PLANS:
        plan = CompiledPlan(w, named_plan(space, plan_name), kernel_cache)
        try:
            outs = plan(**inputs)
            err, why = verify(outs, ref, w.rtol)
            assert not why, f"{name} plan {plan_name}: {why}"
            assert err <= w.rtol
            for o in w.outputs:
                assert outs[o].shape == w.shapes[o] and np.abs(outs[o]).max() > 1e-3
        finally:
            plan.release()
