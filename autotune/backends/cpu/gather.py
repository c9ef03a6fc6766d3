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


def gathered_operand(arr: np.ndarray, idx: tuple[str, ...],
                     groups3: tuple[tuple[str, ...], ...]) -> tuple[np.ndarray, Tables]:
    """``arr`` (indexed by ``idx``) as the kernel's (batch, rows, cols) operand over
    ``groups3``: a view with the batch's stride and zero strides along rows and columns, and
    the (rows, cols) offset tables in elements.  A batch whose indices nest into no one stride
    (an array laid out otherwise than the plan said) is first copied to a C-ordered array in
    the groups' order."""
    item = arr.itemsize
    ext = dict(zip(idx, arr.shape))
    st = dict(zip(idx, (s // item for s in arr.strides)))
    live = [i for i in groups3[0] if ext[i] > 1]
    if any(st[x] != st[y] * ext[y] for x, y in zip(live, live[1:])):
        perm = [idx.index(i) for g in groups3 for i in g]
        arr = np.ascontiguousarray(arr.transpose(perm))
        idx = tuple(i for g in groups3 for i in g)
        st = dict(zip(idx, (s // item for s in arr.strides)))
    batch = int(np.prod([ext[i] for i in groups3[0]], dtype=np.int64))
    shape3 = (batch,) + tuple(int(np.prod([ext[i] for i in g], dtype=np.int64))
                              for g in groups3[1:])
    bstride = st[live[-1]] if live else 0
    view = np.lib.stride_tricks.as_strided(arr, shape3, (bstride * item, 0, 0),
                                           writeable=False)
    rows, cols = (_offsets(tuple(ext[i] for i in g), tuple(st[i] for i in g))
                  for g in groups3[1:])
    return view, (rows, cols)
