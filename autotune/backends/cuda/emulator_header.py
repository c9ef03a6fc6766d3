"""The C++ header that lets the host emulator (:mod:`autotune.backends.cuda.emulator`) compile
generated CUDA as host code: the built-ins (thread and block indices, a block barrier, warp
shuffles), the tensor-core instructions the kernel uses (``mma.sync`` m16n8k8 TF32 lane by lane
with the PTX fragment layout, ``cvt.rna``) and ``cp.async`` with its group waits, each as the
device does it where a kernel's correctness depends on it."""

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
// a warp is the block's emulated threads (AT_WARP, a power of two, defined after this
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

