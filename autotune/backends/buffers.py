"""Host memory for plans: arrays whose data starts on a cache-line boundary, and the pool that
hands pre-faulted buffers from one plan to the next.

Why aligned: NumPy promises 16 bytes, and a large array (glibc serves it with its own mapping)
starts 16 bytes past a page.  A generated loop that stores whole vectors then splits every
other store across two cache lines.  Measured on the 2-core development machine (AVX2),
triangle_attention_starting's vh[d0,d1,d2,d3] += zn[d1,d2,d4] w_v[d4,d0,d3] walking eight
floats of vh innermost: 0.13-0.18 s with vh 64-byte aligned, 0.47-1.33 s 16 bytes past it, the
same code and inputs (a misaligned read costs nothing measurable: 0.12-0.13 s with zn 16 bytes
off).  The plan's buffers are the ones its loops write, so they are the ones aligned; inputs
are the caller's.
"""
from __future__ import annotations

import sys
from collections.abc import Callable

import numpy as np

ALIGN = 64      # bytes: a cache line, and the widest vector (AVX-512)


def aligned_bytes(n: int, align: int = ALIGN) -> np.ndarray:
    """An uninitialised uint8 array of ``n`` bytes whose data starts on an ``align`` boundary
    (a view into a slightly larger allocation, which it keeps alive)."""
    raw = np.empty(n + align, dtype=np.uint8)
    start = -raw.ctypes.data % align
    return raw[start:start + n]


def held(buf: np.ndarray) -> bool:
    """Whether an array somebody still holds views the memory of ``buf``, a buffer from
    :func:`aligned_bytes`.  NumPy points every view at the array that owns the memory (the
    allocation behind ``buf``), not at the view it was taken from, so the count is the owner's:
    ``buf``'s own reference is all a free buffer's has (:func:`owner_refs`)."""
    if buf.base is None:
        raise ValueError("held() takes a buffer from aligned_bytes, a view of its allocation")
    return owner_refs(buf) > 1


def owner_refs(a: np.ndarray) -> int:
    """References to the array that owns ``a``'s memory (``a`` itself counts where it is a
    view; 0 where ``a`` owns it): a count that grows with every view anybody takes of ``a``."""
    return 0 if a.base is None else sys.getrefcount(a.base) - 1


def aligned_empty(shape, dtype, align: int = ALIGN) -> np.ndarray:
    """``np.empty(shape, dtype)`` (C order) whose data starts on an ``align`` boundary."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    return aligned_bytes(count * dtype.itemsize, align).view(dtype).reshape(shape)


def in_layout(shape, perm, alloc: Callable):
    """(storage, logical view) of a tensor of logical ``shape`` stored in ``perm`` order
    (``storage = logical.transpose(perm)``): ``alloc(stored_shape)`` makes the storage (aligned
    host memory, a pooled buffer's view, a device array), the logical view is its transpose by
    the inverse permutation.  One place for what every plan and binding of both backends does."""
    store = alloc([shape[d] for d in perm])
    return store, store.transpose(tuple(int(p) for p in np.argsort(perm)))


def aligned_full(shape, value, dtype, align: int = ALIGN) -> np.ndarray:
    """``np.full(shape, value, dtype)`` whose data starts on an ``align`` boundary."""
    a = aligned_empty(shape, dtype, align)
    a[...] = value
    return a


class BufferPool:
    """Pre-faulted host byte buffers handed from one plan to the next in a measuring process.

    Faulting in a plan's buffers costs ~0.7 s at N=702 (3 GB of intermediates): a search that
    measures a hundred candidates of the same shapes pays it once instead of per candidate.
    Buffers a plan does not need stay in the pool while it runs, as long as it needs nothing
    new: the candidates of a search need 8, 10 or 12 of trimul N=702's 241 MiB intermediates
    from one trial to the next, and dropping the spare ones each time faulted them in again
    a trial later (replaying the 85 measured plans of a search there: 32 faulted in, now 14;
    building the 85 plans 22.9 s, now 20.3 s, their kernels compiled beforehand).  A plan
    that does need a new buffer first releases every unmatched one, so the pool never grows
    beyond the largest plan's worth, and peak memory is the larger of that and the plan's own.
    Every buffer starts on a cache line (:func:`aligned_bytes`).
    """

    def __init__(self) -> None:
        self._free: list[np.ndarray] = []

    def take_all(self, sizes: list[int]) -> list[np.ndarray]:
        """One pre-faulted, aligned uint8 buffer per requested size (reused where one matches)."""
        out: list[np.ndarray | None] = [None] * len(sizes)
        free = self._free
        for i, n in enumerate(sizes):
            j = next((j for j, b in enumerate(free) if b.nbytes == n), None)
            if j is not None:
                out[i] = free.pop(j)
        if all(b is not None for b in out):
            return out            # the spare ones stay for the next plan
        self._free = []           # unmatched: released before the fresh ones are faulted in
        del free
        for i, n in enumerate(sizes):
            if out[i] is None:
                out[i] = aligned_bytes(n)
                out[i].fill(0)     # fault the pages in now: first runs are steady-state runs
        return out

    def give(self, bufs) -> None:
        self._free.extend(bufs)

    def __len__(self) -> int:
        return len(self._free)

    @property
    def nbytes(self) -> int:
        """Bytes held for the next plan."""
        return sum(b.nbytes for b in self._free)
