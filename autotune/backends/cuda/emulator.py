"""Generated CUDA on the host: :class:`HostEmulator` is a runtime for
:class:`autotune.backends.cuda.executor.CudaPlan` that compiles the generated kernels as C++ with a small
header mapping the CUDA built-ins (a few threads per block with a real barrier for
``__syncthreads``) and runs the cuBLAS argument lists through a NumPy model of
``gemmStridedBatched``, so the CUDA backend's results are checked without a GPU."""
from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

from search_spaces.precision import split_tf32

from autotune.backends.cuda.codegen import CudaKernel
from autotune.backends.cuda.gemm import GemmCall, emulate_gemm

EMU_HEADER = r"""// CUDA built-ins for running generated kernels on the host (autotune.backends.cuda.emulator)
#include <math.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <atomic>
#include <vector>
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(...)
#define __align__(n)
#define __restrict__ __restrict
struct at_dim3 { unsigned x, y, z; };
static __thread at_dim3 threadIdx, blockIdx;
static at_dim3 blockDim, gridDim;
// the block's barrier: a generation counter the last arrival advances; the others yield the
// core until it moves (the emulated threads outnumber the cores, so spinning would starve
// the thread they wait for; a futex barrier costs a kernel round trip per thread per wait)
static std::atomic<unsigned> at_arrived{0}, at_generation{0};
static unsigned at_nt = 1;
static inline void at_barrier() {
  const unsigned g = at_generation.load(std::memory_order_acquire);
  if (at_arrived.fetch_add(1, std::memory_order_acq_rel) + 1 == at_nt) {
    at_arrived.store(0, std::memory_order_relaxed);
    at_generation.fetch_add(1, std::memory_order_release);
  } else {
    while (at_generation.load(std::memory_order_acquire) == g) sched_yield();
  }
}
static inline void __syncthreads() { at_barrier(); }
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / sqrt(x); }
static inline float __int_as_float(unsigned int i) { float f; memcpy(&f, &i, 4); return f; }
static inline float __uint_as_float(unsigned int i) { float f; memcpy(&f, &i, 4); return f; }
static inline double __longlong_as_double(unsigned long long i) {
  double d; memcpy(&d, &i, 8); return d; }
// a warp is the block's emulated threads (AT_WARP, a power of two, defined before this
// header): a shuffle is a store, a block barrier, the partner's load and a barrier
static float at_shfl_f32[1024];
static double at_shfl_f64[1024];
static inline float __shfl_xor_sync(unsigned, float v, int o) {
  at_shfl_f32[threadIdx.x] = v; at_barrier();
  const float r = at_shfl_f32[threadIdx.x ^ (unsigned)o]; at_barrier();
  return r; }
static inline double __shfl_xor_sync(unsigned, double v, int o) {
  at_shfl_f64[threadIdx.x] = v; at_barrier();
  const double r = at_shfl_f64[threadIdx.x ^ (unsigned)o]; at_barrier();
  return r; }
// tensor cores (autotune.backends.cuda.mma_kernel): the block's 32 emulated threads are one
// warp; mma.sync m16n8k8 TF32 gathers every lane's fragments (the PTX ISA's layout: lane
// 4g + t holds A rows g, g+8 at k t, t+4; B k t, t+4 at column g; C rows g, g+8 at columns
// 2t, 2t+1), then each lane sums its own four elements in float32
#define AT_EMULATED 1
static inline unsigned at_tf32(float x) {      // cvt.rna: to nearest, ties away from zero
  unsigned b; memcpy(&b, &x, 4); return (b + 0x1000u) & 0xFFFFE000u; }
static unsigned at_mma_a[32][4], at_mma_b[32][2];
static inline void at_mma(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
  const unsigned l = threadIdx.x & 31u, g = l >> 2, t = l & 3u;
  for (int i = 0; i < 4; ++i) at_mma_a[l][i] = a[i];
  at_mma_b[l][0] = b[0]; at_mma_b[l][1] = b[1];
  at_barrier();
  for (unsigned h = 0; h < 4; ++h) {
    const unsigned r = g + (h >> 1) * 8, c = 2 * t + (h & 1u);
    float s = d[h];
    for (unsigned k = 0; k < 8; ++k)
      s += __uint_as_float(at_mma_a[(r & 7u) * 4 + (k & 3u)][(r >> 3) + 2 * (k >> 2)]) *
           __uint_as_float(at_mma_b[c * 4 + (k & 3u)][k >> 2]);
    d[h] = s;
  }
  at_barrier();
}
// cp.async (sm_80): a copy lands in shared memory only when a cp.async.wait_group lets its
// group complete, as on the device, so a kernel that reads a slice before waiting for it
// reads stale data here too (the copy's source is read at issue: kernels never write their
// operands)
struct at_cp_op { float* dst; float v; };
static thread_local std::vector<at_cp_op> at_cp_pending;   // issued, not yet landed
static thread_local std::vector<size_t> at_cp_ends;        // each committed group's end
static inline void at_cp4(float* dst, const float* src, int bytes) {
  at_cp_pending.push_back({dst, bytes ? *src : 0.0f}); }
static inline void at_cp16(float* dst, const float* src, int bytes) {
  for (int i = 0; i < 4; ++i) at_cp_pending.push_back({dst + i, bytes ? src[i] : 0.0f}); }
static inline void at_cp_commit() { at_cp_ends.push_back(at_cp_pending.size()); }
template <int N> static inline void at_cp_wait() {   // all but the N newest groups land
  if ((int)at_cp_ends.size() <= N) return;
  const size_t upto = at_cp_ends[at_cp_ends.size() - 1 - N];
  for (size_t i = 0; i < upto; ++i) *at_cp_pending[i].dst = at_cp_pending[i].v;
  at_cp_pending.erase(at_cp_pending.begin(), at_cp_pending.begin() + upto);
  at_cp_ends.erase(at_cp_ends.begin(), at_cp_ends.end() - N);
  for (size_t& e : at_cp_ends) e -= upto;
}
#define AT_SMEM_BYTES (1L << 24)
alignas(16) float smem_f32[AT_SMEM_BYTES / 4];
alignas(16) double smem_f64[AT_SMEM_BYTES / 8];
struct at_job { void (*body)(void**); void** args; long grid; unsigned tid; };
static void* at_thread(void* p) {
  at_job* j = (at_job*)p;
  threadIdx.x = j->tid; threadIdx.y = threadIdx.z = 0;
  for (long b = 0; b < j->grid; ++b) {
    blockIdx.x = (unsigned)b; blockIdx.y = blockIdx.z = 0;
    j->body(j->args);
    at_barrier();   // the next block reuses shared memory
  }
  return 0;
}
static void at_run(long grid, int nt, void (*body)(void**), void** args) {
  blockDim.x = (unsigned)nt; blockDim.y = blockDim.z = 1;
  gridDim.x = (unsigned)grid; gridDim.y = gridDim.z = 1;
  at_nt = (unsigned)nt; at_arrived = 0;
  pthread_t th[1024]; at_job jobs[1024];
  for (int t = 0; t < nt; ++t) {
    jobs[t].body = body; jobs[t].args = args; jobs[t].grid = grid; jobs[t].tid = (unsigned)t;
    pthread_create(&th[t], 0, at_thread, &jobs[t]);
  }
  for (int t = 0; t < nt; ++t) pthread_join(th[t], 0);
}
"""
EMU_SMEM_BYTES = 1 << 24


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
        src = f"#define AT_WARP {self.threads}\n" + EMU_HEADER + source + "\n" + \
            "\n".join(wrappers) + "\n"
        flags = ["-std=c++17", "-O1", "-fPIC", "-shared", "-pthread", "-w"]
        digest = hashlib.sha256((src + " ".join(flags)).encode()).hexdigest()[:24]
        cache_dir = Path(cache_dir)
        cache_dir.mkdir(parents=True, exist_ok=True)
        lib = cache_dir / f"emu_{digest}.so"
        if not lib.exists():
            with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
                cpp = Path(tmp) / "k.cpp"
                cpp.write_text(src)
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
