"""Every array a CPU plan writes starts on a cache line: the pool's buffers, the outputs it
allocates, its staging matrices, and the tile buffers the generated loops allocate."""
from __future__ import annotations

import numpy as np
import pytest

import autotune
from autotune.api import space_for
from autotune.backends.base import relative_error
from autotune.backends.buffers import ALIGN, BufferPool, aligned_bytes, aligned_empty
from autotune.backends.cpu.codegen import generate_units
from autotune.backends.cpu.executor import CompiledPlan
from autotune.backends.cpu.staging import Staging
from search_spaces import load_workload
from search_spaces.plans import named_plan


@pytest.mark.parametrize("n", [1, 7, 64, 100, 4096, 1 << 20, (1 << 20) + 12])
def test_aligned_bytes_start_on_a_line_and_have_the_size_asked(n):
    keep = [np.empty(k, dtype=np.uint8) for k in (3, 17, 1 << 18)]   # shift the heap about
    b = aligned_bytes(n)
    assert b.ctypes.data % ALIGN == 0 and b.nbytes == n and b.dtype == np.uint8
    b[:] = 1                        # the whole view is writable memory
    assert keep                     # (kept alive so the allocator could not reuse them)


def test_aligned_empty_is_a_c_ordered_array_of_that_shape():
    a = aligned_empty((3, 5, 7), np.float32)
    assert a.shape == (3, 5, 7) and a.dtype == np.float32 and a.flags.c_contiguous
    assert a.ctypes.data % ALIGN == 0


def test_pool_buffers_and_staging_matrices_are_aligned():
    bufs = BufferPool().take_all([10, 4096, 3 << 20])
    assert all(b.ctypes.data % ALIGN == 0 for b in bufs)
    m = Staging(threads=1).scratch("x", (33, 65), np.float32)
    assert m.ctypes.data % ALIGN == 0 and m.shape == (33, 65)


def test_a_plans_intermediates_and_outputs_are_aligned_and_correct(tmp_path):
    w = load_workload("trimul_outgoing", {"N": 24, "C": 8})
    space = space_for(w, "cpu")
    inputs = w.random_inputs(5)
    ref = autotune.reference(w, inputs)
    for name in ("unfused", "heuristic"):
        plan = CompiledPlan(w, named_plan(space, name), tmp_path)
        outs = plan(**inputs)
        assert relative_error(outs["out"], ref["out"]) <= w.rtol
        for t, a in {**plan.storage, **outs}.items():
            assert a.ctypes.data % ALIGN == 0, (name, t)
        plan.release()


def test_generated_tile_buffers_are_allocated_on_a_line():
    w = load_workload("trimul_outgoing", {"N": 24, "C": 8})
    cand = named_plan(space_for(w, "cpu"), "heuristic")
    srcs = [src for src, _ in generate_units(w, cand)]
    assert any("aligned_alloc(64, " in s for s in srcs)      # the heuristic plan fuses
    assert not any("malloc(" in s.replace("aligned_alloc(", "") for s in srcs)


def test_held_sees_views_of_views_and_only_them():
    from autotune.backends.buffers import held
    b = aligned_bytes(256)
    assert not held(b)
    v = b[16:32].view(np.float32).reshape(2, 2)[1]      # a view of a view of a view
    assert held(b)
    del v
    assert not held(b)
    with pytest.raises(ValueError, match="aligned_bytes"):
        held(np.empty(4))


def test_a_caller_holding_a_slice_of_an_output_keeps_it(tmp_path):
    w = load_workload("trimul_outgoing", {"N": 24, "C": 8})
    plan = CompiledPlan(w, named_plan(space_for(w, "cpu"), "unfused"), tmp_path)
    first = w.random_inputs(1)
    row = plan(**first)["out"][3]            # only a view of the output survives this line
    kept = row.copy()
    second = plan(**w.random_inputs(2))["out"]
    np.testing.assert_array_equal(row, kept)          # not overwritten by the second call
    assert not np.shares_memory(second, row)
    del row
    third = plan(**w.random_inputs(3))["out"]
    ptr = third.ctypes.data
    del third
    assert plan(**first)["out"].ctypes.data == ptr     # nobody holds it: the array is reused
