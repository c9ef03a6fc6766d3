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

    def gemm(self, call: GemmCall, x, y, c, alpha: float, precision: str) -> None:
        from cupy_backends.cuda.api import runtime as rt
        from cupy_backends.cuda.libs import cublas
        double = c.dtype == np.float64
        dtype = rt.CUDA_R_64F if double else rt.CUDA_R_32F
        compute = (cublas.CUBLAS_COMPUTE_64F if double else
                   cublas.CUBLAS_COMPUTE_32F_FAST_TF32 if precision == "tf32" else
                   cublas.CUBLAS_COMPUTE_32F)
        one = np.array(alpha, dtype=c.dtype)
        zero = np.array(0.0, dtype=c.dtype)
        op = {"N": getattr(cublas, "CUBLAS_OP_N", 0), "T": getattr(cublas, "CUBLAS_OP_T", 1)}
        handle = self.cupy.cuda.device.get_cublas_handle()
        fn = getattr(cublas, "gemmStridedBatchedEx", None)
        if fn is None:       # a CuPy build without the binding: strided views and cupy.matmul
            X, Y, C = gemm_views(self.cupy, call, x, y, c)
            C[...] = alpha * self.cupy.matmul(X, Y)
            return
        fn(
            handle, op[call.transa], op[call.transb], call.m, call.n, call.k,
            one.ctypes.data, x.data.ptr, dtype, call.lda, call.stride_a,
            y.data.ptr, dtype, call.ldb, call.stride_b,
            zero.ctypes.data, c.data.ptr, dtype, call.ldc, call.stride_c,
            call.batch, compute, getattr(cublas, "CUBLAS_GEMM_DEFAULT", -1))

    def to_device(self, a):
        return a if isinstance(a, self.cupy.ndarray) else self.cupy.asarray(a)

    def to_host(self, a) -> np.ndarray:
        return self.cupy.asnumpy(a)

    def synchronize(self) -> None:
        self.cupy.cuda.Device().synchronize()

    def timer(self):
        cupy = self.cupy

        class _Events:
            def __enter__(s):
                s.start, s.end = cupy.cuda.Event(), cupy.cuda.Event()
                s.start.record()
                return s

            def __exit__(s, *exc):
                s.end.record()
                s.end.synchronize()
                s.seconds = cupy.cuda.get_elapsed_time(s.start, s.end) / 1e3
        return _Events()

