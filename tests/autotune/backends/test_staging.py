"""GEMM operands and results as (batch, rows, cols) matrices: views where the strides allow
(decided without NumPy building a copy to find out), kept scratch matrices and a copy over the
cores where not, and the contraction's scale on the smallest matrix."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from autotune.backends.cpu.kernel_group import as3, view3
from autotune.backends.cpu.staging import PARALLEL_COPY_BYTES, Staging

IDX = ("i", "j", "e", "f")
GROUPS = ((), ("i", "e"), ("j", "f"))      # outer_product_mean's o as rows (i,e), cols (j,f)


@pytest.mark.parametrize("perm", list(itertools.permutations(range(4))))
def test_view3_is_a_view_exactly_when_numpy_can_reshape_without_copying(perm):
    store = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape([(2, 3, 4, 5)[p] for p in perm])
    arr = store.transpose(np.argsort(perm))          # logical (i, j, e, f), stored in perm order
    t, v = view3(arr, IDX, GROUPS)
    expected = t.reshape(1, 2 * 4, 3 * 5)
    try:
        t.view().shape = (1, 8, 15)
        viewable = True
    except AttributeError:
        viewable = False
    assert (v is not None) == viewable
    if v is not None:
        assert np.shares_memory(v, store) and np.array_equal(v, expected)
        v[0, 1, 2] = -1.0                             # writes land in the plan's array
        assert t.reshape(1, 8, 15)[0, 1, 2] == -1.0
    staged = as3(arr, IDX, GROUPS, Staging(threads=2), "o")
    assert np.array_equal(staged, t.reshape(1, 8, 15))


def test_staging_keeps_its_matrices_and_copies_big_arrays_over_threads():
    st = Staging(threads=2)
    a = st.scratch("x", (1, 4, 4), np.float32)
    assert st.scratch("x", (1, 4, 4), np.float32) is a
    n = PARALLEL_COPY_BYTES // 4 + 1000                # past the threshold: split over threads
    src = np.random.default_rng(0).random((n // 100, 100), dtype=np.float32)
    dst = np.empty((100, n // 100), dtype=np.float32).T   # a transposing copy
    st.copy(dst, src)
    assert np.array_equal(dst, src)
    st.close()


def test_a_view_blas_cannot_take_is_staged_for_the_library_gemm():
    """A (batch, rows, cols) view whose unit stride is the batch (trimul's a[i,k,c] as
    (c, i, k)) is a view NumPy's matmul would run off BLAS: with ``blas`` it is copied into a
    kept row-major matrix; without, the view is returned as before."""
    rng = np.random.default_rng(3)
    arr = rng.standard_normal((5, 6, 4)).astype(np.float32)      # a[i, k, c]
    groups = (("c",), ("i",), ("k",))
    view = as3(arr, ("i", "k", "c"), groups, Staging(threads=1), "a")
    assert np.shares_memory(view, arr) and view.strides[0] == 4   # batch unit-stride
    st = Staging(threads=1)
    staged = as3(arr, ("i", "k", "c"), groups, st, "a", blas=True)
    assert not np.shares_memory(staged, arr) and staged.flags.c_contiguous
    assert np.array_equal(staged, arr.transpose(2, 0, 1))
    assert as3(arr, ("i", "k", "c"), groups, st, "a", blas=True) is staged   # kept
    # a view BLAS takes stays a view
    ok = as3(arr, ("i", "k", "c"), (("i",), ("k",), ("c",)), st, "b", blas=True)
    assert np.shares_memory(ok, arr)
