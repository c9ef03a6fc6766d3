"""Library GEMMs of the CPU executor: a batch of one goes through NumPy's two-dimensional path
(transposed operands handed to BLAS), with the same result as the stacked path."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.backends.cpu.executor import _matmul


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("transposed", [False, True])
def test_matmul_matches_numpy_with_and_without_out(batch, transposed):
    rng = np.random.default_rng(0)
    a = rng.standard_normal((batch, 48, 40), dtype=np.float32)
    b = rng.standard_normal((batch, 40, 24), dtype=np.float32)
    if transposed:     # column-major operands, as layouts make them
        a = np.ascontiguousarray(a.transpose(0, 2, 1)).transpose(0, 2, 1)
        b = np.ascontiguousarray(b.transpose(0, 2, 1)).transpose(0, 2, 1)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    got = _matmul(a, b)
    assert got.shape == (batch, 48, 24)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    out = np.full((batch, 24, 48), np.nan, dtype=np.float32).transpose(0, 2, 1)
    res = _matmul(a, b, out)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4)   # written in place
    assert np.shares_memory(res, out)
