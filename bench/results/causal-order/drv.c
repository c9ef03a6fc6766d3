#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include <omp.h>
typedef void (*fn)(void **);
static float rnd(unsigned *s) { *s = *s * 1664525u + 1013904223u; return ((*s >> 8) / 16777216.0f) * 2 - 1; }
int cmp(const void *a, const void *b) { double x = *(double*)a, y = *(double*)b; return x < y ? -1 : x > y; }
int main(int argc, char **argv) {
  int n = argc - 1; long N = 2048L*8*32;
  float *q = malloc(4*N), *k = malloc(4*N), *v = malloc(4*N), *o = malloc(4*N);
  unsigned sd = 1; for (long x = 0; x < N; x++) { q[x] = rnd(&sd); k[x] = rnd(&sd); v[x] = rnd(&sd); }
  fn f[16]; for (int a = 0; a < n; a++) { void *h = dlopen(argv[a+1], RTLD_NOW); if (!h) { printf("%s\n", dlerror()); return 1; } f[a] = (fn)dlsym(h, "group_3"); if (!f[a]) { printf("nosym\n"); return 1;} }
  void *args[4] = {q, k, v, o};
  enum { ROUNDS = 41 }; static double t[16][ROUNDS];
  for (int a = 0; a < n; a++) f[a](args);
  for (int r = 0; r < ROUNDS; r++) for (int a = 0; a < n; a++) { double t0 = omp_get_wtime(); f[a](args); t[a][r] = omp_get_wtime() - t0; }
  for (int a = 0; a < n; a++) { qsort(t[a], ROUNDS, sizeof(double), cmp); printf("%-28s median %7.3f ms  best %7.3f ms\n", argv[a+1], t[a][ROUNDS/2]*1e3, t[a][0]*1e3); }
  return 0;
}
