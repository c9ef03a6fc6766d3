"""The generated contraction kernel's driver: the loops over batch items and blocks, the
threads and their packing buffers, the entry point :data:`ENTRY`, and the assembled source
(:func:`kernel_source`).  What each piece computes: ``gemm_kernel``'s docstring.
"""
from __future__ import annotations

from search_spaces.kernel import PACK_ALL_BYTES, SPLIT_BATCH, SPLIT_N
from search_spaces.serial import c_condition

from autotune.backends.cpu.prelude import PRELUDE
from autotune.backends.cpu.gemm_sync import BARRIER, BARRIER_SPIN_US, lazy_source
from autotune.backends.cpu.gemm_kernel import (STORE_COLS, STORE_ROWS, KernelSpec, half_at,
                                               macro_source, may_skip_a, may_skip_b,
                                               micro_kernel)
from autotune.backends.cpu.gemm_pack import gather_setup, packers, pair_packer
from autotune.backends.loops import SCALAR_TYPES

ENTRY = "gemm_kernel"


# The streaming stores and their fence through GCC's own builtins (what xmmintrin.h and
# emmintrin.h wrap): immintrin.h took 0.35-0.39 s of each kernel's ~1.1 s compile (GCC 12,
# the backend's flags; a unit with nothing but the header, 0.39 s against 0.04 s).  Other
# compilers get the header.
STREAM_INTRINSICS = """#if defined(__GNUC__) && !defined(__clang__)
#define AT_SFENCE() __builtin_ia32_sfence()
#define AT_STREAM_PS(p, v) __builtin_ia32_movntps((p), (v))
#define AT_STREAM_PD(p, v) __builtin_ia32_movntpd((p), (v))
#else
#include <immintrin.h>
#define AT_SFENCE() _mm_sfence()
#define AT_STREAM_PS(p, v) _mm_stream_ps((p), (v))
#define AT_STREAM_PD(p, v) _mm_stream_pd((p), (v))
#endif"""


def _pack_b(s: KernelSpec) -> str:
    """The C statement that packs B's micro-panel at ``jr`` of a slice (a pair's paired operand
    from its two sources, R2 the second: strides q_a along the paired axis, q_k along K)."""
    return ("pack_pair(kc, RB + pc * rb_k, rb_c, rb_k, R2 + pc * q_k, q_a, q_k, bb + jr * kc, "
            "jc + jr);" if s.pair == "cols" else
            "pack_b(kc, nc - jr < NR ? nc - jr : NR, Bb + jr * rb_c, rb_k, rb_c, bb + jr * kc,\n"
            "                 pc, jc + jr, x);")


def _item(s: KernelSpec, shared: bool) -> str:
    """All blocks of one batch item.  ``shared``: called by every thread of a parallel region,
    which share one packed B block, each micro-panel packed by the first thread to need it
    (``at_need``, :func:`~autotune.backends.cpu.gemm_sync.lazy_source`), and split the blocks
    of C; the kernel's own barrier (``at_barrier``) keeps the block intact until every thread is
    done with it.  Where the whole K of a column block fits in :data:`PACK_ALL_BYTES` (``all``),
    every K slice has a buffer of its own and the slices run without a barrier between them (a
    static schedule gives each thread the same blocks of C in every slice): one barrier a
    column block instead of one a slice.  Serial (``split = "batch"``): each thread packs its
    own B slice by slice.  The blocks of C: the rows in spans of ``span`` (one a thread), each
    cut into ``qs`` blocks of at most ``mcx`` rows, and each block into ``nq`` column chunks
    (whole micro-panels): more than one where the spans alone leave threads idle (see
    :func:`_entry`)."""
    blocks = "#pragma omp for schedule(static) collapse(2) nowait" if shared else ""
    name = "item_shared" if shared else "item_serial"
    c_at = f"RC + {half_at(s, 'rows', 'ic')} * rc_r + {half_at(s, 'cols', '(jc + jq)')} * rc_c"
    pack_a = ("if (pa) for (long q = 0; q < mc; q += MR) pack_pair(kc, RA + pc * ra_k, ra_r, "
              "ra_k, R2 + pc * q_k, q_a, q_k, ab + q * kc, ic + q);" if s.pair == "rows"
              else "if (pa) pack_a(mc, kc, Ab, ra_r, ra_k, ab, ic, pc, x);")
    loop = f"""{blocks}
      for (long ib = 0; ib < nbk; ib++)
        for (long jq = 0; jq < nc; jq += cw) {{
          long ic = at_span(ib / qs, nsp, span, M) + ib % qs * mcx,
               end = at_span(ib / qs + 1, nsp, span, M);
          if (ic >= end) continue;
          long mc = end - ic < mcx ? end - ic : mcx, nw = nc - jq < cw ? nc - jq : cw;
          if (AT_SYM && jc + jq + nw <= ic) continue;   /* the block wholly below the diagonal */
          const T *Ab = RA + ic * ra_r + pc * ra_k;
          {pack_a}
          macro(mc, nw, kc, pa ? ab : Ab, ra_r, ra_k, pa, pb ? bb + jq * kc : Bb + jq * rb_c,
                rb_k, pb, {c_at}, rc_r, rc_c, kb == 0 ? wr : 0, kb == nk - 1, alpha, ic,
                jc + jq, pc, ea, eb, x, {"lbp" if shared else "0"});
        }}"""
    if shared:      # B's panels packed on demand; B read in place needs no barrier at all
        slice_ = f"""LB lb = {{g_lb_state + (all ? kb * (ncx / NR) : 0), ep + jc / NC * nk + kb, RB,
               Bb, R2, bb, kc, nc, pc, jc, rb_k, rb_c, q_a, q_k, x}};
      const LB *lbp = pb ? &lb : 0;
      {loop}
      if (pb && !all) at_barrier();"""
        after = "if (pb && all) at_barrier();"
    else:
        slice_ = f"""if (pb) for (long jr = 0; jr < nc; jr += NR)
        {_pack_b(s)}
      {loop}"""
        after = ""
    return f"""
static void {name}(const T *RA, long ra_r, long ra_k, const T *RB, long rb_k, long rb_c, T *RC,
                   long rc_r, long rc_c, long M, long N, long K, long span, long qs,
                   long mcx, int pa, int pb,
                   int wr, T alpha, T *ab, T *bb0, T *ea, T *eb, const X *x, long nq,
                   const T *R2, long q_a, long q_k, int all, long ncx, long ep, long n0) {{
  (void)R2; (void)q_a; (void)q_k; (void)all; (void)ep;
  long nk = K > 0 ? (K + KC - 1) / KC : 1, nsp = (M + span - 1) / span, nbk = nsp * qs;
  for (long jc = n0; jc < N; jc += NC) {{
    long nc = N - jc < NC ? N - jc : NC;
    long cw = nq > 1 ? ((nc + nq - 1) / nq + NR - 1) / NR * NR : nc;
    for (long kb = 0; kb < nk; kb++) {{
      long pc = kb * KC, kc = K - pc < KC ? K - pc : KC;
      const T *Bb = RB + pc * rb_k + jc * rb_c;
      T *bb = all ? bb0 + pc * ncx : bb0;
      {slice_}
    }}
    {after}
  }}
}}
"""


def _entry(s: KernelSpec) -> str:
    """``gemm_kernel(A, B, C, d, alpha, extra)``: ``d`` holds batch, M, N, K (a pair: the
    kernel's, twice C's along the paired axis in whole tiles) and the element strides (batch,
    row, col) of A, B and C, then for each extra array its inner batch extent and strides
    (outer batch, inner batch, row, col: a batch item b at b / nbi and b % nbi, so that a
    tensor broadcast along part of a two-index batch is read in place), then (a pair) C's extent along the
    paired axis and the strides of the second contraction's operand (as A's or B's); ``extra``
    the arrays the transforms read (each batch item sees its own, moved by its batch stride),
    then (a pair) that operand, A or B being the first's."""
    if s.store == STORE_COLS:   # C^T = B^T A^T: the kernel's A is B, its rows are n
        roles = ("long M = d[2], N = d[1];\n  const T *RA = B, *RB = A;\n"
                 "  long ra_b = d[7], ra_r = d[9], ra_k = d[8];\n"
                 "  long rb_b = d[4], rb_k = d[6], rb_c = d[5];\n"
                 "  long rc_b = d[10], rc_r = d[12], rc_c = d[11];")
    else:
        roles = ("long M = d[1], N = d[2];\n  const T *RA = A, *RB = B;\n"
                 "  long ra_b = d[4], ra_r = d[5], ra_k = d[6];\n"
                 "  long rb_b = d[7], rb_k = d[8], rb_c = d[9];\n"
                 "  long rc_b = d[10], rc_r = d[11], rc_c = d[12];")
    fill = " ".join(f"xs.{a} = extra[{i}]; xs.{a}_nbi = d[{13 + 5 * i}]; "
                    f"xs.{a}_bo = d[{14 + 5 * i}]; xs.{a}_bi = d[{15 + 5 * i}]; "
                    f"xs.{a}_r = d[{16 + 5 * i}]; xs.{a}_c = d[{17 + 5 * i}];"
                    for i, a in enumerate(s.args))
    # an extra array's batch item b: (b / nbi) along its outer batch stride, (b % nbi) along
    # its inner one (one division a batch item; nbi = 1 for a batch that nests as one dim)
    moves = " ".join(f"y.{a} += (b / x->{a}_nbi) * x->{a}_bo + (b % x->{a}_nbi) * x->{a}_bi;"
                     for a in s.args)
    batch = "1" if s.params.split == SPLIT_BATCH else "0"
    split_n = "1" if s.params.split == SPLIT_N else "0"
    at = 13 + 5 * len(s.args)
    # a pair: C's extent along the paired axis, then the second source's strides (batch and
    # its two axes in the contraction operand's order) and pointer (after the extra arrays)
    along_m = (s.pair == "rows") == (s.store == STORE_ROWS)
    pair_in = (f"g_pair_out = d[{at}];\n  const T *R2 = extra[{len(s.args)}];\n"
               f"  long r2_b = d[{at + 1}], q_a = d[{at + (2 if along_m else 3)}], "
               f"q_k = d[{at + (3 if along_m else 2)}];" if s.pair
               else "const T *R2 = 0; long r2_b = 0, q_a = 0, q_k = 0;")
    serial = c_condition("sizeof(T)", "nb", "M", "N", "K")
    return f"""
static __thread T *t_a, *t_b, *t_ea, *t_eb;
static __thread long t_acap, t_bcap, t_eacap, t_ebcap;
static T *g_b;
static long g_bcap;

static inline X at_batch(const X *x, long b) {{
  X y = *x;
  (void)b; {moves}
  return y;
}}

static T *grow(T **buf, long *cap, long n) {{
  if (n > *cap) {{
    free(*buf);
    *buf = (T *)aligned_alloc(64, ((n * (long)sizeof(T) + 63) / 64) * 64);
    *cap = n;
  }}
  return *buf;
}}

void {ENTRY}(const T *A, const T *B, T *C, const long *d, double alpha_,
                 const T *const *extra) {{
  X xs = {{0}};
  (void)extra; {fill}
  {pair_in}
  {gather_setup(s)}
  (void)r2_b;
  const X *x = &xs;
  long nb = d[0], K = d[3];
  {roles}
  if (nb <= 0 || M <= 0 || N <= 0) return;
  g_sym_n = M;
  T alpha = (T)alpha_;
  /* a product too small to share runs on this thread (search_spaces.serial) */
  int par = !{serial};
  /* an A with neither axis unit-stride is packed whatever the parameters say: the unpacked
     micro-kernel re-reads its MR x KC panel once per NR columns, a gather over MR * KC lines
     that a small set of cache sets holds (trimul's b[j,k,c] as (c, k, j), 702 x 702 x 128:
     6.1 s unpacked, 1.0 s packed) */
  int pa = {int(not may_skip_a(s))} || (ra_r != 1 && ra_k != 1), pb = {int(not may_skip_b(s))} || rb_c != 1;
  long kcx = K < KC ? (K > 0 ? K : 1) : KC;
  long ncx = ((N < NC ? N : NC) + NR - 1) / NR * NR;
  int nt = omp_get_max_threads();
  /* a C written in one K slice is streamed past the caches (no read for ownership) */
  int wr = {int(s.params.stream)} && (K <= KC) ? 2 : 1;
  /* Threads that share nothing: split "batch" deals out whole items (one chunk an item),
     split "n" chunks of C's columns of every item, whole NR-wide panels, at most NC wide and
     at most an even share (search_spaces.kernel.column_chunk).  A chunk's thread computes all
     its rows with its own buffers (its own B, all of A packed again), waiting for no other. */
  if (({batch} && nb > 1) || ({split_n} && par && nt > 1)) {{
    long per = ((N + NR - 1) / NR + nt - 1) / nt * NR;
    long cw = !{split_n} ? N : NC < per ? NC : per, nch = (N + cw - 1) / cw;
    #pragma omp parallel if(par)
    {{
      /* (a block of MC rows packs whole MR-tall panels: MC rounded up to MR rows of buffer,
         for parameters that leave MC no multiple of MR; writing past it corrupted the heap) */
      T *ab = pa ? grow(&t_a, &t_acap, (MC + MR - 1) / MR * MR * kcx) : 0;
      T *bb = pb ? grow(&t_b, &t_bcap, kcx * ncx) : 0;
      T *ea = grow(&t_ea, &t_eacap, MR * kcx), *eb = grow(&t_eb, &t_ebcap, NR * kcx);
      #pragma omp for schedule(dynamic, 1) collapse(2)
      for (long b = 0; b < nb; b++)
        for (long q = 0; q < nch; q++) {{
          X xb = at_batch(x, b);
          long c0 = q * cw, c1 = c0 + cw < N ? c0 + cw : N;
          item_serial(RA + b * ra_b, ra_r, ra_k, RB + b * rb_b, rb_k, rb_c, C + b * rc_b, rc_r,
                      rc_c, M, c1, K, M, (M + MC - 1) / MC, MC, pa, pb, wr, alpha, ab, bb, ea,
                      eb, &xb, 1, R2 ? R2 + b * r2_b : R2, q_a, q_k, 0, ncx, 0, c0);
        }}
      SFENCE();
    }}
    return;
  }}
  /* each thread one span of whole MR-tall panels (the last span shorter), cut into blocks of
     one size, at most MC rows: the static schedule gives each thread its span.  (Blocks of
     MC rows dealt out in turn left threads unequal: 256 rows in blocks of 48, 144 against
     112; 702 in blocks of 48, 384 against 318.) */
  long span = (M + nt * MR - 1) / (nt * MR) * MR, nspan = (M + span - 1) / span;
  long qs = (span + MC - 1) / MC;
  long mcx = ((span + qs - 1) / qs + MR - 1) / MR * MR;
  if (AT_SYM) {{      /* spans of equal work (at_span): blocks for the widest of them */
    long widest = 1, wt;
    for (long t = 0; t < nspan; t++)
      if ((wt = at_span(t + 1, nspan, span, M) - at_span(t, nspan, span, M)) > widest) widest = wt;
    qs = (widest + MC - 1) / MC;
    mcx = ((widest + qs - 1) / qs + MR - 1) / MR * MR;
  }}
  /* spans too few to go round (a few tokens through a weight: M = 4 on two threads left one
     idle) also cut each block's columns, in whole micro-panels, into as many chunks */
  long nq = nspan < nt ? (nt + nspan - 1) / nspan : 1;
  long nkb = K > KC ? (K + KC - 1) / KC : 1;
  int all = pb && nkb > 1 && (double)sizeof(T) * K * ncx <= AT_PACK_ALL_BYTES;
  T *bb = pb ? grow(&g_b, &g_bcap, (all ? K : kcx) * ncx) : 0;
  /* the panels' states (gemm_sync.lazy_source): one epoch a K slice of a column block */
  if (pb) at_lb_state(ncx / NR * (all ? nkb : 1));
  long nsl = (N + NC - 1) / NC * nkb, ep = g_lb_epoch + 1;
  g_lb_epoch += nb * nsl + 1;
  #pragma omp parallel if(par)
  {{
    t_team = omp_get_num_threads();
    t_rank = omp_get_thread_num();
    t_sense = __atomic_load_n(&g_bar_sense, __ATOMIC_ACQUIRE);
    T *ab = pa ? grow(&t_a, &t_acap, mcx * kcx) : 0;
    T *ea = grow(&t_ea, &t_eacap, MR * kcx), *eb = grow(&t_eb, &t_ebcap, NR * kcx);
    for (long b = 0; b < nb; b++) {{
      X xb = at_batch(x, b);
      item_shared(RA + b * ra_b, ra_r, ra_k, RB + b * rb_b, rb_k, rb_c, C + b * rc_b, rc_r, rc_c,
                  M, N, K, span, qs, mcx, pa, pb, wr, alpha, ab, bb, ea, eb, &xb, nq,
                  R2 ? R2 + b * r2_b : R2, q_a, q_k, all, ncx, ep + b * nsl, 0);
    }}
    SFENCE();
  }}
}}
"""


# A kernel of 64-byte vectors has its loops (the epilogue's and prologue's transforms, the
# packing copies) vectorised at that width too: GCC prefers 256 bits on AVX-512 whatever
# -march says, so gated_mlp's SiLU epilogue ran 8 lanes wide beside a 16-lane micro-kernel
# (2-core Xeon, one process, 7 interleaved rounds: the gate/up pair's group 2136 -> 2063 us, the
# up projection with the SiLU product 1144 -> 1092 us).  GCC only: clang has no such option.
WIDE_PRAGMA = """#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC target("prefer-vector-width=512")
#endif
"""


def _wide_pragma(vec_bytes: int) -> str:
    return WIDE_PRAGMA if vec_bytes >= 64 else ""


def kernel_source(s: KernelSpec) -> str:
    """The complete C source for ``s``: one entry point, :data:`ENTRY`."""
    p = s.params
    ct = SCALAR_TYPES[s.dtype][0]
    members = "".join(f" const T *{a}; long {a}_nbi, {a}_bo, {a}_bi, {a}_r, {a}_c;"
                      for a in s.args)
    head = f"""/* generated by autotune: contraction kernel {s.digest} ({s.dtype}, {s.store}) */
#include <math.h>
#include <stdlib.h>
#include <omp.h>
#include <sched.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define AT_BARRIER_SPIN_US {BARRIER_SPIN_US}
#define AT_PACK_ALL_BYTES {float(PACK_ALL_BYTES)}
#define AT_SYM {int(s.sym)}
typedef {ct} T;
typedef T V __attribute__((vector_size({p.vec_bytes})));
typedef T VU __attribute__((vector_size({p.vec_bytes}), aligned(sizeof(T))));
typedef struct {{ int unused_;{members} }} X;
#if defined(__SSE2__)
{STREAM_INTRINSICS}
typedef T V16 __attribute__((vector_size(16)));
#define SFENCE() AT_SFENCE()
static inline void stream16(T *p, V v) {{
  for (int q = 0; q < (int)(sizeof(V) / 16); q++) {{
    V16 piece;
    __builtin_memcpy(&piece, (char *)&v + 16 * q, 16);
    {"AT_STREAM_PS((float *)" if ct == "float" else "AT_STREAM_PD((double *)"}(p + q * 16 / (int)sizeof(T)), piece);
  }}
}}
#else
#define SFENCE() ((void)0)
static inline void stream16(T *p, V v) {{ *(VU *)p = v; }}
#endif
{BARRIER}
static long g_pair_out;   /* a pair's C extent along the paired axis (gemm_kernel.py) */
#define MR {p.mr}L
#define NR {p.nr}L
#define MC {p.mc}L
#define KC {p.kc}L
#define NC {p.nc}L
/* the first row of span t of nsp: spans of `span` rows, or, for a symmetric product (AT_SYM:
   a row panel computes the columns from the diagonal on), spans of equal work: the rows
   before M (1 - sqrt(1 - t / nsp)) hold t / nsp of the upper triangle */
static inline long at_span(long t, long nsp, long span, long M) {{
  long r = t * span;
  if (AT_SYM && nsp > 1)
    r = t >= nsp ? M : (long)(M * (1.0 - sqrt(1.0 - (double)t / nsp))) / MR * MR;
  return r < M ? r : M;
}}
/* a symmetric product (AT_SYM): a tile's final elements above the diagonal also stored, from
   L1, at their mirror images in skipped tiles (no thread writes those otherwise; a second
   pass over C cost what a K = 96 product's skipped half saves); g_sym_n: M = N */
static long g_sym_n;
static inline void at_sym_store(T *c, long c_rs, long c_cs, long m, long n, long row0,
                                long col0) {{
  T *base = c - row0 * c_rs - col0 * c_cs;
  long top = col0 / MR * MR, right = ((row0 + m - 1) / NR + 1) * NR;
  if (top >= right) {{      /* the whole mirror image skipped: no test an element */
    for (long j = 0; j < n; j++) {{
      T *restrict d = base + (col0 + j) * c_rs + row0 * c_cs;
      for (long i = 0; i < m; i++) d[i * c_cs] = c[i * c_rs + j * c_cs];
    }}
    return;
  }}
  for (long j = 0; j < n; j++) {{
    long cc = col0 + j, below = cc / MR * MR;      /* the row panel of the mirror image */
    for (long i = 0; i < m && row0 + i < cc; i++) {{
      long r = row0 + i, c0 = r / NR * NR, w = g_sym_n - c0 < NR ? g_sym_n - c0 : NR;
      if (below >= c0 + w) base[cc * c_rs + r * c_cs] = c[i * c_rs + j * c_cs];
    }}
  }}
}}
"""
    if not (s.prologue_a.identity and s.prologue_b.identity and s.epilogue.identity):
        head = PRELUDE + head     # glibc's vector exp/log, for sigmoid gates in the transforms
    parts = [_wide_pragma(p.vec_bytes) + head,
             _sym_stored(s, micro_kernel(s, "ukr_p", packed_a=True), "ukr_p")]
    if may_skip_a(s):
        parts.append(_sym_stored(s, micro_kernel(s, "ukr_u", packed_a=False), "ukr_u"))
    parts += [packers(s), pair_packer(s), lazy_source(_pack_b(s)), macro_source(s),
              _item(s, False), _item(s, True), _entry(s)]
    return "\n".join(parts) + "\n"


def _sym_stored(s: KernelSpec, src: str, name: str) -> str:
    """A symmetric product's micro-kernel (``s.sym``): the tile's own, then, after its last K
    slice, the mirror images of its elements that no tile computes (``at_sym_store``)."""
    if not s.sym:
        return src
    args = "kc, a, a_rs, a_cs, b, b_rs, c, c_rs, c_cs, m, n, first, last, alpha, row0, col0, x"
    return src.replace(f"static inline void {name}(", f"static inline void {name}_tile(", 1) + f"""
static inline void {name}(long kc, const T *restrict a, long a_rs, long a_cs,
    const T *restrict b, long b_rs, T *restrict c, long c_rs, long c_cs,
    long m, long n, int first, int last, T alpha, long row0, long col0, const X *x) {{
  {name}_tile({args});
  if (last) at_sym_store(c, c_rs, c_cs, m, n, row0, col0);
}}"""
