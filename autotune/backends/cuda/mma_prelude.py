"""The device functions the tensor-core kernel (:mod:`autotune.backends.cuda.mma_kernel`)
calls: TF32 rounding and ``mma.sync`` m16n8k8 (sm_80 and later), the 3xTF32 split, and
``cp.async`` copies of 4 and 16 bytes with their group commit and wait.  The host emulator
defines the same names (:mod:`autotune.backends.cuda.emulator_header`), so the prelude's device
versions are under ``#ifndef AT_EMULATED``."""

MMA_PRELUDE = r"""
#ifndef AUTOTUNE_MMA_PRELUDE
#define AUTOTUNE_MMA_PRELUDE
#ifndef AT_EMULATED
__device__ __forceinline__ unsigned at_tf32(float x) {
  unsigned r;
  asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ void at_mma(float (&d)[4], const unsigned (&a)[4],
                                       const unsigned (&b)[2]) {
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
// one float from global to shared memory without a register (sm_80 cp.async; bytes 0: a zero)
__device__ __forceinline__ void at_cp4(float* dst, const float* src, int bytes) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" :: "r"(d), "l"(src), "r"(bytes));
}
// four floats, 16 bytes on 16-byte boundaries (.cg: through L2 only, as the slices stream)
__device__ __forceinline__ void at_cp16(float* dst, const float* src, int bytes) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void at_cp_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N> __device__ __forceinline__ void at_cp_wait() {
  asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
#endif
__device__ __forceinline__ void at_split(float x, unsigned& hi, unsigned& lo) {
  hi = at_tf32(x);
  lo = at_tf32(x - __uint_as_float(hi));
}
#endif
"""
