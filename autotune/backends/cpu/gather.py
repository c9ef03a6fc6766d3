"""A kernel operand read through offset tables (``KernelSpec.gather``): the zero-strided view
of the array that hands the kernel its base pointer and batch stride, and the element offsets
of its rows and of its columns, whose sums address every element in any layout.

Why: an operand whose rows or K are indices apart in its layout (cc_doubles' ``t[a,c,i,k]``
as rows (a,i) by K (c,k)) is no strided matrix, and the executor copied it into one before
the kernel packed it again: on the 2-core Xeon the two copies of cc_doubles' 1152 x 1152
operands took 2.0 ms of the group's 14 (bench/results/xeon-stream-b7cad74).  Packing through
the tables reads the operand where it lies.
"""
from __future__ import annotations

import functools

import numpy as np

from search_spaces.gemm import nests

Tables = tuple[np.ndarray, np.ndarray]


@functools.lru_cache(maxsize=256)
def _offsets(shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    """Element offsets of a group of axes (extents ``shape``, element ``strides``), row-major
    over the group as the kernel numbers its rows or columns; built once per layout (a plan's
    arrays keep theirs from call to call), read-only."""
    off = np.zeros((), dtype=np.int64)
    for e, s in zip(shape, strides):
        off = off[..., None] + np.arange(e, dtype=np.int64) * s
    off = np.ascontiguousarray(off.reshape(-1))
    off.flags.writeable = False
    return off


def _layout(arr: np.ndarray, idx: tuple[str, ...], groups3) -> tuple[dict, dict, bool]:
    """(extents, element strides, copied): ``arr``'s, or, where its batch's indices nest into
    no one stride (an array laid out otherwise than the plan said), those of its C-ordered
    copy in the groups' order, which ``copied`` says the operand must be."""
    item = arr.itemsize
    ext = dict(zip(idx, arr.shape))
    st = dict(zip(idx, (s // item for s in arr.strides)))
    if nests(groups3[0], st, ext):
        return ext, st, False
    order = [i for g in groups3 for i in g]
    step, c_order = 1, {}
    for i in reversed(order):
        c_order[i] = step
        step *= ext[i]
    return ext, c_order, True


def gathered_view(arr: np.ndarray, idx: tuple[str, ...], groups3) -> np.ndarray:
    """``arr`` (indexed by ``idx``) as the kernel's (batch, rows, cols) operand over
    ``groups3``: a view with the batch's stride and zero strides along rows and columns (of
    the C-ordered copy :func:`_layout` calls for, where it does)."""
    ext, st, copied = _layout(arr, idx, groups3)
    if copied:
        arr = np.ascontiguousarray(arr.transpose([idx.index(i) for g in groups3 for i in g]))
    live = [i for i in groups3[0] if ext[i] > 1]
    shape3 = tuple(int(np.prod([ext[i] for i in g], dtype=np.int64)) for g in groups3)
    return np.lib.stride_tricks.as_strided(
        arr, shape3, ((st[live[-1]] if live else 0) * arr.itemsize, 0, 0), writeable=False)


def offset_tables(arr: np.ndarray, idx: tuple[str, ...], groups3) -> Tables:
    """The (rows, cols) offset tables, in elements, of :func:`gathered_view`'s operand: from
    the layout alone (no copy made here)."""
    ext, st, _ = _layout(arr, idx, groups3)
    rows, cols = (_offsets(tuple(ext[i] for i in g), tuple(st[i] for i in g))
                  for g in groups3[1:])
    return rows, cols


def gathered_operand(arr: np.ndarray, idx: tuple[str, ...],
                     groups3: tuple[tuple[str, ...], ...]) -> tuple[np.ndarray, Tables]:
    """:func:`gathered_view` and :func:`offset_tables` of ``arr`` together."""
    return gathered_view(arr, idx, groups3), offset_tables(arr, idx, groups3)
