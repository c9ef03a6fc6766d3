"""How the generated contraction kernel's threads wait for one another: the kernel's own
barrier (:data:`BARRIER`) and B's micro-panels packed on demand (:func:`lazy_source`).

Both are C source that ``gemm_driver`` assembles into the kernel; the barrier needs the
kernel's headers (``omp.h``, ``time.h``, the futex syscall), the on-demand packing its types
(``T``, ``X``), ``NR`` and its packing routines.
"""
from __future__ import annotations

# How long a thread waits at the kernel's barrier spinning before it sleeps (microseconds).
# Why not OpenMP's barrier: it sleeps after GOMP_SPINCOUNT spins (autotune.threads keeps that
# short, about 110 us on the 2-core Xeon, so that an idle runtime frees its core for the other),
# and a thread a little late costs the sleeper a futex wake-up of tens of microseconds, per
# barrier.  Measured there (one process, 7 interleaved rounds, scratch A/B of the same kernels
# with either barrier, 6 x 64 tiles): 256 x 512 x 512 192 -> 208 GFLOP/s, 256 x 128 x 4096
# 191 -> 199, bilinear's best plan 1.734 -> 1.633 ms; with one or two other processes keeping
# the cores busy the two barriers ran alike once a block's K slices were packed at once
# (before that, 64 barriers a call made the spinning one 1.6x slower there).
BARRIER_SPIN_US = 50.0

BARRIER = """
/* the threads' own barrier inside the kernel (at_barrier): a count and a sense that flips
   when the last thread arrives; a waiting thread spins up to t_spin_us, then sleeps on the
   sense (Linux futex) until the last one wakes it */
static int g_bar_count, g_bar_sense, g_bar_sleepers;
static __thread int t_sense, t_team, t_rank;
static __thread double t_spin_us = AT_BARRIER_SPIN_US;
static inline double at_now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}
static inline void at_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}
static inline void at_barrier(void) {
  if (t_team <= 1) return;
  int s = !t_sense;
  t_sense = s;
  if (__atomic_add_fetch(&g_bar_count, 1, __ATOMIC_SEQ_CST) == t_team) {
    __atomic_store_n(&g_bar_count, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&g_bar_sense, s, __ATOMIC_SEQ_CST);
#ifdef __linux__
    if (__atomic_load_n(&g_bar_sleepers, __ATOMIC_SEQ_CST))
      syscall(SYS_futex, &g_bar_sense, FUTEX_WAKE_PRIVATE, 0x7fffffff, 0, 0, 0);
#endif
    return;
  }
  double start = at_now_us(), until = start + t_spin_us;
  for (unsigned i = 1;; i++) {
    if (__atomic_load_n(&g_bar_sense, __ATOMIC_ACQUIRE) == s) return;
    at_pause();
    if (i % 64 == 0 && at_now_us() > until) break;
  }
#ifdef __linux__
  __atomic_add_fetch(&g_bar_sleepers, 1, __ATOMIC_SEQ_CST);
  while (__atomic_load_n(&g_bar_sense, __ATOMIC_SEQ_CST) != s)
    syscall(SYS_futex, &g_bar_sense, FUTEX_WAIT_PRIVATE, !s, 0, 0, 0);
  __atomic_sub_fetch(&g_bar_sleepers, 1, __ATOMIC_SEQ_CST);
#else
  while (__atomic_load_n(&g_bar_sense, __ATOMIC_ACQUIRE) != s) sched_yield();
#endif
  /* a partner late by a little more than the spin: spin longer next time; late by far (it
     lost its core to another process): spin less, so as not to hold this core from it */
  double waited = at_now_us() - start;
  t_spin_us = waited < 4 * AT_BARRIER_SPIN_US
      ? (t_spin_us * 2 < AT_BARRIER_SPIN_US ? t_spin_us * 2 : AT_BARRIER_SPIN_US)
      : (t_spin_us / 2 > 1.0 ? t_spin_us / 2 : 1.0);
}
"""


def lazy_source(pack_b: str) -> str:
    """``at_need(lb, col)``: the shared B block's micro-panel at column ``col`` packed before a
    thread reads it, by whichever thread needs it first (``pack_b``: the C statement that packs
    the panel at ``jr`` of a slice, over the names :c:type:`LB` holds).

    Why not pack every panel and then wait at a barrier: the threads do not arrive together.
    Traced on the 2-core Xeon (512 x 1024 x 256, 40 calls): the second thread entered the
    parallel region 15-20 us after the first (a futex wake-up; 50 us after a BLAS call), each
    packed its half of B in 40 us, and the compute began at the barrier after both, 55-100 us
    into an 800 us call.  On demand, the first thread packs what it needs while the second is
    still waking and there is no barrier before the compute.  A panel's state says which use
    of the buffer it holds: ``2 e`` packed for epoch ``e`` (one K slice of one column block of
    one call, numbered the same by every thread), ``2 e - 1`` being packed; anything less is
    stale, so nothing is reset between calls."""
    return f"""
typedef struct {{
  long *state, epoch;
  const T *RB, *Bb, *R2;
  T *bb;
  long kc, nc, pc, jc, rb_k, rb_c, q_a, q_k;
  const X *x;
}} LB;
static long *g_lb_state, g_lb_cap, g_lb_epoch;
static long *at_lb_state(long n) {{
  if (n > g_lb_cap) {{
    free(g_lb_state);
    g_lb_state = (long *)calloc(n, sizeof(long));
    g_lb_cap = n;
  }}
  return g_lb_state;
}}
static void at_pack_panel(const LB *l, long jr) {{
  const T *RB = l->RB, *Bb = l->Bb, *R2 = l->R2;
  T *bb = l->bb;
  long kc = l->kc, nc = l->nc, pc = l->pc, jc = l->jc, rb_k = l->rb_k, rb_c = l->rb_c;
  long q_a = l->q_a, q_k = l->q_k;
  const X *x = l->x;
  (void)RB; (void)Bb; (void)R2; (void)nc; (void)q_a; (void)q_k; (void)x; (void)pc;
  {pack_b}
}}
static inline void at_need(const LB *l, long col) {{
  long *s = l->state + (col - l->jc) / NR, ready = 2 * l->epoch;
  long v = __atomic_load_n(s, __ATOMIC_ACQUIRE);
  if (v == ready) return;
  if (v < ready - 1 && __atomic_compare_exchange_n(s, &v, ready - 1, 0, __ATOMIC_ACQ_REL,
                                                     __ATOMIC_ACQUIRE)) {{
    at_pack_panel(l, col - l->jc);
    __atomic_store_n(s, ready, __ATOMIC_RELEASE);
    return;
  }}
  /* another thread is packing it (a few microseconds): wait, yielding now and then in case
     that thread has lost its core */
  for (unsigned i = 1; __atomic_load_n(s, __ATOMIC_ACQUIRE) != ready; i++) {{
    at_pause();
    if (i % 4096 == 0) sched_yield();
  }}
}}
"""
