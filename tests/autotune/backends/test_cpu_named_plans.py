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


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tanh_is_inlined_in_float32_and_libmvecs_in_float64(dtype, kernel_cache, tmp_path):
    """gelu_mlp's GELU group: in float32 tanh is the inlined rational function
    (autotune.backends.cpu.fast_tanh), no call at all; in float64 it calls libmvec's vector
    tanh when the library exports it (glibc >= 2.35; this machine's does), and where it does
    not, nothing declares it (an undeclared vector variant would leave the kernel an undefined
    symbol).  Both verify."""
    import ctypes
    import ctypes.util
    import re
    import subprocess

    from autotune.backends.cpu import executor
    from search_spaces import parse_workload
    from search_spaces.loader import builtin_text
    from tests.conftest import SMALL_DIMS

    name = ctypes.util.find_library("mvec")
    has = bool(name) and all(hasattr(ctypes.CDLL(name), s) for s in executor.LIBMVEC_TANH)
    assert ("-DAUTOTUNE_LIBMVEC_TANH" in executor._libmvec_flags()) == has
    w = parse_workload(builtin_text("gelu_mlp").replace('dtype = "float32"', f'dtype = "{dtype}"'),
                       "gelu.toml", SMALL_DIMS["gelu_mlp"])
    inputs = w.random_inputs(seed=7)
    cache = tmp_path / "k"                     # this plan's libraries only
    cache.mkdir()
    plan = CompiledPlan(w, named_plan(SearchSpace(w), "unfused"), cache)
    try:
        err, why = verify(plan(**inputs), reference(w, inputs), w.rtol)
        assert not why and err <= w.rtol
    finally:
        plan.release()
    symbols = "".join(subprocess.run(["nm", "-D", str(so)], capture_output=True, text=True).stdout
                      for so in cache.glob("k_*.so"))
    assert "tanhf" not in symbols                    # float32: no call, scalar or vector
    # _ZGV<isa>N<lanes>v_tanh, called, not defined
    assert bool(re.search(r"v_tanh(?!f)", symbols)) == (has and dtype == "float64")
