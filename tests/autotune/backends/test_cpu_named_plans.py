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


def test_tanh_loops_call_the_vector_tanh_where_libmvec_has_it(small, kernel_cache):
    """gelu_mlp's GELU group calls libmvec's vector tanhf when the library exports it (glibc
    >= 2.35; this machine's does), and the plan still verifies; where it does not, nothing
    declares it (an undeclared vector variant would leave the kernel an undefined symbol)."""
    import ctypes
    import ctypes.util
    import subprocess

    from autotune.backends.cpu import executor

    name = ctypes.util.find_library("mvec")
    has = bool(name) and all(hasattr(ctypes.CDLL(name), s) for s in executor.LIBMVEC_TANH)
    assert ("-DAUTOTUNE_LIBMVEC_TANH" in executor._libmvec_flags()) == has
    w = small("gelu_mlp")
    inputs = w.random_inputs(seed=7)
    plan = CompiledPlan(w, named_plan(SearchSpace(w), "unfused"), kernel_cache)
    try:
        err, why = verify(plan(**inputs), reference(w, inputs), w.rtol)
        assert not why and err <= w.rtol
    finally:
        plan.release()
    symbols = "".join(subprocess.run(["nm", "-D", str(so)], capture_output=True, text=True).stdout
                      for so in kernel_cache.glob("k_*.so"))
    assert ("v_tanhf" in symbols) == has        # _ZGV<isa>N<lanes>v_tanhf, called, not defined
