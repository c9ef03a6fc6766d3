"""The generated contraction kernel's packing routines (C source): ``pack_a`` and ``pack_b``,
which copy blocks of the kernel's operands into micro-panels (applying a prologue on the way,
and reading an operand no strided matrix expresses through offset tables: ``KernelSpec.gather``),
and a pair's ``pack_pair``, which interleaves two operands.  The rest of the kernel:
``gemm_kernel`` and ``gemm_driver``."""
from __future__ import annotations

from autotune.backends.cpu.gemm_kernel import STORE_COLS, KernelSpec, _apply


def packers(s: KernelSpec) -> str:
    """pack_a: an MC x KC block of the kernel's A into MR-tall micro-panels (k-major inside a
    panel, rows past the block zero); pack_b: one KC x NR micro-panel of its B (columns past the
    block zero).  The operand's prologue is applied to each element on the way."""
    # in ``cols`` mode the kernel's A is the contraction's B (and its rows are n), and back
    swap = s.store == STORE_COLS
    ta, tb = (s.prologue_b, s.prologue_a) if swap else (s.prologue_a, s.prologue_b)
    ra = "n" if swap else "m"
    cb = "m" if swap else "n"
    ga, gb = kernel_gathers(s)
    xa = _apply(ta, "src[i * s_r + p * s_k]", **{ra: "(row0 + ir + i)", "k": "(k0 + p)"})
    xb = _apply(tb, "src[p * s_k + j * s_c]", **{"k": "(k0 + p)", cb: "(col0 + j)"})
    # A whole panel is written one contiguous MR (NR) run at a time, the run unrolled, even
    # where that reads across the source's unit stride: GCC vectorises that as a transpose.
    # Packing a 256 x 256 row-major A into 8-tall panels: 4 us against 12.6 us the other way
    # round (a K-contiguous B into 32-wide panels: 5 against 18 us; gcc 12, -O3, AVX-512); the
    # trimul N=702 plan whose B operands are K-contiguous ran 3 % faster (698 -> 678 ms).
    mr, nr = s.params.mr, s.params.nr
    plain_a = f"""
static void pack_a(long mc, long kc, const T *restrict A, long s_r, long s_k, T *restrict dst,
                   long row0, long k0, const X *x) {{
  (void)x; (void)row0; (void)k0;
  for (long ir = 0; ir < mc; ir += MR) {{
    long m = mc - ir < MR ? mc - ir : MR;
    T *restrict d = dst + ir * kc;
    const T *restrict src = A + ir * s_r;
    if (m == MR) {{
      for (long p = 0; p < kc; p++) {{
        #pragma GCC unroll {mr}
        for (long i = 0; i < MR; i++) d[p * MR + i] = {xa};
      }}
    }} else if (s_k == 1) {{
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
"""
    plain_b = f"""
static void pack_b(long kc, long n, const T *restrict src, long s_k, long s_c, T *restrict d,
                   long k0, long col0, const X *x) {{
  (void)x; (void)k0; (void)col0;
  if (s_c == 1) {{
    for (long p = 0; p < kc; p++) {{
      #pragma omp simd
      for (long j = 0; j < n; j++) d[p * NR + j] = {xb};
      for (long j = n; j < NR; j++) d[p * NR + j] = 0;
    }}
  }} else if (n == NR) {{
    for (long p = 0; p < kc; p++) {{
      #pragma GCC unroll {nr}
      for (long j = 0; j < NR; j++) d[p * NR + j] = {xb};
    }}
  }} else {{
    for (long j = 0; j < n; j++)
      for (long p = 0; p < kc; p++) d[p * NR + j] = {xb};
    for (long p = 0; p < kc; p++)
      for (long j = n; j < NR; j++) d[p * NR + j] = 0;
  }}
}}
"""
    return (GATHER_RUNS if ga or gb else "") + (gathered_a(ta, ra, mr) if ga else plain_a) \
        + (gathered_b(tb, cb) if gb else plain_b)


# The offset tables of a gathered operand (set by the entry point: gather_setup), and the
# runs they hold: an operand's address is its row's offset plus its K's, and along the axis
# its unit-stride index lies in, consecutive entries step by one for that index's extent
# (cc_doubles' v[c,b,k,j] as K (c,k) by columns (b,j): runs of O along the columns).  pack_b
# copies run by run, vectorised, and element by element only where the tables hold no runs;
# pack_a reads each row of a panel along K, as the plain packer does.
GATHER_RUNS = """
static const long *g_ar, *g_ak, *g_bk, *g_bc;
/* the runs of table t[0..n): start, offset and length of each, their count returned */
static long at_runs(const long *t, long n, long *start, long *off, long *len) {
  long ns = 0;
  for (long j = 0; j < n;) {
    long o = t[j], l = 1;
    while (j + l < n && t[j + l] == o + l) l++;
    start[ns] = j; off[ns] = o; len[ns] = l; ns++;
    j += l;
  }
  return ns;
}
"""


def gathered_a(ta, ra: str, mr: int) -> str:
    """pack_a for an A read through its offset tables (its strides 0): the panel's rows'
    addresses found once, then K step by K step, one element of each row: each row is read
    along its K (in runs where K has them) and each step's MR elements stored side by side,
    which GCC unrolls as the plain packer's transpose."""
    one = _apply(ta, "rp[i][o]", **{ra: "(row0 + ir + i)", "k": "(k0 + p)"})
    return f"""
static void pack_a(long mc, long kc, const T *restrict A, long s_r, long s_k, T *restrict dst,
                   long row0, long k0, const X *x) {{
  (void)x; (void)s_r; (void)s_k;
  for (long ir = 0; ir < mc; ir += MR) {{
    long m = mc - ir < MR ? mc - ir : MR;
    T *restrict d = dst + ir * kc;
    const T *rp[MR];
    for (long i = 0; i < MR; i++) rp[i] = A + g_ar[row0 + ir + (i < m ? i : 0)];
    if (m == MR) {{
      for (long p = 0; p < kc; p++) {{
        long o = g_ak[k0 + p];
        #pragma GCC unroll {mr}
        for (long i = 0; i < MR; i++) d[p * MR + i] = {one};
      }}
    }} else {{
      for (long p = 0; p < kc; p++) {{
        long o = g_ak[k0 + p];
        for (long i = 0; i < m; i++) d[p * MR + i] = {one};
        for (long i = m; i < MR; i++) d[p * MR + i] = 0;
      }}
    }}
  }}
}}
"""


def gathered_b(tb, cb: str) -> str:
    """pack_b for a B read through its offset tables: K step by K step, the columns' runs
    copied whole (vectorised) where the columns have runs, else column by column, K's runs
    copied whole."""
    run = _apply(tb, "src[u]", **{"k": "(k0 + p)", cb: "(col0 + j0 + u)"})
    krun = _apply(tb, "src[u]", **{"k": "(k0 + p0 + u)", cb: "(col0 + j)"})
    return f"""
static void pack_b(long kc, long n, const T *restrict B, long s_k, long s_c, T *restrict d,
                   long k0, long col0, const X *x) {{
  (void)x; (void)s_k; (void)s_c;
  long js[NR], jo[NR], jl[NR];
  long nj = at_runs(g_bc + col0, n, js, jo, jl);
  if (2 * nj <= n) {{
    for (long p = 0; p < kc; p++) {{
      const T *restrict r = B + g_bk[k0 + p];
      T *restrict dp = d + p * NR;
      for (long q = 0; q < nj; q++) {{
        const T *restrict src = r + jo[q];
        long j0 = js[q];
        #pragma omp simd
        for (long u = 0; u < jl[q]; u++) dp[j0 + u] = {run};
      }}
      for (long j = n; j < NR; j++) dp[j] = 0;
    }}
    return;
  }}
  long ks[KC], ko[KC], kl[KC];
  long nk = at_runs(g_bk + k0, kc, ks, ko, kl);
  for (long j = 0; j < n; j++) {{
    const T *restrict c = B + g_bc[col0 + j];
    for (long q = 0; q < nk; q++) {{
      const T *restrict src = c + ko[q];
      long p0 = ks[q];
      for (long u = 0; u < kl[q]; u++) d[(p0 + u) * NR + j] = {krun};
    }}
  }}
  for (long p = 0; p < kc; p++)
    for (long j = n; j < NR; j++) d[p * NR + j] = 0;
}}
"""


def pair_packer(s: KernelSpec) -> str:
    """A pair's packing routine for its paired operand (the kernel's A for ``rows``, B for
    ``cols``), in place of pack_a / pack_b: one whole panel (MR tall or NR wide) at kernel
    coordinate ``at`` (a multiple of the tile), whose first half comes from ``X1`` and second
    from ``X2`` at the sources' coordinate ``at / 2``; past C's extent along the paired axis
    (``g_pair_out``) zero.  ``s1`` / ``t1``: the sources' strides along the paired axis, ``s2``
    / ``t2`` along K (rows) or (cols) the other way round: each source's own strides."""
    if not s.pair:
        return ""
    rows = s.pair == "rows"      # MR-tall A panels (k-major), else NR-wide B panels
    tile = "MR" if rows else "NR"
    body = f"d[p * {tile} + i] = " + ("src[i * sa + p * sk];" if rows else "src[p * sk + i * sa];")
    loop = lambda v, n: f"for (long {v} = 0; {v} < {n}; {v}++)"
    i_then_p = f"{loop('i', 'h')}\n          {loop('p', 'kc')} {body}"
    p_then_i = (f"{loop('p', 'kc')} {{\n          #pragma omp simd\n          {loop('i', 'h')} "
                f"{body}\n        }}")
    # the source's unit-stride axis innermost: K for A panels, the columns for B panels
    unit, fast, slow = ("sk == 1", i_then_p, p_then_i) if rows else ("sa == 1", p_then_i, i_then_p)
    return f"""
static void pack_pair(long kc, const T *restrict X1, long s1, long s2, const T *restrict X2,
                      long t1, long t2, T *restrict dst, long at) {{
  long c0 = at / 2, h = g_pair_out - c0;
  if (h > {tile} / 2) h = {tile} / 2;
  if (h < 0) h = 0;
  for (int side = 0; side < 2; side++) {{
    const T *restrict src = side ? X2 + c0 * t1 : X1 + c0 * s1;
    long sa = side ? t1 : s1, sk = side ? t2 : s2;
    T *restrict d = dst + side * ({tile} / 2);
    if ({unit}) {{
        {fast}
    }} else {{
        {slow}
    }}
    for (long p = 0; p < kc; p++)
      for (long i = h; i < {tile} / 2; i++) d[p * {tile} + i] = 0;
  }}
}}
"""


def kernel_gathers(s: KernelSpec) -> tuple[bool, bool]:
    """Whether the kernel's A and B (the contraction's B and A in ``cols`` store) are read
    through offset tables (``s.gather`` names the contraction's operands)."""
    a, b = "a" in s.gather, "b" in s.gather
    return (b, a) if s.store == STORE_COLS else (a, b)


def gather_setup(s: KernelSpec) -> str:
    """The entry point's statements that point the packers' offset tables at the arrays the
    call passes after the transforms' (``extra``): for a gathered contraction operand A its
    rows' and its K's element offsets, for B its K's and its columns'.  In ``cols`` store the
    kernel's A is the contraction's B transposed (its rows are n) and its B is A's."""
    if not s.gather:
        return ""
    at = len(s.args)
    tables = {}
    for operand, axes in (("a", ("m", "k")), ("b", ("k", "n"))):
        if operand in s.gather:
            for axis in axes:
                tables[operand + axis] = f"(const long *)extra[{at}]"
                at += 1
    ka, kb = ("b", "a") if s.store == STORE_COLS else ("a", "b")
    rows, cols = ("n", "m") if s.store == STORE_COLS else ("m", "n")
    out = []
    if ka in s.gather:
        out += [f"g_ar = {tables[ka + rows]};", f"g_ak = {tables[ka + 'k']};"]
    if kb in s.gather:
        out += [f"g_bk = {tables[kb + 'k']};", f"g_bc = {tables[kb + cols]};"]
    return " ".join(out)
