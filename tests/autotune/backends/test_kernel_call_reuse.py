"""A kernel group keeps its C arguments while the same arrays come back, and only then: new
inputs, an output the caller kept (so the plan writes a fresh one) and inputs copied on each
call get arguments of their own, and every result matches the float64 reference."""
from __future__ import annotations

import numpy as np
import pytest

from search_spaces import parse_workload
from search_spaces.space import SearchSpace

from autotune.backends.base import verify
from autotune.backends.cpu.executor import CompiledPlan
from autotune.backends.cpu.gemm_call import GemmKernel
from autotune.backends.factory import backend_kind
from autotune.reference import reference

TEXT = '''name = "reuse"
outputs = ["y"]
program = """
a[t,g] += x[t,c] * w[c,g]
y[t,g] = tanh(a[t,g]) * s[t]
"""
[dims]
T = 37
C = 19
G = 23
[inputs]
x = ["T", "C"]
w = ["C", "G"]
s = ["T"]
'''


def _plan(tmp_path, layout: int = 0) -> CompiledPlan:
    w = parse_workload(TEXT, "reuse.toml")
    space = SearchSpace(w, backend_kind("cpu").tile_bounds)
    cand = space.build(lambda q, opts: "kernel" if q.startswith("impl:") else
                       1 if q.startswith("fuse:") else
                       opts[layout % len(opts)] if q.startswith("layout:") else opts[0])
    plan = CompiledPlan(w, cand, tmp_path)
    assert plan.kernel_groups, "the candidate has no kernel group"
    return plan


@pytest.fixture
def counted(monkeypatch):
    """How many times a kernel's arguments were built."""
    calls = []
    real = GemmKernel.arguments
    monkeypatch.setattr(GemmKernel, "arguments",
                        lambda self, *a, **k: calls.append(1) or real(self, *a, **k))
    return calls


def _check(plan, inputs):
    out = plan(**inputs)
    err, why = verify(out, reference(plan.w, inputs), plan.w.rtol)
    assert not why, why
    return out


def test_the_same_arrays_reuse_the_arguments_and_new_ones_get_their_own(tmp_path, counted):
    plan = _plan(tmp_path)
    w = plan.w
    inputs = w.random_inputs(1)
    _check(plan, inputs)
    built = len(counted)
    assert built >= 1
    for _ in range(3):                      # same inputs, the plan's own output reused
        _check(plan, inputs)
    assert len(counted) == built
    # new input arrays (other content): arguments built afresh, the result theirs
    other = w.random_inputs(2)
    _check(plan, other)
    assert len(counted) == built + 1
    # the caller keeps the output, so the next call writes a new array: fresh arguments,
    # and the kept one is left as it was
    kept = _check(plan, other)["y"]
    before = kept.copy()
    fresh = _check(plan, inputs)["y"]
    assert fresh is not kept and np.array_equal(kept, before)
    assert len(counted) == built + 2


def test_an_input_changed_in_place_is_read_again(tmp_path, counted):
    plan = _plan(tmp_path)
    inputs = plan.w.random_inputs(3)
    _check(plan, inputs)
    inputs["x"][...] = plan.w.random_inputs(4)["x"]      # same array, new content
    _check(plan, inputs)


def test_an_input_made_contiguous_each_call_is_never_reused(tmp_path, counted):
    # a Fortran-ordered x is copied to a new C-ordered array on every call: a kernel reading
    # last call's copy would compute with stale numbers
    plan = _plan(tmp_path)
    inputs = plan.w.random_inputs(5)
    x = np.asfortranarray(inputs["x"])
    _check(plan, {**inputs, "x": x})
    n = len(counted)
    x[...] = plan.w.random_inputs(6)["x"]
    _check(plan, {**inputs, "x": x})
    assert len(counted) == n + 1
