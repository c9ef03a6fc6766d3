"""Generated CUDA on the host: :class:`HostEmulator` is a runtime for
:class:`autotune.backends.cuda.executor.CudaPlan` that compiles the generated kernels as C++ with a small
header mapping the CUDA built-ins (a few threads per block with a real barrier for
``__syncthreads``) and runs the cuBLAS argument lists through a NumPy model of
``gemmStridedBatched``, so the CUDA backend's results are checked without a GPU."""
from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from search_spaces.precision import split_tf32

from autotune.backends.cuda.codegen import CudaKernel
from autotune.backends.cuda.emulator_header import EMU_HEADER
from autotune.backends.cuda.gemm import GemmCall, emulate_gemm

EMU_SMEM_BYTES = 1 << 24
EMU_FLAGS = ("-std=c++17", "-O1", "-fPIC", "-pthread", "-w")


@functools.lru_cache(maxsize=None)
def emulator_header(cxx: str) -> Path:
    """EMU_HEADER as a file to include, with ``cxx``'s precompiled form beside it where the
    compiler makes one (g++ reads ``emu.h.gch`` in place of ``emu.h`` when its flags match,
    and the text otherwise): parsing the header's C++ library headers was 0.2 s of each
    0.33 s compile of a plan's kernels (0.13 s with the precompiled header), and the tests
    compile some 240 plans.  One folder per header text, compiler and flags, under the
    system's temp folder, shared by every process and cache folder (written atomically)."""
    key = hashlib.sha256("\0".join((EMU_HEADER, cxx, *EMU_FLAGS)).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"autotune-emu-{os.getuid()}" / key
    header = folder / "emu.h"
    if header.exists():
        return header
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        text, gch = Path(tmp) / "emu.h", Path(tmp) / "emu.h.gch"
        text.write_text(EMU_HEADER)
        made = subprocess.run([cxx, *EMU_FLAGS, "-x", "c++-header", str(text), "-o", str(gch)],
                              capture_output=True).returncode == 0
        if made:        # the precompiled form first: a reader that finds the text finds both
            os.replace(gch, folder / "emu.h.gch")
        os.replace(text, header)
    return header


class CaptureError(RuntimeError):
    """Host work (an allocation) while a graph is being captured."""


class _NoAllocation:
    """NumPy as a capture sees it: every function that makes a fresh array raises."""
    ALLOCATING = frozenset({"empty", "empty_like", "zeros", "zeros_like", "ones", "full",
                            "array", "asarray", "ascontiguousarray", "concatenate", "stack",
                            "copy"})

    def __init__(self, xp):
        self._xp = xp

    def __getattr__(self, name):
        if name in self.ALLOCATING:
            raise CaptureError(f"xp.{name} allocates during a capture")
        return getattr(self._xp, name)


class HostEmulator:
    """Runs the CUDA backend on the CPU for tests: the generated source compiled as C++ (g++),
    ``threads`` threads per block with a barrier (one warp: a power of two, its shuffles through
    a shared array between barriers; a tensor-core kernel gets 32, one whole warp), blocks one
    after another; GEMMs through
    :func:`emulate_gemm` on the same cuBLAS argument lists the GPU gets."""

    def __init__(self, threads: int = 4, smem_limit: int = 227 * 1024, cxx: str = "g++"):
        if threads < 1 or threads & (threads - 1) or threads > 32:
            raise ValueError(f"HostEmulator(threads={threads}): a power of two up to 32 (the "
                             f"block's threads are one emulated warp)")
        self.threads, self.smem_limit, self.cxx = threads, smem_limit, cxx
        self.xp = np
        self.device_name = "host emulation"
        self.ndarray = np.ndarray
        self.gemm_calls: list[GemmCall] = []
        self.precisions: list[str] = []     # each gemm call's arithmetic
        self.splits = 0                     # operands split into TF32 parts
        self.replays = 0                    # graphs replayed
        self._recording: list | None = None  # a capture's operations while it is open
        self._dlls: list = []

    def compile(self, source: str, kernels: list[CudaKernel], cache_dir: Path) -> dict:
        wrappers = []
        for k in kernels:
            casts = ", ".join(f"({'const ' if t not in k.writes else ''}{k.ctype}*)a[{n}]"
                              for n, t in enumerate(k.args))
            wrappers.append(f"static void at_body_{k.name}(void** a) {{ {k.name}({casts}); }}\n"
                            f'extern "C" void at_launch_{k.name}(void** a, long grid, int nt) '
                            f"{{ at_run(grid, nt, at_body_{k.name}, a); }}")
        # the header first (its precompiled form is used only where nothing precedes it), then
        # the warp width the generated source reads
        body = f"#define AT_WARP {self.threads}\n" + source + "\n" + "\n".join(wrappers) + "\n"
        flags = [*EMU_FLAGS, "-shared"]
        digest = hashlib.sha256((EMU_HEADER + body + " ".join(flags)).encode()).hexdigest()[:24]
        cache_dir = Path(cache_dir)
        cache_dir.mkdir(parents=True, exist_ok=True)
        lib = cache_dir / f"emu_{digest}.so"
        if not lib.exists():
            with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
                cpp = Path(tmp) / "k.cpp"
                cpp.write_text(f'#include "{emulator_header(self.cxx)}"\n' + body)
                out = Path(tmp) / "k.so"
                proc = subprocess.run([self.cxx, *flags, str(cpp), "-o", str(out)],
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(f"{self.cxx} failed on the emulated kernels:\n"
                                       f"{proc.stderr[:3000]}")
                os.replace(out, lib)
        dll = ctypes.CDLL(str(lib))
        fns = {}
        for k in kernels:
            f = getattr(dll, f"at_launch_{k.name}")
            f.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_long, ctypes.c_int]
            f.restype = None
            fns[k.name] = f
        self._dlls.append(dll)      # keep the library loaded while its functions are used
        return fns

    def attributes(self, fn) -> dict:
        return {}

    def _device(self, op) -> None:
        """Device work: run now, or recorded while a capture is open (as a stream capture
        records it: nothing runs until the graph is replayed)."""
        if self._recording is None:
            op()
        else:
            self._recording.append(op)

    def launch(self, fn, k: CudaKernel, args: list) -> None:
        assert k.smem_bytes <= EMU_SMEM_BYTES
        for a in args:
            assert a.flags.c_contiguous
        ptrs = (ctypes.c_void_p * len(args))(*[a.ctypes.data for a in args])
        # a tensor-core kernel's warp exchanges fragments lane by lane: it gets a whole warp
        # (it reads no AT_WARP, so the loop kernels' emulated warp width does not matter to it)
        threads = 32 if k.whole_warps else min(self.threads, k.block)
        self._device(lambda: fn(ptrs, k.grid, threads))

    def split_tf32(self, x, out=None):
        flat = np.lib.stride_tricks.as_strided(x, shape=(x.size,), strides=(x.itemsize,))
        self.splits += 1
        if out is None:
            if self._recording is not None:
                raise CaptureError("split_tf32 without buffers allocates during a capture")
            return split_tf32(flat)
        hi, lo = out[0][:x.size], out[1][:x.size]

        def op():
            h, lo_ = split_tf32(flat)
            hi[...], lo[...] = h, lo_
        self._device(op)
        return hi, lo

    def gemm(self, call: GemmCall, x, y, c, alpha: float, precision: str,
             beta: float = 0.0) -> None:
        self.gemm_calls.append(call)
        self.precisions.append(precision)
        self._device(lambda: emulate_gemm(call, x, y, c, alpha, beta,
                                          tf32=precision == "tf32"))

    def copy(self, dst, src, scale: float | None = None) -> None:
        if scale is None:
            self._device(lambda: np.copyto(dst, src))
        else:
            self._device(lambda: np.multiply(src, dst.dtype.type(scale), out=dst))

    def address(self, a) -> int:
        return int(a.ctypes.data)

    def capture(self, fn) -> list:
        """What ``fn()`` issues, recorded and not run (the graph: a list of operations).
        While it records, ``xp`` allocates nothing (:class:`CaptureError`): a graph replays
        device work only, so a run that needs a fresh array cannot be one."""
        if self._recording is not None:
            raise CaptureError("a capture is already open")
        self._recording, xp = [], self.xp
        self.xp = _NoAllocation(np)
        try:
            fn()
            return self._recording
        finally:
            self._recording, self.xp = None, xp

    def replay(self, graph: list) -> None:
        self.replays += 1
        for op in graph:
            op()

    def to_device(self, a):
        return a

    def put(self, dst, host: np.ndarray) -> None:
        np.copyto(dst, host)

    def to_host(self, a) -> np.ndarray:
        return np.array(a)

    def synchronize(self) -> None:
        pass

    def timer(self):
        """The host clock in :meth:`CupyRuntime.timer`'s shape (``seconds``, ``lap()``,
        ``laps``)."""
        class _Clock:
            def __enter__(s):
                s.marks = [time.perf_counter()]
                return s

            def lap(s):
                s.marks.append(time.perf_counter())

            def __exit__(s, *exc):
                s.seconds = time.perf_counter() - s.marks[0]
                s.laps = [b - a for a, b in zip(s.marks, s.marks[1:])]
        return _Clock()
