"""Where a GEMM's operand or result cannot be a view of the plan's array (its layout does not
nest the GEMM's rows and columns), the executor stages it: the operand is copied into a matrix
first, the result computed into one and copied out.  :class:`Staging` keeps those matrices from
call to call and copies on every core.

Why: a fresh temporary each call faults its pages in again, and NumPy copies on one thread.
Measured on the 2-core development machine, outer_product_mean's o[i,j,e,f] stored [e][f][i][j]
(a 67 MB result): the copy alone 21 ms on one thread, 11.8 ms split over two; the library group
as a whole ran 82 ms where the same GEMM into a viewable layout ran 19 ms, against a model that
priced the copy at the cores' transposing bandwidth.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from autotune.backends.buffers import aligned_empty
from autotune.threads import cores

# below this many bytes one thread copies: a hand-off to the pool costs tens of microseconds
PARALLEL_COPY_BYTES = 1 << 20


class Staging:
    """Scratch matrices by name, allocated on first use and kept; copies over ``threads``
    threads (NumPy releases the GIL while it copies)."""

    def __init__(self, threads: int | None = None):
        self.threads = max(1, threads or cores())
        self._scratch: dict[str, np.ndarray] = {}
        self._pool: ThreadPoolExecutor | None = None
        self.allocated = 0          # bytes allocated so far: a call that grew it faulted them in

    def scratch(self, name: str, shape, dtype) -> np.ndarray:
        buf = self._scratch.get(name)
        if buf is None or buf.shape != tuple(shape) or buf.dtype != dtype:
            buf = self._scratch[name] = aligned_empty(shape, dtype)
            self.allocated += buf.nbytes
        return buf

    def copy(self, dst: np.ndarray, src: np.ndarray) -> None:
        """``dst[...] = src`` (same shape), split along ``dst``'s outermost dim in memory."""
        if self.threads == 1 or dst.nbytes < PARALLEL_COPY_BYTES or dst.ndim == 0:
            dst[...] = src
            return
        axis = int(np.argmax([abs(s) if n > 1 else 0 for s, n in zip(dst.strides, dst.shape)]))
        n = dst.shape[axis]
        step = -(-n // self.threads)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="autotune-copy")
        cut = lambda a, lo: a[(slice(None),) * axis + (slice(lo, lo + step),)]
        list(self._pool.map(lambda lo: cut(dst, lo).__setitem__(Ellipsis, cut(src, lo)),
                            range(0, n, step)))

    def matrix(self, name: str, t: np.ndarray, shape3) -> np.ndarray:
        """``t`` (a transposed view) copied into a kept (batch, rows, cols) matrix."""
        buf = self.scratch(name, shape3, t.dtype)
        self.copy(buf.reshape(t.shape), t)
        return buf

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
        self._scratch = {}
