"""Runs a candidate on an NVIDIA GPU: generated loop-group kernels (NVRTC through CuPy) and
library contractions through cuBLAS, in the candidate's layouts.

``CudaPlan(w, cand, cache_dir)`` has the call contract of :class:`autotune.backends.cpu.executor.CompiledPlan`:
``plan(**inputs) -> {output: numpy array}`` (inputs may also be CuPy arrays already on the
device).  It synchronizes the device before returning, so a caller's ``perf_counter`` around a
call measures the whole run (host transfers included); :meth:`CudaPlan.timed_call` times the
device work alone with CUDA events (inputs uploaded once, warm-up, median of repeats).

Materialized intermediates and the outputs live in device buffers allocated once per plan,
each stored in the candidate's layout (``storage = logical.transpose(perm)``).  A library group
is one ``cublasGemmStridedBatchedEx`` call on strided views of those buffers (no copies when
the layouts allow a matrix view; otherwise the operand is copied to a contiguous one first), with
TF32 tensor cores only when the workload's tolerance admits it (``rtol >= 1e-3``): the plan's
``precision`` attribute says which ("fp32", "tf32" or "fp64").

CuPy is imported lazily, inside :class:`CupyRuntime`.  :class:`autotune.backends.cuda.emulator.HostEmulator`
runs the same
generated CUDA source on the CPU (compiled as C++ with a small header that maps the CUDA
built-ins, a few threads per block with a real barrier for ``__syncthreads``) and the same
cuBLAS argument lists through a NumPy model of ``gemmStridedBatched``: the tests check the
backend's results against the reference without a GPU.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from search_spaces.candidate import IMPL_LIBRARY, Candidate
from search_spaces.gemm import gemm_form
from search_spaces.partition import groups, materialized
from search_spaces.workload import Workload

from costmodel.cuda_limits import SHARED_OPTIN_BY_ARCH

from autotune.backends.cuda.codegen import CudaKernel, check_limits, generate_cuda

TF32_RTOL = 1e-3           # a tolerance this loose admits TF32 tensor-core GEMMs
NVRTC_OPTIONS = ("-std=c++17",)


class CudaUnavailable(RuntimeError):
    """CuPy or a usable GPU is missing."""


def precision_of(w: Workload) -> str:
    """"tf32" when the workload's tolerance admits TF32 GEMMs, else its own type."""
    if w.dtype == "float64":
        return "fp64"
    return "tf32" if w.rtol >= TF32_RTOL else "fp32"


# ---- cuBLAS argument lists ---------------------------------------------------------------------
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
                 alpha: float) -> None:
    """What cuBLAS does with ``call`` on flat buffers ``x`` (first), ``y`` (second), ``c``:
    a NumPy model used to test the argument lists without a GPU."""
    X, Y, C = gemm_views(np, call, x, y, c)
    C[...] = alpha * np.matmul(X.astype(np.float64), Y.astype(np.float64))


def _mat3(arr, idx: tuple[str, ...], groups3) -> tuple[Mat, int] | None:
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


# ---- runtimes ----------------------------------------------------------------------------------
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


# ---- the plan ------------------------------------------------------------------------------------
class CudaPlan:
    """An executable candidate on the GPU: ``plan(**inputs) -> {output: numpy array}``.

    Raises :class:`autotune.backends.cuda.codegen.TileTooLarge` before compiling anything when a kernel's
    footprints exceed the device's shared memory per block, and :class:`CudaUnavailable`
    without CuPy or a device.
    """

    def __init__(self, w: Workload, cand: Candidate, cache_dir: Path, runtime=None,
                 block: int = 256):
        self.w, self.cand = w, cand
        self.rt = runtime if runtime is not None else CupyRuntime()
        self.dtype = np.dtype(w.dtype)
        self.precision = precision_of(w)
        src, kernels = generate_cuda(w, cand, block=block)
        check_limits(kernels, self.rt.smem_limit, self.rt.device_name)
        self.source = src
        self.kernels = {k.anchor: k for k in kernels}
        self.fns = self.rt.compile(src, kernels, Path(cache_dir)) if kernels else {}
        self.kernel_attrs = {k.name: self.rt.attributes(self.fns[k.name]) for k in kernels}
        self.groups = groups(w, cand.fused_pairs)
        mats = materialized(w, cand.fused_pairs)
        xp = self.rt.xp
        self.storage: dict[str, object] = {}
        self.logical: dict[str, object] = {}
        for t in sorted(mats | set(w.outputs)):
            shape = w.shapes[t]
            perm = cand.layout(t, len(shape))
            store = xp.empty([shape[d] for d in perm], dtype=self.dtype)
            self.storage[t] = store
            self.logical[t] = store.transpose(tuple(int(p) for p in np.argsort(perm)))
        self._gemm_plans: dict[str, tuple] = {}

    # ---- running ---------------------------------------------------------------------------
    def upload(self, inputs: dict) -> dict:
        """The inputs on the device, contiguous, in the workload's dtype (device arrays that
        already are pass through)."""
        rt, out = self.rt, {}
        for n, shp in self.w.inputs:
            if n not in inputs:
                raise ValueError(f"missing input {n!r}")
            a = inputs[n]
            if isinstance(a, np.ndarray) or not isinstance(a, rt.ndarray):
                a = np.ascontiguousarray(a, dtype=self.dtype)
            a = rt.to_device(a)
            if tuple(a.shape) != tuple(shp):
                raise ValueError(f"input {n!r} has shape {tuple(a.shape)}, expected {shp}")
            if a.dtype != self.dtype or not a.flags.c_contiguous:
                a = rt.xp.ascontiguousarray(a, dtype=self.dtype)
            out[n] = a
        return out

    def run_device(self, **inputs) -> dict:
        """Run on device-resident (or host) inputs; returns the plan's device output buffers
        (overwritten by the next run) without synchronizing."""
        w, rt = self.w, self.rt
        storage = dict(self.storage)
        env = dict(self.logical)
        for n, a in self.upload(inputs).items():
            env[n] = storage[n] = a
        for g in self.groups:
            if self.cand.schedule(g.anchor).impl == IMPL_LIBRARY:
                self._gemm(g.anchor, env)
            else:
                k = self.kernels[g.anchor]
                rt.launch(self.fns[k.name], k, [storage[t] for t in k.args])
        return {o: self.logical[o] for o in w.outputs}

    def __call__(self, **inputs) -> dict[str, np.ndarray]:
        outs = self.run_device(**inputs)
        host = {o: self.rt.to_host(a) for o, a in outs.items()}
        self.rt.synchronize()
        return host

    def timed_call(self, inputs: dict, warmup: int = 1, repeats: int = 3,
                   give_up_s: float | None = None) -> tuple[dict[str, np.ndarray], list[float]]:
        """(outputs of the first run, device times of ``repeats`` runs in seconds): inputs are
        uploaded once, each run is timed with CUDA events after ``warmup`` untimed runs.  A
        first timed run slower than ``give_up_s`` (the search's give-up factor times its best)
        is the only one: the candidate cannot be the best, more runs only cost time."""
        dev = self.upload(inputs)
        outs = {o: self.rt.to_host(a) for o, a in self.run_device(**dev).items()}
        for _ in range(warmup):
            self.run_device(**dev)
        times = []
        for _ in range(repeats):
            with self.rt.timer() as t:
                self.run_device(**dev)
            times.append(t.seconds)
            if give_up_s is not None and t.seconds > give_up_s:
                break
        self.rt.synchronize()
        return outs, times

    def median_time(self, inputs: dict, warmup: int = 1, repeats: int = 3) -> float:
        return statistics.median(self.timed_call(inputs, warmup, repeats)[1])

    # ---- library GEMMs ---------------------------------------------------------------------
    def _gemm(self, name: str, env) -> None:
        xp = self.rt.xp
        op = self.w.op(name)
        f = gemm_form(op)
        ga, gb, go = (f.batch, f.m, f.k), (f.batch, f.k, f.n), (f.batch, f.m, f.n)
        A, B, O = env[f.a.tensor], env[f.b.tensor], env[name]

        def contiguous(arr, idx, grp):
            order = [idx.index(i) for g in grp for i in g]
            sizes = [math.prod(arr.shape[idx.index(i)] for i in g) for g in grp]
            return xp.ascontiguousarray(arr.transpose(order)).reshape(sizes)

        def desc(arr, idx, grp):
            got = _mat3(arr, idx, grp)
            return got[0] if got else None

        da, db, dc = desc(A, f.a.idx, ga), desc(B, f.b.idx, gb), desc(O, op.parallel, go)
        batch = math.prod(op.extent(i) for i in f.batch)
        a_buf, b_buf, c_buf = A, B, O
        tmp_out = None
        for _ in range(4):
            call = plan_gemm(da, db, dc, batch) if None not in (da, db, dc) else \
                ("A" if da is None else "B" if db is None else "C")
            if isinstance(call, GemmCall):
                break
            if call == "A":
                a_buf = contiguous(A, f.a.idx, ga)
                da = Mat(a_buf.shape[1], a_buf.shape[2], a_buf.shape[2], 1,
                         a_buf.shape[1] * a_buf.shape[2] if batch > 1 else 0)
            elif call == "B":
                b_buf = contiguous(B, f.b.idx, gb)
                db = Mat(b_buf.shape[1], b_buf.shape[2], b_buf.shape[2], 1,
                         b_buf.shape[1] * b_buf.shape[2] if batch > 1 else 0)
            else:
                m_, n_ = math.prod(op.extent(i) for i in f.m), math.prod(op.extent(i) for i in f.n)
                tmp_out = c_buf = xp.empty((batch, m_, n_), dtype=self.dtype)
                dc = Mat(m_, n_, n_, 1, m_ * n_ if batch > 1 else 0)
        else:
            raise RuntimeError(f"no cuBLAS argument list for {name}")
        bufs = {"A": a_buf, "B": b_buf}
        # every array here starts at its buffer's first element (transposes of storage, or
        # fresh contiguous copies): its data pointer is the buffer's
        self.rt.gemm(call, bufs[call.first], bufs[call.second], c_buf, f.scale, self.precision)
        if tmp_out is not None:
            order = [op.parallel.index(i) for g in go for i in g]
            t = O.transpose(order)
            t[...] = tmp_out.reshape(t.shape)

