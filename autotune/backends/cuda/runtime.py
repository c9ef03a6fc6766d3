"""The GPU runtime of :class:`autotune.backends.cuda.executor.CudaPlan`: CuPy arrays, NVRTC
kernels, cuBLAS, CUDA events.

CuPy is imported when a :class:`CupyRuntime` is made, never at import time, so the rest of the
CUDA backend (code generation, GEMM planning, the host emulator) works without it.
:class:`autotune.backends.cuda.emulator.HostEmulator` is the same interface on the CPU.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from costmodel.cuda_limits import SHARED_OPTIN_BY_ARCH

from autotune.backends.cuda.codegen import CudaKernel
from autotune.backends.cuda.gemm import GemmCall, gemm_views

NVRTC_OPTIONS = ("-std=c++17",)

# The operand split of a 3xTF32 product (search_spaces.precision): hi = tf32(x), lo =
# tf32(x - hi), rounded to nearest as search_spaces.precision.round_tf32 models (sm_80 and
# later; nvcc-compiled for sm_80 and sm_90 in the tests).
SPLIT_TF32_SOURCE = r"""
extern "C" __global__ void split_tf32(const float *__restrict__ x, float *__restrict__ hi,
                                      float *__restrict__ lo, long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const float v = x[i];
    unsigned h, l;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(h) : "f"(v));
    const float r = v - __uint_as_float(h);
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(l) : "f"(r));
    hi[i] = __uint_as_float(h);
    lo[i] = __uint_as_float(l);
  }
}
"""


class CudaUnavailable(RuntimeError):
    """CuPy or a usable GPU is missing."""


class CupyRuntime:
    """The GPU: CuPy arrays, NVRTC kernels, cuBLAS."""

    def __init__(self):
        try:
            import cupy
        except Exception as e:
            raise CudaUnavailable(f"CuPy is not importable ({type(e).__name__}: {e}); "
                                  f"install cupy-cuda12x or cupy-cuda13x") from None
        try:
            dev = cupy.cuda.Device()
            self.cc = dev.compute_capability
        except Exception as e:
            raise CudaUnavailable(f"no usable CUDA device: {str(e).splitlines()[0]}") from None
        self.cupy = cupy
        self.xp = cupy
        try:     # cudaDevAttrMaxSharedMemoryPerBlockOptin
            self.smem_limit = int(cupy.cuda.runtime.deviceGetAttribute(97, dev.id))
        except Exception:
            self.smem_limit = SHARED_OPTIN_BY_ARCH.get(f"sm_{self.cc}", 48 * 1024)
        self.device_name = f"sm_{self.cc}"
        self.ndarray = cupy.ndarray
        self._split = None
        self._stream = None            # the stream graphs are captured on

    def compile(self, source: str, kernels: list[CudaKernel], cache_dir: Path) -> dict:
        mod = self.cupy.RawModule(code=source, options=NVRTC_OPTIONS)
        fns = {}
        for k in kernels:
            fn = mod.get_function(k.name)
            if k.needs_opt_in:
                fn.max_dynamic_shared_size_bytes = k.smem_bytes
            fns[k.name] = fn
        return fns

    def attributes(self, fn) -> dict:
        out = {}
        for a in ("num_regs", "local_size_bytes", "shared_size_bytes", "max_threads_per_block"):
            try:
                out[a] = int(getattr(fn, a))
            except Exception:
                pass
        return out

    def launch(self, fn, k: CudaKernel, args: list) -> None:
        fn((k.grid,), (k.block,), tuple(args), shared_mem=k.smem_bytes)

    def split_tf32(self, x, out=None):
        """(high, low) TF32 parts of the float32 buffer under ``x``: flat arrays, ``out``'s
        (two flat float32 arrays of at least ``x.size``; what a plan keeps, so that a run
        allocates nothing) or fresh ones."""
        cp = self.cupy
        if self._split is None:
            self._split = cp.RawModule(code=SPLIT_TF32_SOURCE,
                                       options=NVRTC_OPTIONS).get_function("split_tf32")
        n = x.size
        flat = cp.ndarray((n,), dtype=cp.float32, memptr=x.data)
        hi, lo = (cp.empty(n, cp.float32), cp.empty(n, cp.float32)) if out is None else \
            (out[0][:n], out[1][:n])
        threads = 256
        blocks = max(1, min(-(-n // threads), 65535))
        self._split((blocks,), (threads,), (flat, hi, lo, np.int64(n)))
        return hi, lo

    def copy(self, dst, src, scale: float | None = None) -> None:
        """``dst[...] = src`` (times ``scale``) on the device: one elementwise kernel on the
        current stream, nothing allocated."""
        if scale is None:
            dst[...] = src
        else:
            self.cupy.multiply(src, dst.dtype.type(scale), out=dst)

    def address(self, a) -> int:
        """The device address of ``a``'s first element."""
        return int(a.data.ptr)

    def capture(self, fn):
        """The device work ``fn()`` issues, captured into a CUDA graph (not run): on a stream
        of its own, in CuPy's relaxed mode.  Raises what the capture raised (the stream's
        capture ended first)."""
        cp = self.cupy
        if self._stream is None:
            self._stream = cp.cuda.Stream(non_blocking=True)
        s = self._stream
        with s:
            s.begin_capture()
            try:
                fn()
            finally:
                graph = s.end_capture()
        return graph

    def replay(self, graph) -> None:
        """Launch a captured graph on the current stream."""
        graph.launch()

    def gemm(self, call: GemmCall, x, y, c, alpha: float, precision: str,
             beta: float = 0.0) -> None:
        from cupy_backends.cuda.api import runtime as rt
        from cupy_backends.cuda.libs import cublas
        double = c.dtype == np.float64
        dtype = rt.CUDA_R_64F if double else rt.CUDA_R_32F
        compute = (cublas.CUBLAS_COMPUTE_64F if double else
                   cublas.CUBLAS_COMPUTE_32F_FAST_TF32 if precision == "tf32" else
                   cublas.CUBLAS_COMPUTE_32F)
        one = np.array(alpha, dtype=c.dtype)
        scale_c = np.array(beta, dtype=c.dtype)
        op = {"N": getattr(cublas, "CUBLAS_OP_N", 0), "T": getattr(cublas, "CUBLAS_OP_T", 1)}
        handle = self.cupy.cuda.device.get_cublas_handle()
        # on the current stream (a capture's, or the caller's): CuPy's handle keeps the last
        # stream set on it, and its own routines set theirs before each call too
        cublas.setStream(handle, self.cupy.cuda.get_current_stream().ptr)
        fn = getattr(cublas, "gemmStridedBatchedEx", None)
        if fn is None:       # a CuPy build without the binding: strided views and cupy.matmul
            X, Y, C = gemm_views(self.cupy, call, x, y, c)
            C[...] = alpha * self.cupy.matmul(X, Y) + (beta * C if beta else 0)
            return
        fn(
            handle, op[call.transa], op[call.transb], call.m, call.n, call.k,
            one.ctypes.data, x.data.ptr, dtype, call.lda, call.stride_a,
            y.data.ptr, dtype, call.ldb, call.stride_b,
            scale_c.ctypes.data, c.data.ptr, dtype, call.ldc, call.stride_c,
            call.batch, compute, getattr(cublas, "CUBLAS_GEMM_DEFAULT", -1))

    def to_device(self, a):
        return a if isinstance(a, self.cupy.ndarray) else self.cupy.asarray(a)

    def put(self, dst, host: np.ndarray) -> None:
        """Host data into the device array ``dst`` (same shape, contiguous)."""
        dst.set(host)

    def to_host(self, a) -> np.ndarray:
        return self.cupy.asnumpy(a)

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()

    def timer(self):
        """A context that times the device work issued inside it with CUDA events:
        ``seconds`` (the whole), and ``laps`` (seconds between the marks ``lap()`` records)."""
        cupy = self.cupy

        class _Events:
            def __enter__(s):
                s.marks = [cupy.cuda.Event()]
                s.marks[0].record()
                return s

            def lap(s):
                e = cupy.cuda.Event()
                e.record()
                s.marks.append(e)

            def __exit__(s, *exc):
                end = cupy.cuda.Event()
                end.record()
                end.synchronize()
                ms = cupy.cuda.get_elapsed_time
                s.seconds = ms(s.marks[0], end) / 1e3
                s.laps = [ms(a, b) / 1e3 for a, b in zip(s.marks, s.marks[1:])]
        return _Events()

