"""C source of the generated contraction kernel (the ``kernel`` impl): a BLIS/Goto-style GEMM.
This module holds its spec, the micro-kernel and the block loop; ``gemm_pack`` the packing
routines, ``gemm_driver`` the entry point (threads, buffers) and the assembled source.

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

A **pair** (``pair``: the kernel axis, ``rows`` or ``cols``, whose register tile it halves) is
two contractions over one shared operand: the packing routine of the paired operand
(:func:`pair_packer`) reads the two contractions' other operands, each where it lies, in blocks
of half a tile along that axis (:func:`pair_half`), so that each tile's first half holds the
first contraction's values and its second half the second's at the same elements; the
epilogue reads them as ``{x}`` and ``{y}`` and stores one tile half into C, whose coordinate
along the paired axis is half the kernel's.  A pair takes its whole K in one slice (the
executor sets KC to at least K), so no partial sum is ever stored.  (Interleaving the two
operands into a copy before each call cost 210 us at gated_mlp's 256 x 1024 weights, against
~30 us for the packer's whole packing of that B.)

Threads: with ``split = "m"`` all threads share one B block, each micro-panel packed by the
first thread to need it (``gemm_sync``), and take MC blocks of rows (fewer when rows are few);
with ``split = "batch"`` each thread takes whole batch items with its own buffers, no barrier
between them.  Packing buffers are kept between calls (grown, never shrunk): calls into one
library must not overlap.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from search_spaces.kernel import OUTER_A, KernelParams


# The rank-1 update loop unrolled this many times: on one core of the 2-core Xeon the 6 x 64
# float32 micro-kernel over L1/L2-resident panels ran 190-205 GFLOP/s rolled, 213-219 unrolled 4
# times, 215-222 twice, 205-212 8 or 16 times (peak 243); 512 x 1024 x 256: 305-315 -> 316-328.
UKR_UNROLL = 4
# A C tile is streamed only where its rows start on cache lines (bytes): a row straddling lines
# leaves partial ones, sent out as partial writes (2-core Xeon, 49152 x 640 x 128: streamed 16
# bytes past a line 136 GFLOP/s, on lines 200, not at all 236-244; bench/results/xeon-stream-*)
STREAM_ALIGN = 64
STORE_ROWS, STORE_COLS = "rows", "cols"


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
    epilogue: Transform = IDENTITY        # over {x}, {m}, {n} (and {y}: a pair's second)
    pair: str = ""                        # "", or the kernel axis a pair halves: rows, cols
    sym: bool = False                     # one triangle computed, stored at both places
    # the contraction's operands ("a", "b", "ab") packed through offset tables: an operand
    # whose rows or K no one stride walks (indices apart in its layout), read where it lies
    # instead of copied into a matrix first (autotune.backends.cpu.gemm_pack)
    gather: str = ""

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


def _apply(t: Transform, x: str, y: str = "0", **idx: str) -> str:
    names = {"m": "0", "n": "0", "k": "0", **idx}
    return x if t.identity else "(" + t.expr.format(x=x, y=y, **names) + ")"


def pair_half(s: KernelSpec) -> int:
    """A pair's block: half the register tile along the paired kernel axis (0: no pair)."""
    if not s.pair:
        return 0
    return (s.params.mr if s.pair == "rows" else s.params.nr) // 2


def micro_kernel(s: KernelSpec, name: str, packed_a: bool) -> str:
    """The MR x NR micro-kernel: ``kc`` rank-1 updates of register accumulators, then the store
    (vector stores for a full tile of unit column stride, else through a scratch tile)."""
    p = s.params
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
             f"  #pragma GCC unroll {UKR_UNROLL}", "  for (long p = 0; p < kc; p++) {",
             "    " + " ".join(f"V b{j} = *(const VU *)(b + {j * lanes});" for j in range(nv))]
    for i in range(mr):
        upd = " ".join(f"{acc[i][j]} += ai * b{j};" for j in range(nv))
        lines.append(f"    {{ T ai = {a_at(i)}; {upd} }}")
    lines += [f"    {a_step} b += b_rs;", "  }"]
    if s.pair:
        return "\n".join(lines + _pair_store(s, acc, lanes))
    epi = _apply(s.epilogue, "v", **_roles(s, "i", "j", "row0", "col0"))
    direct = "1" if s.epilogue.identity else "!last"
    lines.append(f"  if (m == MR && n == NR && c_cs == 1 && {direct}) {{")
    if s.params.stream:
        lines.append(f"    if (first == 2 && (((unsigned long)c | (unsigned long)(c_rs * (long)"
                     f"sizeof(T))) & {STREAM_ALIGN - 1}) == 0) {{")
        for i in range(mr):
            lines.append("      " + " ".join(f"stream16(c + {i} * c_rs + {j * lanes}, alpha * "
                                             f"{acc[i][j]});" for j in range(nv)))
        lines.append("      return;\n    }")
    for i in range(mr):
        for j in range(nv):
            q = f"(VU *)(c + {i} * c_rs + {j * lanes})"
            lines.append(f"    if (first) *{q} = alpha * {acc[i][j]}; "
                         f"else *{q} += alpha * {acc[i][j]};")
    lines += ["  } else {", "    T t[MR * NR] __attribute__((aligned(64)));"]
    for i in range(mr):
        lines.append("    " + " ".join(f"*(V *)(t + {i * p.nr + j * lanes}) = {acc[i][j]};"
                                         for j in range(nv)))
    if not s.epilogue.identity:
        lines += _full_tile_epilogue(epi)
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


def _pair_store(s: KernelSpec, acc, lanes: int) -> list[str]:
    """A pair's tile: through the scratch tile, each stored element the epilogue of the first
    half's value and the second half's at the same place; the part of the half inside C
    (``g_pair_out``: C's extent along the paired axis) stored, with a constant trip count
    where the whole half is (so that the loop vectorises along the unit-stride columns)."""
    p = s.params
    lines = ["  (void)first; (void)last;", "  T t[MR * NR] __attribute__((aligned(64)));"]
    for i in range(p.mr):
        lines.append("  " + " ".join(f"*(V *)(t + {i * p.nr + j * lanes}) = {acc[i][j]};"
                                     for j in range(len(acc[i]))))
    if s.pair == "cols":
        second = "t[i * NR + NR / 2 + j]"
        roles = _roles(s, "i", "j", "row0", "(col0 / 2)")
        lines += ["  long nh = g_pair_out - col0 / 2, mh = m;", "  if (nh > NR / 2) nh = NR / 2;"]
        full = "mh == MR && nh == NR / 2"
        rows_, cols_ = ("MR", "NR / 2"), ("mh", "nh")
    else:
        second = "t[(i + MR / 2) * NR + j]"
        roles = _roles(s, "i", "j", "(row0 / 2)", "col0")
        lines += ["  long mh = g_pair_out - row0 / 2, nh = n;", "  if (mh > MR / 2) mh = MR / 2;"]
        full = "mh == MR / 2 && nh == NR"
        rows_, cols_ = ("MR / 2", "NR"), ("mh", "nh")
    epi = _apply(s.epilogue, "alpha * t[i * NR + j]", f"alpha * {second}", **roles)

    def loop(rows: str, cols: str, unit: bool) -> list[str]:
        at = "ci[j]" if unit else "ci[j * c_cs]"
        return [f"    for (long i = 0; i < {rows}; i++) {{",
                "      T *restrict ci = c + i * c_rs;", "      #pragma omp simd",
                f"      for (long j = 0; j < {cols}; j++) {at} = {epi};", "    }"]
    lines += [f"  if ({full} && c_cs == 1) {{", *loop(*rows_, True), "    return;", "  }",
              "  {", *loop(*cols_, False), "  }", "}"]
    return lines


def _full_tile_epilogue(epi: str) -> list[str]:
    """The last K slice of a full tile of unit column stride: the epilogue over each row of
    the scratch tile in a loop of constant trip count and unit stride, which vectorises (glibc's
    vector exp for a sigmoid gate); the general loop below has run-time strides and sizes."""
    body = lambda add: ["      T *restrict ci = c + i * c_rs;", "      #pragma omp simd",
                        "      for (long j = 0; j < NR; j++) {",
                        f"        T v = alpha * t[i * NR + j]{add};", f"        ci[j] = {epi};",
                        "      }"]
    return ["    if (m == MR && n == NR && c_cs == 1) {",
            "      if (first) for (long i = 0; i < MR; i++) {", *body(""), "      }",
            "      else for (long i = 0; i < MR; i++) {", *body(" + ci[j]"), "      }",
            "      return;", "    }"]


def _prefetch_c(s: KernelSpec) -> list[str]:
    """Ask for the tile's lines of C (for writing) before the K loop, so that fetching them
    from DRAM overlaps the arithmetic instead of stalling the stores at the end: with a short K
    (the K=128 projections) C is most of the memory traffic."""
    item = 4 if s.dtype == "float32" else 8
    # a pair's tile stores half its rows or half its columns
    rows = s.params.mr // 2 if s.pair == "rows" else s.params.mr
    cols = s.params.nr // 2 if s.pair == "cols" else s.params.nr
    offs = list(range(0, cols, 64 // item)) + [cols - 1]
    body = " ".join(f"__builtin_prefetch(c + {i} * c_rs + {o}, 1, 3);"
                    for i in range(rows) for o in offs)
    return [f"  if (c_cs == 1 && m == MR) {{ {body} }}"]


def _roles(s: KernelSpec, i: str, j: str, row0: str, col0: str) -> dict[str, str]:
    """The epilogue's {m}/{n} in terms of the kernel's row and column (swapped for ``cols``)."""
    r, c = f"({row0} + {i})", f"({col0} + {j})"
    return {"m": r, "n": c} if s.store == STORE_ROWS else {"m": c, "n": r}


def macro_source(s: KernelSpec) -> str:
    """One MC x NC block of C over one K slice: every micro-tile, the micro-panels of the
    operand that ``outer`` names in the outer loop (B: BLIS's order, each B micro-panel stays
    in L1 while the A block streams from L2; A: each A micro-panel stays while the B block
    streams, and C is written row panel by row panel).
    An operand left unpacked is read in place (B needs a unit column stride for that); its
    partial edge panel is packed once into a small scratch panel (``ea`` / ``eb``) instead."""
    # one call of the packed micro-kernel, which GCC inlines: a copy a call site cost ~0.07 s
    # of the ~0.75 s compile (GCC 12, AVX2)
    call_u = ("if (!pa && ir < mfull) ukr_u(kc, Ab + ir * a_rs, a_rs, a_cs, bp, brs, c, c_rs, "
              "c_cs, m, n,\n                    first, last, alpha, row0 + ir, col0 + jr, x);\n"
              "      else " if may_skip_a(s) else "")
    # threads packing B on demand start at panels of their own (else the first packs them all)
    jloop = """for (long jp = 0, np_ = (nc + NR - 1) / NR; jp < np_; jp++) {
    long jr = (lb ? (jp + t_rank * np_ / t_team) % np_ : jp) * NR;
    long n = nc - jr < NR ? nc - jr : NR;
    const T *bp = pb ? Bb + jr * kc : n == NR ? Bb + jr : eb;
    long brs = pb || n < NR ? NR : b_rk;"""
    iloop = """for (long ir = 0; ir < mc; ir += MR) {
    long m = mc - ir < MR ? mc - ir : MR;"""
    outer, inner = (iloop, jloop) if s.params.outer == OUTER_A else (jloop, iloop)
    row_at, col_at = half_at(s, "rows", "ir"), half_at(s, "cols", "jr")
    return f"""
static void macro(long mc, long nc, long kc, const T *Ab, long a_rs, long a_cs, int pa,
                  const T *Bb, long b_rk, int pb, T *C, long c_rs, long c_cs, int first, int last,
                  T alpha, long row0, long col0, long k0, T *ea, T *eb, const X *x,
                  const LB *lb) {{
  long mfull = pa ? mc : mc / MR * MR, nfull = nc / NR * NR;
  if (mfull < mc) pack_a(mc - mfull, kc, Ab + mfull * a_rs, a_rs, a_cs, ea, row0 + mfull, k0, x);
  if (!pb && nfull < nc) pack_b(kc, nc - nfull, Bb + nfull, b_rk, 1, eb, k0, col0 + nfull, x);
  {outer}
  {inner}
      if (AT_SYM && row0 + ir >= col0 + jr + n) continue;   /* wholly below the diagonal */
      if (lb) at_need(lb, col0 + jr);     /* a shared B panel: packed on demand */
      T *c = C + {row_at} * c_rs + {col_at} * c_cs;
      {call_u}ukr_p(kc, pa ? Ab + ir * kc : ea, 1, MR, bp, brs, c, c_rs, c_cs, m, n, first,
                    last, alpha, row0 + ir, col0 + jr, x);
    }}
  }}
}}
"""


def half_at(s: KernelSpec, axis: str, at: str) -> str:
    """A kernel coordinate as C's: halved along a pair's axis (blocks of a whole tile, so
    even), as it is elsewhere."""
    return f"({at} / 2)" if s.pair == axis else at


def may_skip_a(s: KernelSpec) -> bool:
    """Whether the kernel's A may be read in place: not under a prologue, nor a pair's paired
    operand (only :func:`pair_packer` interleaves the two), nor in a kernel that gathers an
    operand (both packed: the cost model prices them so, whichever operand it is)."""
    ta = s.prologue_b if s.store == STORE_COLS else s.prologue_a
    return not s.params.pack_a and ta.identity and s.pair != "rows" and not s.gather


def may_skip_b(s: KernelSpec) -> bool:
    tb = s.prologue_a if s.store == STORE_COLS else s.prologue_b
    return not s.params.pack_b and tb.identity and s.pair != "cols" and not s.gather
