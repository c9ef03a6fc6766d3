"""The kernel's extra arrays are merged into (batch, rows, cols) views by their strides
(gemm_transforms._merged): a view exactly where NumPy's reshape would give one without a copy,
None where it would copy (NumPy's in-place shape change built that copy before refusing)."""
from __future__ import annotations

import itertools

import numpy as np

from autotune.backends.cpu.gemm_transforms import _merged


def _cases(rng):
    base = rng.standard_normal(2 * 3 * 4 * 5).reshape(2, 3, 4, 5)
    for perm in itertools.permutations(range(4)):
        yield np.transpose(base, perm)
    # broadcasts (stride 0) along each dim, size-1 dims among them
    for d in range(4):
        st = list(base.strides)
        st[d] = 0
        yield np.lib.stride_tricks.as_strided(base, base.shape, st)
    yield base[:, :1]
    yield base[:, :, ::2]


def test_merged_is_a_view_exactly_where_reshape_needs_no_copy():
    rng = np.random.default_rng(0)
    seen = {True: 0, False: 0}
    for full in _cases(rng):
        for lengths in ([1, 1, 2], [2, 1, 1], [1, 2, 1], [0, 2, 2], [2, 2, 0], [4, 0, 0]):
            sizes = [int(np.prod(full.shape[sum(lengths[:i]):sum(lengths[:i + 1])]))
                     for i in range(len(lengths))]
            got = _merged(full, lengths)
            copied = not np.shares_memory(full.reshape(sizes), full)
            assert (got is None) == copied, (full.shape, full.strides, lengths)
            seen[got is None] += 1
            if got is not None:
                assert got.shape == tuple(sizes) and np.shares_memory(got, full)
                np.testing.assert_array_equal(got, full.reshape(sizes))
    assert seen[True] and seen[False]
