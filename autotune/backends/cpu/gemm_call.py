"""Compiling, loading and calling the generated contraction kernel on NumPy arrays.

:class:`GemmKernel` compiles a :class:`autotune.backends.cpu.gemm_kernel.KernelSpec` with the
loop groups' compiler and flags (``executor.compile_source``: cached by the source's hash) and
calls it through ctypes on strided (batch, rows, cols) views: no copies, whatever the strides.
"""
from __future__ import annotations

import ctypes
import functools
import os
import re
from pathlib import Path

import numpy as np

from search_spaces.kernel import KernelBounds

from autotune.backends.cpu.executor import compile_source
from autotune.backends.cpu.gemm_kernel import (ENTRY, STORE_COLS, STORE_ROWS, KernelSpec,
                                               kernel_source)


class GemmKernel:
    """One compiled kernel: ``kernel(a, b, c, alpha, extra)`` sets ``c[i] = epilogue(alpha *
    a[i] @ b[i])`` for 3-d arrays ``a`` (batch, m, k), ``b`` (batch, k, n), ``c`` (batch, m, n)
    of the spec's dtype, in any strides (a batch stride of 0 broadcasts an operand)."""

    def __init__(self, spec: KernelSpec, cache_dir: Path):
        self.spec = spec
        self.dtype = np.dtype(spec.dtype)
        self.source = kernel_source(spec)
        self.lib = ctypes.CDLL(str(compile_source(self.source, Path(cache_dir))))
        fn = getattr(self.lib, ENTRY)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_long), ctypes.c_double,
                       ctypes.POINTER(ctypes.c_void_p)]
        fn.restype = None
        self._fn = fn

    def __call__(self, a: np.ndarray, b: np.ndarray, c: np.ndarray, alpha: float = 1.0,
                 extra: tuple[np.ndarray, ...] = ()) -> None:
        it = self.dtype.itemsize
        for name, arr in (("a", a), ("b", b), ("c", c)):
            if arr.dtype != self.dtype or arr.ndim != 3:
                raise ValueError(f"{name}: expected a 3-d {self.dtype} array, got "
                                 f"{arr.ndim}-d {arr.dtype}")
            if any(s % it for s in arr.strides):
                raise ValueError(f"{name}: strides {arr.strides} are not whole elements")
        nb, m, k = a.shape
        if b.shape[1:] != (k, c.shape[2]) or c.shape != (nb, m, b.shape[2]) \
                or b.shape[0] not in (nb, 1) or a.shape[0] != c.shape[0]:
            raise ValueError(f"shapes {a.shape} @ {b.shape} -> {c.shape} do not match")
        if not c.flags.writeable:
            raise ValueError("c is read-only")
        if len(extra) != len(self.spec.args):
            raise ValueError(f"expected {len(self.spec.args)} extra arrays, got {len(extra)}")
        st = lambda arr: [s // it for s in arr.strides]
        sb = st(b)
        if b.shape[0] == 1:
            sb[0] = 0
        dims = (ctypes.c_long * 13)(nb, m, b.shape[2], k, *st(a), *sb, *st(c))
        xs = (ctypes.c_void_p * max(1, len(extra)))(*[x.ctypes.data for x in extra])
        self._fn(a.ctypes.data, b.ctypes.data, c.ctypes.data, dims, float(alpha), xs)


def store_for(c: np.ndarray) -> str:
    """The store orientation that writes ``c`` (batch, m, n) with vector stores where it can:
    along m when only m is unit-stride, else along n."""
    it = c.itemsize
    return STORE_COLS if c.strides[2] != it and c.strides[1] == it and c.shape[1] > 1 \
        else STORE_ROWS


@functools.lru_cache(maxsize=64)
def load_kernel(spec: KernelSpec, cache_dir: str) -> GemmKernel:
    """The compiled kernel for ``spec`` (loaded once per process)."""
    return GemmKernel(spec, Path(cache_dir))


def _cache_size(text: str) -> int:
    mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:].upper(), 1)
    return int(text.rstrip("KMGkmg")) * mult


@functools.lru_cache(maxsize=1)
def machine_bounds() -> KernelBounds:
    """What this machine allows the kernel: vector widths from the CPU's flags in
    /proc/cpuinfo (AVX-512: 64 bytes and 32 vector registers; AVX2 with FMA: 32 bytes; else
    16), cache sizes from /sys/devices/system/cpu/cpu0/cache, cores from the affinity mask.
    Falls back to :class:`KernelBounds`'s defaults for what it cannot read."""
    d = KernelBounds()
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    if "avx512f" in flags:
        widths, regs = (64, 32, 16), 32
    elif {"avx2", "fma"} <= flags:
        widths, regs = (32, 16), 16
    elif flags:
        widths, regs = (16,), 16
    else:
        widths, regs = d.vec_bytes, d.registers
    sizes = {}
    for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = int((idx / "level").read_text())
            kind = (idx / "type").read_text().strip()
            size = _cache_size((idx / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and re.fullmatch(r"[123]", str(level)):
            sizes[level] = size
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return KernelBounds(widths, regs, sizes.get(1, d.l1_bytes), sizes.get(2, d.l2_bytes),
                        sizes.get(3, d.l3_bytes), cores)
