#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
typedef float T;
typedef struct { const T *a0, *a1, *a2, *a3; } X;
#define NR 32
#define EXPR(R) (((src[p * s_k + j * s_c] - x->a0[(col0 + j)]) * (R)) * x->a2[(k0 + p)] + x->a3[(k0 + p)])
#define BODY(R) \
  if (s_c == 1) { for (long p = 0; p < kc; p++) { _Pragma("omp simd") for (long j = 0; j < n; j++) d[p * NR + j] = EXPR(R); } } \
  else { for (long p = 0; p < kc; p++) { _Pragma("GCC unroll 32") for (long j = 0; j < NR; j++) d[p * NR + j] = EXPR(R); } }
__attribute__((noinline)) void pack_rsqrt(long kc, long n, const T *restrict src, long s_k, long s_c, T *restrict d, long k0, long col0, const X *x) { BODY(1/sqrtf(x->a1[col0 + j] + (T)1e-5)) }
__attribute__((noinline)) void pack_plain(long kc, long n, const T *restrict src, long s_k, long s_c, T *restrict d, long k0, long col0, const X *x) { BODY(x->a1[col0 + j]) }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
int main(void) {
  long R = 4096, K = 256;   /* rows (the kernel's columns) x K */
  T *src = malloc(sizeof(T) * R * K), *d = malloc(sizeof(T) * NR * K);
  T *a0 = malloc(sizeof(T) * R), *a1 = malloc(sizeof(T) * R), *a2 = malloc(sizeof(T) * K), *a3 = malloc(sizeof(T) * K);
  for (long i = 0; i < R * K; i++) src[i] = (T)(i % 97) / 97;
  for (long i = 0; i < R; i++) { a0[i] = 0.1f; a1[i] = 1.5f; }
  for (long i = 0; i < K; i++) { a2[i] = 1.1f; a3[i] = 0.2f; }
  X x = {a0, a1, a2, a3};
  for (int mode = 0; mode < 2; mode++) {          /* 0: rows contiguous (s_c = 1), 1: K contiguous */
    long s_k = mode ? 1 : R, s_c = mode ? K : 1;
    double best[2] = {1e9, 1e9};
    for (int rep = 0; rep < 20; rep++)
      for (int v = 0; v < 2; v++) {
        double t0 = now();
        for (long c = 0; c < R; c += NR)
          (v ? pack_rsqrt : pack_plain)(K, NR, src + c * s_c, s_k, s_c, d, 0, c, &x);
        double t = now() - t0; if (t < best[v]) best[v] = t;
      }
    printf("s_c=%ld: plain %.1f us, with rsqrt %.1f us, per element %.2f / %.2f ns\n", s_c, best[0] * 1e6, best[1] * 1e6, best[0] * 1e9 / (R * K), best[1] * 1e9 / (R * K));
  }
  return 0;
}
