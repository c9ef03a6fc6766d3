"""C source of the generated contraction kernel (the ``kernel`` impl): a BLIS/Goto-style GEMM.

``C[b] = epilogue(alpha * A[b] @ B[b])`` for every batch item ``b``, with any element strides
for A, B and C.  The loops, outermost first: NC-wide column blocks of C, KC-deep slices of K
(the first slice writes C, later ones add to it: there is no zeroing pass), MC-tall row blocks;
inside a block every MR x NR tile of C is a micro-kernel whose accumulators are vector
registers (GCC vector extensions, as wide as :class:`KernelParams` says; ``-march=native``
lowers them to the machine's instructions).

Packing copies a KC x NC block of B into NR-wide micro-panels and an MC x KC block of A into
MR-tall ones, which is where the operands' strides are absorbed.  Fusion hooks in at three
points, each an elementwise :class:`Transform` given as C: ``prologue_a`` and ``prologue_b`` are
applied to each element as it is packed (the kernel then packs that operand whatever the
parameters say), ``epilogue`` to each element of C after the last K slice, before it is stored.
``store`` says which of C's indices is unit-stride: ``rows`` vectorises along n, ``cols``
computes ``C^T = B^T A^T`` so that it vectorises along m; other strides take a scalar store.

Threads: with ``split = "m"`` all threads share one packed B block and take MC blocks of rows
(MC shrinks at run time when there are too few rows to go round); with ``split = "batch"`` each
thread takes whole batch items with its own buffers, no barrier between them.  Packing buffers
are kept per thread between calls (grown, never shrunk): calls into one library must not overlap.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from search_spaces.kernel import OUTER_A, SPLIT_BATCH, KernelParams

from autotune.backends.loops import SCALAR_TYPES

STORE_ROWS = "rows"
STORE_COLS = "cols"
ENTRY = "gemm_kernel"


@dataclass(frozen=True)
class Transform:
    """An elementwise transform in C: ``expr`` over ``{x}`` (the value) and the element's
    indices (``{m}``, ``{n}``, ``{k}``: those of the operand it applies to) and the extra arrays
    named in ``args`` (``const`` pointers of the element type, passed at call time), which it
    reads as ``x->NAME``."""
    expr: str = "{x}"
    args: tuple[str, ...] = ()

    @property
    def identity(self) -> bool:
        return self.expr == "{x}"


IDENTITY = Transform()


@dataclass(frozen=True)
class KernelSpec:
    """Everything the generated source depends on."""
    params: KernelParams
    dtype: str = "float32"
    store: str = STORE_ROWS
    prologue_a: Transform = IDENTITY      # over {x}, {m}, {k}
    prologue_b: Transform = IDENTITY      # over {x}, {k}, {n}
    epilogue: Transform = IDENTITY        # over {x}, {m}, {n}

    @property
    def args(self) -> tuple[str, ...]:
        """The extra arrays, in the order the entry point takes them."""
        seen: list[str] = []
        for t in (self.prologue_a, self.prologue_b, self.epilogue):
            seen += [a for a in t.args if a not in seen]
        return tuple(seen)

    @property
    def digest(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:12]


def _apply(t: Transform, x: str, **idx: str) -> str:
    names = {"m": "0", "n": "0", "k": "0", **idx}
    return x if t.identity else "(" + t.expr.format(x=x, **names) + ")"


def _micro_kernel(s: KernelSpec, name: str, packed_a: bool) -> str:
    """The MR x NR micro-kernel: ``kc`` rank-1 updates of register accumulators, then the store
    (vector stores for a full tile of unit column stride, else through a scratch tile)."""
    p = s.params
    ct = SCALAR_TYPES[s.dtype][0]
    lanes = p.lanes(4 if s.dtype == "float32" else 8)
    nv = p.nr // lanes
    mr = p.mr
    acc = [[f"c{i}_{j}" for j in range(nv)] for i in range(mr)]
    a_at = (lambda i: f"a[{i}]") if packed_a else (lambda i: f"a[{i} * a_rs]")
    a_step = f"a += {mr};" if packed_a else "a += a_cs;"
    lines = [f"static inline void {name}(long kc, const T *restrict a, long a_rs, long a_cs,",
             "    const T *restrict b, long b_rs, T *restrict c, long c_rs, long c_cs,",
             "    long m, long n, int first, int last, T alpha, long row0, long col0,"
             " const X *x) {",
             "  (void)a_rs; (void)a_cs; (void)x; (void)row0; (void)col0;",
             *_prefetch_c(s),
             "  " + " ".join(f"V {v} = {{0}};" for row in acc for v in row),
             "  for (long p = 0; p < kc; p++) {",
             "    " + " ".join(f"V b{j} = *(const VU *)(b + {j * lanes});" for j in range(nv))]
    for i in range(mr):
        upd = " ".join(f"{acc[i][j]} += ai * b{j};" for j in range(nv))
        lines.append(f"    {{ T ai = {a_at(i)}; {upd} }}")
    lines += [f"    {a_step} b += b_rs;", "  }"]
    epi = _apply(s.epilogue, "v", **_roles(s, "i", "j", "row0", "col0"))
    direct = "1" if s.epilogue.identity else "!last"
    lines.append(f"  if (m == MR && n == NR && c_cs == 1 && {direct}) {{")
    for i in range(mr):
        for j in range(nv):
            q = f"(VU *)(c + {i} * c_rs + {j * lanes})"
            lines.append(f"    if (first) *{q} = alpha * {acc[i][j]}; "
                         f"else *{q} += alpha * {acc[i][j]};")
    lines += ["  } else {", "    T t[MR * NR] __attribute__((aligned(64)));"]
    for i in range(mr):
        lines.append("    " + " ".join(f"*(V *)(t + {i * p.nr + j * lanes}) = {acc[i][j]};"
                                         for j in range(nv)))
    lines += ["    for (long i = 0; i < m; i++) {",
              "      T *restrict ci = c + i * c_rs;",
              "      #pragma omp simd",
              "      for (long j = 0; j < n; j++) {",
              "        T v = alpha * t[i * NR + j];",
              "        if (!first) v += ci[j * c_cs];",
              f"        if (last) v = {epi};",
              "        ci[j * c_cs] = v;",
              "      }", "    }", "  }", "}"]
    return "\n".join(lines)


def _prefetch_c(s: KernelSpec) -> list[str]:
    """Ask for the tile's lines of C (for writing) before the K loop, so that fetching them
    from DRAM overlaps the arithmetic instead of stalling the stores at the end: with a short K
    (the K=128 projections) C is most of the memory traffic."""
    item = 4 if s.dtype == "float32" else 8
    offs = list(range(0, s.params.nr, 64 // item)) + [s.params.nr - 1]
    body = " ".join(f"__builtin_prefetch(c + {i} * c_rs + {o}, 1, 3);"
                    for i in range(s.params.mr) for o in offs)
    return [f"  if (c_cs == 1 && m == MR) {{ {body} }}"]


def _roles(s: KernelSpec, i: str, j: str, row0: str, col0: str) -> dict[str, str]:
    """The epilogue's {m}/{n} in terms of the kernel's row and column (swapped for ``cols``)."""
    r, c = f"({row0} + {i})", f"({col0} + {j})"
    return {"m": r, "n": c} if s.store == STORE_ROWS else {"m": c, "n": r}


def _packers(s: KernelSpec) -> str:
    """pack_a: an MC x KC block of the kernel's A into MR-tall micro-panels (k-major inside a
    panel, rows past the block zero); pack_b: one KC x NR micro-panel of its B (columns past the
    block zero).  The operand's prologue is applied to each element on the way."""
    # in ``cols`` mode the kernel's A is the contraction's B (and its rows are n), and back
    swap = s.store == STORE_COLS
    ta, tb = (s.prologue_b, s.prologue_a) if swap else (s.prologue_a, s.prologue_b)
    ra = "n" if swap else "m"
    cb = "m" if swap else "n"
    xa = _apply(ta, "src[i * s_r + p * s_k]", **{ra: "(row0 + ir + i)", "k": "(k0 + p)"})
    xb = _apply(tb, "src[p * s_k + j * s_c]", **{"k": "(k0 + p)", cb: "(col0 + j)"})
    return f"""
static void pack_a(long mc, long kc, const T *restrict A, long s_r, long s_k, T *restrict dst,
                   long row0, long k0, const X *x) {{
  (void)x; (void)row0; (void)k0;
  for (long ir = 0; ir < mc; ir += MR) {{
    long m = mc - ir < MR ? mc - ir : MR;
    T *restrict d = dst + ir * kc;
    const T *restrict src = A + ir * s_r;
    if (s_k == 1) {{
      for (long i = 0; i < m; i++)
        for (long p = 0; p < kc; p++) d[p * MR + i] = {xa};
    }} else {{
      for (long p = 0; p < kc; p++)
        for (long i = 0; i < m; i++) d[p * MR + i] = {xa};
    }}
    for (long p = 0; p < kc; p++)
      for (long i = m; i < MR; i++) d[p * MR + i] = 0;
  }}
}}

static void pack_b(long kc, long n, const T *restrict src, long s_k, long s_c, T *restrict d,
                   long k0, long col0, const X *x) {{
  (void)x; (void)k0; (void)col0;
  if (s_c == 1) {{
    for (long p = 0; p < kc; p++) {{
      #pragma omp simd
      for (long j = 0; j < n; j++) d[p * NR + j] = {xb};
      for (long j = n; j < NR; j++) d[p * NR + j] = 0;
    }}
  }} else {{
    for (long j = 0; j < n; j++)
      for (long p = 0; p < kc; p++) d[p * NR + j] = {xb};
    for (long p = 0; p < kc; p++)
      for (long j = n; j < NR; j++) d[p * NR + j] = 0;
  }}
}}
"""


def _macro(s: KernelSpec) -> str:
    """One MC x NC block of C over one K slice: every micro-tile, the micro-panels of the
    operand that ``outer`` names in the outer loop (B: BLIS's order, each B micro-panel stays
    in L1 while the A block streams from L2; A: each A micro-panel stays while the B block
    streams, and C is written row panel by row panel).
    An operand left unpacked is read in place (B needs a unit column stride for that); its
    partial edge panel is packed once into a small scratch panel (``ea`` / ``eb``) instead."""
    unpacked_a = "ukr_u(kc, Ab + ir * a_rs, a_rs, a_cs," if _may_skip_a(s) else "ukr_p(kc, ea, 1, MR,"
    jloop = """for (long jr = 0; jr < nc; jr += NR) {
    long n = nc - jr < NR ? nc - jr : NR;
    const T *bp = pb ? Bb + jr * kc : n == NR ? Bb + jr : eb;
    long brs = pb || n < NR ? NR : b_rk;"""
    iloop = """for (long ir = 0; ir < mc; ir += MR) {
    long m = mc - ir < MR ? mc - ir : MR;"""
    outer, inner = (iloop, jloop) if s.params.outer == OUTER_A else (jloop, iloop)
    return f"""
static void macro(long mc, long nc, long kc, const T *Ab, long a_rs, long a_cs, int pa,
                  const T *Bb, long b_rk, int pb, T *C, long c_rs, long c_cs, int first, int last,
                  T alpha, long row0, long col0, long k0, T *ea, T *eb, const X *x) {{
  long mfull = pa ? mc : mc / MR * MR, nfull = nc / NR * NR;
  if (mfull < mc) pack_a(mc - mfull, kc, Ab + mfull * a_rs, a_rs, a_cs, ea, row0 + mfull, k0, x);
  if (!pb && nfull < nc) pack_b(kc, nc - nfull, Bb + nfull, b_rk, 1, eb, k0, col0 + nfull, x);
  {outer}
  {inner}
      T *c = C + ir * c_rs + jr * c_cs;
      if (pa) ukr_p(kc, Ab + ir * kc, 1, MR, bp, brs, c, c_rs, c_cs, m, n, first, last, alpha,
                    row0 + ir, col0 + jr, x);
      else if (ir < mfull) {unpacked_a} bp, brs, c, c_rs, c_cs, m, n,
                    first, last, alpha, row0 + ir, col0 + jr, x);
      else ukr_p(kc, ea, 1, MR, bp, brs, c, c_rs, c_cs, m, n, first, last, alpha, row0 + ir,
                 col0 + jr, x);
    }}
  }}
}}
"""


def _item(shared: bool) -> str:
    """All blocks of one batch item.  ``shared``: called by every thread of a parallel region,
    which split B's packing and the MC blocks between them (the loops' implicit barriers keep
    the shared B block intact until every thread is done with it)."""
    omp = "#pragma omp for schedule(static)" if shared else ""
    name = "item_shared" if shared else "item_serial"
    return f"""
static void {name}(const T *RA, long ra_r, long ra_k, const T *RB, long rb_k, long rb_c, T *RC,
                   long rc_r, long rc_c, long M, long N, long K, long mcx, int pa, int pb,
                   T alpha, T *ab, T *bb, T *ea, T *eb, const X *x) {{
  long nk = K > 0 ? (K + KC - 1) / KC : 1;
  for (long jc = 0; jc < N; jc += NC) {{
    long nc = N - jc < NC ? N - jc : NC;
    for (long kb = 0; kb < nk; kb++) {{
      long pc = kb * KC, kc = K - pc < KC ? K - pc : KC;
      const T *Bb = RB + pc * rb_k + jc * rb_c;
      if (pb) {{
        {omp}
        for (long jr = 0; jr < nc; jr += NR)
          pack_b(kc, nc - jr < NR ? nc - jr : NR, Bb + jr * rb_c, rb_k, rb_c, bb + jr * kc,
                 pc, jc + jr, x);
      }}
      {omp}
      for (long ic = 0; ic < M; ic += mcx) {{
        long mc = M - ic < mcx ? M - ic : mcx;
        const T *Ab = RA + ic * ra_r + pc * ra_k;
        if (pa) pack_a(mc, kc, Ab, ra_r, ra_k, ab, ic, pc, x);
        macro(mc, nc, kc, pa ? ab : Ab, ra_r, ra_k, pa, pb ? bb : Bb, rb_k, pb,
              RC + ic * rc_r + jc * rc_c, rc_r, rc_c, kb == 0, kb == nk - 1, alpha, ic, jc, pc,
              ea, eb, x);
      }}
    }}
  }}
}}
"""


def _may_skip_a(s: KernelSpec) -> bool:
    ta = s.prologue_b if s.store == STORE_COLS else s.prologue_a
    return not s.params.pack_a and ta.identity


def _may_skip_b(s: KernelSpec) -> bool:
    tb = s.prologue_a if s.store == STORE_COLS else s.prologue_b
    return not s.params.pack_b and tb.identity


def _entry(s: KernelSpec) -> str:
    """``gemm_kernel(A, B, C, d, alpha, extra)``: ``d`` holds batch, M, N, K and the element
    strides (batch, row, col) of A, B and C; ``extra`` the arrays the transforms read."""
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
    fill = " ".join(f"xs.{a} = extra[{i}];" for i, a in enumerate(s.args))
    batch = "1" if s.params.split == SPLIT_BATCH else "0"
    return f"""
static __thread T *t_a, *t_b, *t_ea, *t_eb;
static __thread long t_acap, t_bcap, t_eacap, t_ebcap;
static T *g_b;
static long g_bcap;

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
  const X *x = &xs;
  long nb = d[0], K = d[3];
  {roles}
  if (nb <= 0 || M <= 0 || N <= 0) return;
  T alpha = (T)alpha_;
  int pa = {int(not _may_skip_a(s))}, pb = {int(not _may_skip_b(s))} || rb_c != 1;
  long kcx = K < KC ? (K > 0 ? K : 1) : KC;
  long ncx = ((N < NC ? N : NC) + NR - 1) / NR * NR;
  int nt = omp_get_max_threads();
  if ({batch} && nb > 1) {{
    #pragma omp parallel for schedule(dynamic, 1)
    for (long b = 0; b < nb; b++) {{
      T *ab = pa ? grow(&t_a, &t_acap, MC * kcx) : 0, *bb = pb ? grow(&t_b, &t_bcap, kcx * ncx) : 0;
      T *ea = grow(&t_ea, &t_eacap, MR * kcx), *eb = grow(&t_eb, &t_ebcap, NR * kcx);
      item_serial(RA + b * ra_b, ra_r, ra_k, RB + b * rb_b, rb_k, rb_c, C + b * rc_b, rc_r, rc_c,
                  M, N, K, MC, pa, pb, alpha, ab, bb, ea, eb, x);
    }}
    return;
  }}
  /* as many row blocks as MC asks for, rounded up to a multiple of the threads */
  long nblk = (M + MC - 1) / MC;
  if (nblk % nt) nblk += nt - nblk % nt;
  long mcx = ((M + nblk - 1) / nblk + MR - 1) / MR * MR;
  T *bb = pb ? grow(&g_b, &g_bcap, kcx * ncx) : 0;
  #pragma omp parallel
  {{
    T *ab = pa ? grow(&t_a, &t_acap, mcx * kcx) : 0;
    T *ea = grow(&t_ea, &t_eacap, MR * kcx), *eb = grow(&t_eb, &t_ebcap, NR * kcx);
    for (long b = 0; b < nb; b++)
      item_shared(RA + b * ra_b, ra_r, ra_k, RB + b * rb_b, rb_k, rb_c, C + b * rc_b, rc_r, rc_c,
                  M, N, K, mcx, pa, pb, alpha, ab, bb, ea, eb, x);
  }}
}}
"""


def kernel_source(s: KernelSpec) -> str:
    """The complete C source for ``s``: one entry point, :data:`ENTRY`."""
    p = s.params
    ct = SCALAR_TYPES[s.dtype][0]
    members = "".join(f" const T *{a};" for a in s.args)
    head = f"""/* generated by autotune: contraction kernel {s.digest} ({s.dtype}, {s.store}) */
#include <math.h>
#include <stdlib.h>
#include <omp.h>
typedef {ct} T;
typedef T V __attribute__((vector_size({p.vec_bytes})));
typedef T VU __attribute__((vector_size({p.vec_bytes}), aligned(sizeof(T))));
typedef struct {{ int unused_;{members} }} X;
#define MR {p.mr}L
#define NR {p.nr}L
#define MC {p.mc}L
#define KC {p.kc}L
#define NC {p.nc}L
"""
    parts = [head, _micro_kernel(s, "ukr_p", packed_a=True)]
    if _may_skip_a(s):
        parts.append(_micro_kernel(s, "ukr_u", packed_a=False))
    parts += [_packers(s), _macro(s), _item(False), _item(True), _entry(s)]
    return "\n".join(parts) + "\n"
