#include <math.h>
typedef float T;
typedef struct { const T *var; const T *mu; const T *w; const T *b; } X;
#define MR 8
void pack_a(long mc, long kc, const T *restrict A, long s_r, long s_k, T *restrict dst,
            long row0, long k0, const X *x) {
  for (long ir = 0; ir < mc; ir += MR) {
    T *restrict d = dst + ir * kc;
    const T *restrict src = A + ir * s_r;
    for (long p = 0; p < kc; p++) {
      #pragma GCC unroll 8
      for (long i = 0; i < MR; i++) d[p * MR + i] = (src[i * s_r + p * s_k] - x->mu[row0 + ir + i]) * (1.0f / sqrtf(x->var[row0 + ir + i] + 1e-5f)) * x->w[k0 + p] + x->b[k0 + p];
    }
  }
}
