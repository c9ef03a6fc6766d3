"""The measuring worker's buffer pool: plans reuse each other's pre-faulted buffers, never one a
caller still holds, and stay correct when what they inherit is garbage."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.api import space_for
from autotune.backends.base import BufferPool, relative_error
from autotune.backends.cpu.executor import CompiledPlan
from search_spaces import load_workload
from search_spaces.plans import named_plan


@pytest.fixture(scope="module")
def w():
    return load_workload("trimul_outgoing", {"N": 24, "C": 8})


def _poison(pool: BufferPool) -> None:
    for b in pool._free:
        b.fill(0xFF)          # all-ones bytes: NaN in float32, so a stale read shows


def test_take_all_reuses_matching_sizes_and_keeps_spares_until_something_new_is_needed():
    pool = BufferPool()
    a, b = pool.take_all([64, 128])
    pool.give([a, b])
    (c,) = pool.take_all([128])
    assert c is b              # the matching buffer came back
    assert len(pool) == 1      # the spare one stays: this plan needed nothing new
    pool.give([c])
    a2, b2 = pool.take_all([64, 128])
    assert a2 is a and b2 is b  # the next plan finds both, nothing faulted in again
    pool.give([a2, b2])
    d, e = pool.take_all([128, 32])
    assert d is b and e.nbytes == 32
    assert len(pool) == 0      # a new buffer was needed: the unmatched one went first


def test_plans_share_buffers_and_stay_correct(w, tmp_path):
    space = space_for(w, "cpu")
    inputs = w.random_inputs(3)
    ref = autotune.reference(w, inputs)
    pool = BufferPool()
    first = CompiledPlan(w, named_plan(space, "unfused"), tmp_path, pool=pool)
    n_bufs = len(first._raw)
    held = first(**inputs)["out"]
    kept = held.copy()
    first.release()
    # every buffer but the output the caller still holds went back
    assert len(pool) == n_bufs - 1
    _poison(pool)
    second = CompiledPlan(w, named_plan(space, "heuristic"), tmp_path, pool=pool)
    spare = len(pool)                      # what the second plan did not need stayed
    out = second(**inputs)["out"]
    assert relative_error(out, ref["out"]) <= w.rtol
    np.testing.assert_array_equal(held, kept)      # the held output was never reused
    assert not np.shares_memory(out, held)
    n_second = len(second._raw)
    del out
    second.release()
    assert len(pool) == spare + n_second   # nothing held: all of them went back


def test_release_without_a_pool_is_harmless(w, tmp_path):
    space = space_for(w, "cpu")
    plan = CompiledPlan(w, named_plan(space, "heuristic"), tmp_path)
    out = plan(**w.random_inputs(0))["out"]
    plan.release()
    assert np.isfinite(out).all()


def test_output_array_is_reused_only_once_dropped(w, tmp_path):
    plan = CompiledPlan(w, named_plan(space_for(w, "cpu"), "heuristic"), tmp_path)
    inputs = w.random_inputs(1)
    a = plan(**inputs)["out"]
    kept = a.copy()
    b = plan(**inputs)["out"]            # ``a`` is still held: a fresh array
    assert not np.shares_memory(a, b)
    np.testing.assert_array_equal(a, kept)
    b_addr = b.ctypes.data
    del a, b
    c = plan(**inputs)["out"]            # nobody holds the last one: its pages are reused
    assert c.ctypes.data == b_addr
    np.testing.assert_array_equal(c, kept)


def test_worker_reports_what_its_pool_holds(w, tmp_path):
    """The search's memory check adds the worker's pooled buffers to the free memory: they
    go to the next candidate (the OS counts them as used)."""
    from autotune.backends.base import MeasureSettings
    from autotune.backends.factory import backend_kind
    cand = named_plan(space_for(w, "cpu"), "heuristic")
    backend = backend_kind("cpu").backend(w, 0, tmp_path, MeasureSettings(repeats=1))
    try:
        assert backend.reclaimable_bytes() == 0               # nothing measured yet
        m = backend.measure(cand, timeout_s=120, best_s=None)
        assert m.status == "ok", m.error
        plan = CompiledPlan(w, cand, tmp_path / "kernels")
        assert backend.reclaimable_bytes() == sum(b.nbytes for b in plan._raw.values()) > 0
        backend.worker.kill()
        assert backend.reclaimable_bytes() == 0               # a dead worker holds nothing
    finally:
        backend.close()


def test_plans_leave_openblas_first_state_once_per_process(tmp_path):
    # autotune.threads.warm_blas: one 512^3 GEMM before the first plan (a fresh OpenBLAS ran
    # conv1x1_norm's batched GEMM 1.4x slower for the life of the process)
    from autotune import threads
    from autotune.backends.cpu.executor import CompiledPlan
    from search_spaces import load_workload
    from search_spaces.plans import named_plan
    from search_spaces.space import SearchSpace
    w = load_workload("gated_mlp", {"T": 8, "C": 8, "F": 16})
    CompiledPlan(w, named_plan(SearchSpace(w), "heuristic"), tmp_path)
    assert threads._blas_warm == [True]
    threads.warm_blas()
    assert threads._blas_warm == [True]          # once, not per plan
