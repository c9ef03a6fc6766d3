"""cuBLAS argument lists for the CUDA backend's library contractions, and a NumPy model of them.

A library group is one ``cublasGemmStridedBatchedEx`` call (column-major) on strided views of the
plan's buffers.  :func:`plan_gemm` finds its arguments from the operands' strides (or says which
operand must be copied to a contiguous buffer first); :func:`emulate_gemm` does on the host what
cuBLAS does with them, so the argument lists are tested without a GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from search_spaces.precision import round_tf32


@dataclass(frozen=True)
class Mat:
    """A batch of matrices in a flat buffer: extents and element strides."""
    rows: int
    cols: int
    sr: int       # row stride
    sc: int       # column stride
    sb: int       # batch stride


@dataclass(frozen=True)
class GemmCall:
    """One ``cublasGemmStridedBatchedEx`` (column-major): ``C = alpha op(X) op(Y)`` where X, Y are
    the operands named by ``first``/``second`` ("A" or "B" of ``out = A @ B``)."""
    first: str
    second: str
    transa: str          # "N" | "T"
    transb: str
    m: int
    n: int
    k: int
    lda: int
    ldb: int
    ldc: int
    stride_a: int
    stride_b: int
    stride_c: int
    batch: int


def _colmajor_ld(r: int, c: int, sr: int, sc: int) -> int | None:
    """The leading dimension if an r x c matrix with these strides is column-major, else None."""
    if r == 1 or sr == 1:
        ld = sc if c > 1 else max(1, r)
        if ld >= max(1, r):
            return ld
    return None


def _op(r: int, c: int, sr: int, sc: int) -> tuple[str, int] | None:
    """How cuBLAS reads an r x c matrix: ("N", ld) column-major, ("T", ld) the transpose of a
    column-major c x r, or None (neither: copy it first)."""
    ld = _colmajor_ld(r, c, sr, sc)
    if ld is not None:
        return "N", ld
    ld = _colmajor_ld(c, r, sc, sr)
    if ld is not None:
        return "T", ld
    return None


def plan_gemm(a: Mat, b: Mat, c: Mat, batch: int) -> GemmCall | str:
    """cuBLAS arguments for ``c = a @ b`` (batched), or which of "A", "B", "C" must be copied
    to a contiguous buffer first."""
    M, K, N = a.rows, a.cols, b.cols
    row_major_out = c.sc == 1 and c.cols > 1
    attempts = ("T", "N") if row_major_out else ("N", "T")
    for form in attempts:
        if form == "N":            # C (M x N) column-major = op(A) op(B)
            ldc = _colmajor_ld(M, N, c.sr, c.sc)
            if ldc is None:
                continue
            x, y = _op(M, K, a.sr, a.sc), _op(K, N, b.sr, b.sc)
            if x is None:
                return "A"
            if y is None:
                return "B"
            return GemmCall("A", "B", x[0], y[0], M, N, K, x[1], y[1], ldc, a.sb, b.sb, c.sb,
                            batch)
        ldc = _colmajor_ld(N, M, c.sc, c.sr)   # C^T (N x M) column-major = B^T A^T
        if ldc is None:
            continue
        x, y = _op(N, K, b.sc, b.sr), _op(K, M, a.sc, a.sr)
        if x is None:
            return "B"
        if y is None:
            return "A"
        return GemmCall("B", "A", x[0], y[0], N, M, K, x[1], y[1], ldc, b.sb, a.sb, c.sb, batch)
    return "C"


def run_gemm(rt, call: GemmCall, x, y, c, alpha: float, precision: str,
             scratch: tuple | None = None) -> None:
    """``c = alpha op(x) op(y)`` on runtime ``rt`` in ``precision``: one cuBLAS call, or for
    "3xtf32" both operands split into TF32 high and low parts and three TF32 products summed
    into ``c``.  ``scratch``: four flat buffers the parts go to (x's high and low, y's), each
    at least as large as the operand it holds; fresh ones where None."""
    if precision == "3xtf32":
        xs, ys = (scratch[:2], scratch[2:]) if scratch is not None else (None, None)
        (xh, xl), (yh, yl) = rt.split_tf32(x, xs), rt.split_tf32(y, ys)
        # the small products first: their sum is rounded once more, the large one's not
        rt.gemm(call, xl, yh, c, alpha, "tf32")
        rt.gemm(call, xh, yl, c, alpha, "tf32", beta=1.0)
        rt.gemm(call, xh, yh, c, alpha, "tf32", beta=1.0)
    else:
        rt.gemm(call, x, y, c, alpha, precision)


def gemm_views(xp, call: GemmCall, x, y, c):
    """``(op(X), op(Y), C)`` of ``call`` as (batch, rows, cols) strided views of the flat
    buffers ``x``, ``y``, ``c`` (NumPy or CuPy, chosen by ``xp``): column-major, as cuBLAS
    reads them."""
    st = xp.lib.stride_tricks.as_strided
    item = c.itemsize

    def view(buf, trans, rows, cols, ld, stride):
        flat = st(buf, shape=(buf.size,), strides=(item,))
        steps = (1, ld) if trans == "N" else (ld, 1)
        return st(flat, shape=(call.batch, rows, cols),
                  strides=(stride * item, steps[0] * item, steps[1] * item))
    return (view(x, call.transa, call.m, call.k, call.lda, call.stride_a),
            view(y, call.transb, call.k, call.n, call.ldb, call.stride_b),
            view(c, "N", call.m, call.n, call.ldc, call.stride_c))


def emulate_gemm(call: GemmCall, x: np.ndarray, y: np.ndarray, c: np.ndarray,
                 alpha: float, beta: float = 0.0, tf32: bool = False) -> None:
    """What cuBLAS does with ``call`` on flat buffers ``x`` (first), ``y`` (second), ``c``:
    a NumPy model used to test the argument lists without a GPU (``tf32``: the operands
    rounded to TF32 first, as tensor cores take them; the sums in float64, no worse than
    the device's float32)."""
    X, Y, C = gemm_views(np, call, x, y, c)
    if tf32:
        X, Y = round_tf32(X), round_tf32(Y)
    out = alpha * np.matmul(X.astype(np.float64), Y.astype(np.float64))
    C[...] = out + beta * C if beta else out


def mat3(arr, idx: tuple[str, ...], groups3) -> tuple[Mat, int] | None:
    """``arr`` (logical order ``idx``) seen as (batch, rows, cols) without a copy: its Mat and
    batch count, or None when its storage does not nest the groups' indices."""
    item = arr.itemsize
    st = {i: s // item for i, s in zip(idx, arr.strides)}
    ext = dict(zip(idx, arr.shape))
    sizes, gstrides = [], []
    for g in groups3:
        live = [i for i in g if ext[i] > 1]
        for x, y in zip(live, live[1:]):
            if st[x] != st[y] * ext[y]:
                return None
        sizes.append(math.prod(ext[i] for i in g))
        gstrides.append(st[live[-1]] if live else 0)
    return Mat(sizes[1], sizes[2], gstrides[1], gstrides[2], gstrides[0]), sizes[0]

