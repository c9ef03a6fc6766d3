"""The CUDA backend's generated contraction kernel (impl ``kernel`` on a GPU): one tensor-core
GEMM per group, with the group's fusions (:mod:`search_spaces.kernel_fusion`) inside it.

- Grid: one block per (batch item, ``mc`` x ``nc`` tile of C); block: ``mc/mr * nc/nr`` warps,
  each owning an ``mr`` x ``nr`` tile of C held as m16n8k8 accumulators (four floats a thread
  per 16 x 8 fragment; the PTX ISA's layout: lane ``4g + t`` holds rows g and g+8, columns 2t
  and 2t+1).
- K in slices of ``kc``: the block's threads copy the A (mc x kc) and B (kc x nc) slices from
  global memory into shared memory, the thread-fastest dim the one the tensor walks at unit
  stride (the loads coalesce); an operand copied as it is goes by ``cp.async`` (no register,
  zero-filled outside the extents), one with a prologue through registers, the prologue
  applied to each element as it is loaded.  Two stages of shared memory where both fit
  (:data:`TWO_STAGE_BYTES`): slice k+1's copies are in flight while the warps multiply slice
  k.  Shared rows are padded (A by 4 floats, B by 8) so that the fragment loads of a warp hit
  32 distinct banks.
- Each warp, per 8-deep step: A and B fragments from shared memory, split into TF32 high and
  low parts in registers (``3xtf32``: three ``mma.sync``, the small products first; float32
  accuracy, search_spaces.precision) or rounded once (``tf32``: one).
- The epilogue on the accumulators in registers: the contraction's scale, the consumer's
  expression with its other tensors loaded at the same element, the store in the consumer's
  layout.  Every global address comes from the element's indices (recovered from the flattened
  batch, row and column where a tensor does not nest them as one stride), so any layout is
  read and written in place: no copies around the kernel.
- A pair (two contractions over one shared operand under one epilogue): the second
  contraction's other operand is a second tile in shared memory and a second set of
  accumulators; neither contraction is stored.

The host emulator (:mod:`.emulator`) runs the same source with 32 threads a block (one warp,
``AT_EMULATED``): ``mma.sync`` through a shared-array exchange with the PTX fragment layout, so
the tests check the layout and the split's numerics without a GPU.
"""
from __future__ import annotations

import math

from search_spaces.candidate import Candidate
from search_spaces.footprint import strides
from search_spaces.gemm import gemm_form, group_size
from search_spaces.kernel import gpu_params
from search_spaces.kernel_fusion import KernelParts, group_strides, kernel_parts
from search_spaces.kernel_reads import (KernelRead, kernel_accesses, unit_stride_side,
                                         vector_cols)
from search_spaces.partition import Group
from search_spaces.precision import kernel_precision
from search_spaces.siblings import member_offsets
from search_spaces.workload import Workload

from autotune.backends.cpu.gemm_transforms import Dialect, FusionSite, kernel_transforms
from autotune.backends.cuda.kernels import CUDA_FUNCTIONS, CudaKernel

I = "long long"
# two K-slice stages where both fit in this much shared memory: the smallest opt-in limit of
# the sm_80 and later GPUs (sm_86, sm_89: 99 KB; costmodel.cuda_limits), so a kernel runs on
# any of them; a larger block tile (a pair of 128 x 128 tiles) keeps one stage
TWO_STAGE_BYTES = 99 * 1024


def _offset(w: Workload, layout_of, tensor: str, sub: tuple[str, ...], groups, ext,
            flats: tuple[str, str, str]) -> str:
    """C text of the element offset of ``tensor`` (read at ``sub``, contraction index names)
    at the element whose flattened (batch, rows, cols) over ``groups`` are ``flats``."""
    shape, perm = w.shapes[tensor], layout_of(tensor)
    nested = group_strides(sub, shape, perm, groups, ext)
    if nested is not None:
        terms = [f"({f}) * {s}LL" if s != 1 else f"({f})" for f, s in zip(flats, nested) if s]
        return " + ".join(terms) or "0LL"
    st = dict(zip(sub, strides(shape, perm)))
    terms = []
    for grp, flat in zip(groups, flats):
        for pos, i in enumerate(grp):
            s = st.get(i, 0)
            if not s or ext[i] == 1:
                continue
            inner = math.prod(ext[j] for j in grp[pos + 1:])
            v = f"({flat}) / {inner}LL" if inner > 1 else f"({flat})"
            if pos > 0:
                v = f"(({v}) % {ext[i]}LL)"
            terms.append(f"{v} * {s}LL")
    return " + ".join(terms) or "0LL"


class MmaEmitter:
    """One kernel group of a candidate as a tensor-core kernel (see the module docstring)."""

    def __init__(self, w: Workload, cand: Candidate, g: Group):
        self.w, self.g = w, g
        self.layout_of = lambda t: cand.layout(t, len(w.shapes[t]))
        self.parts: KernelParts = kernel_parts(w, cand.fused_pairs, g.anchor)
        sched = cand.schedule(g.anchor)
        self.precision = kernel_precision(w, sched.precision)
        self.p = gpu_params(sched.kernel, bool(self.parts.pair))
        op = w.op(self.parts.contraction)
        self.form = gemm_form(op)
        self.ext = dict(zip(op.domain, op.extents))
        f = self.form
        self.B, self.M, self.N, self.K = (group_size(op, x) for x in (f.batch, f.m, f.n, f.k))
        self.ga, self.gb, self.gc = (f.batch, f.m, f.k), (f.batch, f.k, f.n), (f.batch, f.m, f.n)
        # block tiles along M and N; one block per batch item and tile
        self.gm, self.gn = -(-self.M // self.p.mc), -(-self.N // self.p.nc)
        self.grid = self.B * self.gm * self.gn
        # stack members past a buffer's start that no 16-byte boundary starts (the plan
        # allocates every other tensor on its own, aligned, and aligns its inputs)
        self.misaligned = {m for st in cand.stacks for m, at in member_offsets(w, st).items()
                           if at % 4}

    # ---- the source -------------------------------------------------------------------------
    def _tile_load(self, buf: str, ld: str, tensor: str, sub, groups, rows: str, cols: str,
                   nrows: str, ncols: str, lo_r: str, lo_c: str, hook: str, lim_r: str,
                   lim_c: str) -> list[str]:
        """The loop that copies one operand slice (``nrows`` x ``ncols``) into shared memory,
        ``hook`` applied to each element (``{x}`` the loaded value)."""
        read = KernelRead(tensor, sub)
        fast_cols = unit_stride_side(self.w, self.layout_of, read, groups) != "rows"
        off = _offset(self.w, self.layout_of, tensor, sub, groups, self.ext,
                      ("bt", rows, cols))
        # copied as it is: cp.async (no register, zero-filled outside), four floats at a time
        # where they are four neighbours on a 16-byte boundary both in storage and in the
        # shared tile, whose rows are contiguous: along its columns (slices are multiples of
        # 8 along both sides, the extent along the vector a multiple of 4)
        vec = 4 if hook == "{x}" and fast_cols and tensor not in self.misaligned and \
            vector_cols(self.w, self.layout_of, read, groups, self.ext) else 1
        if fast_cols:
            r, c = (f"e / ({ncols} / {vec})", f"e % ({ncols} / {vec}) * {vec}")
        else:
            r, c = (f"e % ({nrows} / {vec}) * {vec}", f"e / ({nrows} / {vec})")
        head = [f"    for (int e = threadIdx.x; e < {nrows} * {ncols} / {vec}; "
                f"e += blockDim.x) {{",
                f"      const int r = {r}, c = {c};",
                f"      const {I} {rows} = {lo_r} + r, {cols} = {lo_c} + c;"]
        if hook == "{x}":
            return head + [f"      const bool inb = {rows} < {lim_r} && {cols} < {lim_c};",
                           f"      at_cp{4 * vec}(&{buf}[r * {ld} + c], p_{tensor} + (inb ? "
                           f"{off} : 0LL), inb ? {4 * vec} : 0);",
                           "    }"]
        val = hook.format(x="xv", **{rows: rows, cols: cols})
        return head + [
                "      T v = 0;",
                f"      if ({rows} < {lim_r} && {cols} < {lim_c}) {{ const T xv = "
                f"p_{tensor}[{off}]; v = {val}; }}",
                f"      {buf}[r * {ld} + c] = v;",
                "    }"]

    def _frags(self, name: str, buf: str, is_a: bool) -> list[str]:
        """Fragment loads of one operand from shared memory (split or rounded)."""
        split = self.precision == "3xtf32"
        if is_a:
            head = (f"        for (int i = 0; i < FM; ++i) {{ const float* q = {buf} + "
                    f"(r0 + i * 16 + g) * LDA + kk + t4;")
            cells = [("0", 0), ("8 * LDA", 1), ("4", 2), ("8 * LDA + 4", 3)]
            ix = "i"
        else:
            head = (f"        for (int j = 0; j < FN; ++j) {{ const float* q = {buf} + "
                    f"(kk + t4) * LDB + c0 + j * 8 + g;")
            cells = [("0", 0), ("4 * LDB", 1)]
            ix = "j"
        body = [f"at_split(q[{o}], {name}h[{ix}][{h}], {name}l[{ix}][{h}]);" if split else
                f"{name}h[{ix}][{h}] = at_tf32(q[{o}]);" for o, h in cells]
        return [head, "          " + " ".join(body) + " }"]

    def emit(self, index: int, prefix: str = "") -> tuple[str, CudaKernel]:
        w, p, parts = self.w, self.p, self.parts
        name = f"{prefix}k{index}_{self.g.anchor}"
        hooks, extras = kernel_transforms(w, parts, self.layout_of, self._dialect())
        acc = kernel_accesses(w, parts)
        (a_t, a_sub), (b_t, b_sub) = (acc.a.tensor, acc.a.sub), (acc.b.tensor, acc.b.sub)
        pair = (acc.pair.tensor, acc.pair.sub, acc.pair_role) if acc.pair else None
        out_t, out_sub = acc.out.tensor, acc.out.sub
        reads = [a_t, b_t] + ([pair[0]] if pair else []) + [o.tensor for _, o in extras]
        reads = [t for n, t in enumerate(reads) if t not in reads[:n] and t != out_t]
        warps = (p.mc // p.mr) * (p.nc // p.nr)
        gm, gn = self.gm, self.gn
        lda, ldb = p.kc + 4, p.nc + 8
        second = (p.mc * lda if pair[2] == "a" else p.kc * ldb) if pair else 0
        stage = p.mc * lda + p.kc * ldb + second          # floats of one K slice's tiles
        stages = 2 if 2 * 4 * stage <= TWO_STAGE_BYTES else 1
        smem = 4 * stage * stages
        params = [f"const float* __restrict__ p_{t}" for t in reads] + \
            [f"float* __restrict__ p_{out_t}"]
        split = self.precision == "3xtf32"
        L = [f"/* group {index}: anchor {self.g.anchor}, tensor-core contraction kernel "
             f"({self.precision}), members {', '.join(self.g.members)}, block tile "
             f"{p.mc}x{p.nc}x{p.kc}, warp tile {p.mr}x{p.nr}, {warps} warps, {stages} "
             f"stage(s), shared {smem} B */",
             f'extern "C" __global__ void __launch_bounds__({warps * 32}, 1) '
             f"{name}({', '.join(params)}) {{",
             "  typedef float T;",
             f"  constexpr {I} M = {self.M}, N = {self.N}, K = {self.K}, GM = {gm}, GN = {gn};",
             f"  constexpr int BM = {p.mc}, BN = {p.nc}, BK = {p.kc}, WM = {p.mr}, WN = {p.nr};",
             "  constexpr int LDA = BK + 4, LDB = BN + 8;",
             "  constexpr int WTN = BN / WN, WT = (BM / WM) * WTN, FM = WM / 16, FN = WN / 8;",
             "#ifdef AT_EMULATED",
             "  constexpr int NW = 1;      // the emulator runs one warp a block",
             "#else",
             "  constexpr int NW = WT;",
             "#endif",
             "  constexpr int TPW = WT / NW;",
             "  extern __shared__ __align__(16) float smem_f32[];",
             f"  constexpr int STAGE = {stage};     // floats of one K slice's tiles",
             f"  {I} blk = blockIdx.x;",
             f"  const {I} bn = blk % GN; blk /= GN;",
             f"  const {I} bm = blk % GM;",
             f"  const {I} bt = blk / GM;",
             "  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;",
             "  const int g = lane >> 2, t4 = lane & 3;",
             "  float acc[TPW][FM][FN][4];" + (" float acc2[TPW][FM][FN][4];" if pair else ""),
             "  for (int a = 0; a < TPW * FM * FN * 4; ++a) { (&acc[0][0][0][0])[a] = 0.f;"
             + (" (&acc2[0][0][0][0])[a] = 0.f;" if pair else "") + " }"]

        def load(at: str, k_lo: str) -> list[str]:
            """The K slice from ``k_lo`` into the stage at float ``at``: cp.async for operands
            copied as they are (their group committed by the caller), a prologue's
            operand through registers."""
            out = [f"    float* An = smem_f32 + {at}; float* Bn = An + BM * LDA;"
                   + (" float* Pn = Bn + BK * LDB;" if pair else ""),
                   f"    const {I} kn = {k_lo};"]
            out += self._tile_load("An", "LDA", a_t, a_sub, self.ga, "m", "k", "BM", "BK",
                                   "bm * BM", "kn", hooks["prologue_a"].expr, "M", "K")
            out += self._tile_load("Bn", "LDB", b_t, b_sub, self.gb, "k", "n", "BK", "BN",
                                   "kn", "bn * BN", hooks["prologue_b"].expr, "K", "N")
            if pair and pair[2] == "a":
                out += self._tile_load("Pn", "LDA", pair[0], pair[1], self.ga, "m", "k", "BM",
                                       "BK", "bm * BM", "kn", "{x}", "M", "K")
            elif pair:
                out += self._tile_load("Pn", "LDB", pair[0], pair[1], self.gb, "k", "n", "BK",
                                       "BN", "kn", "bn * BN", "{x}", "K", "N")
            return ["  " + x for x in out]
        # K slices through ``stages`` shared-memory stages: with two, slice k+1's copies are
        # in flight while the warps multiply slice k (one barrier before and one after)
        L += ["  {", *load("0", "0"), "  }", "  at_cp_commit();", "  int st = 0;",
              f"  for ({I} k0 = 0; k0 < K; k0 += BK) {{",
              "    float* As = smem_f32 + st * STAGE; float* Bs = As + BM * LDA;"
              + (" float* Ps = Bs + BK * LDB;" if pair else "")]
        if stages == 2:
            L += ["    if (k0 + BK < K) {", *load("(st ^ 1) * STAGE", "k0 + BK"),
                  "      at_cp_commit(); at_cp_wait<1>();",
                  "    } else {", "      at_cp_wait<0>();", "    }"]
        else:
            L += ["    at_cp_wait<0>();"]
        frag_decl = ["        unsigned ah[FM][4], bh[FN][2];"]
        if split:
            frag_decl.append("        unsigned al[FM][4], bl[FN][2];")
        L += ["    __syncthreads();",
              "    for (int tw = 0; tw < TPW; ++tw) {",
              "      const int wt = warp * TPW + tw, r0 = (wt / WTN) * WM, c0 = (wt % WTN) * WN;",
              "      for (int kk = 0; kk < BK; kk += 8) {", *frag_decl]
        L += self._frags("a", "As", True) + self._frags("b", "Bs", False)
        products = (("al", "bh"), ("ah", "bl"), ("ah", "bh")) if split else (("ah", "bh"),)
        mma = " ".join(f"at_mma(acc[tw][i][j], {x}[i], {y}[j]);" for x, y in products)
        if pair:
            pa = pair[2] == "a"
            L.append(f"        unsigned ph[{'FM' if pa else 'FN'}][{4 if pa else 2}];"
                     + (f" unsigned pl[{'FM' if pa else 'FN'}][{4 if pa else 2}];"
                        if split else ""))
            L += self._frags("p", "Ps", pa)
            prods2 = [(x.replace("a", "p") if pa and x[0] == "a" else x,
                       y.replace("b", "p") if not pa and y[0] == "b" else y)
                      for x, y in products]
            mma += " " + " ".join(f"at_mma(acc2[tw][i][j], {x}[i], {y}[j]);" for x, y in prods2)
        L += ["        for (int i = 0; i < FM; ++i)",
              "          for (int j = 0; j < FN; ++j) { " + mma + " }",
              "      }", "    }", "    __syncthreads();"]
        if stages == 2:
            L += ["    st ^= 1;", "  }"]
        else:
            L += ["    if (k0 + BK < K) {", *load("0", "k0 + BK"), "      at_cp_commit();",
                  "    }", "  }"]
        scale = "" if self.form.scale == 1.0 else f" * (T){self.form.scale!r}"
        off = _offset(w, self.layout_of, out_t, out_sub, self.gc, self.ext, ("bt", "m", "n"))
        val = hooks["epilogue"].expr.format(x="xv", y="yv", m="m", n="n")
        L += ["  for (int tw = 0; tw < TPW; ++tw) {",
              "    const int wt = warp * TPW + tw, r0 = (wt / WTN) * WM, c0 = (wt % WTN) * WN;",
              "    for (int i = 0; i < FM; ++i)",
              "      for (int j = 0; j < FN; ++j)",
              "        for (int h = 0; h < 4; ++h) {",
              f"          const {I} m = bm * BM + r0 + i * 16 + g + (h >> 1) * 8;",
              f"          const {I} n = bn * BN + c0 + j * 8 + 2 * t4 + (h & 1);",
              "          if (m < M && n < N) {",
              f"            const T xv = acc[tw][i][j][h]{scale};",
              f"            const T yv = acc2[tw][i][j][h]{scale};" if pair else "",
              f"            p_{out_t}[{off}] = {val};",
              "          }", "        }", "  }", "}"]
        src = "\n".join(x for x in L if x)
        kern = CudaKernel(index, name, self.g.anchor, tuple(self.g.members),
                          tuple(reads) + (out_t,), (out_t,), (p.mc, p.nc), self.grid, warps * 32,
                          smem, I, whole_warps=True)
        return src, kern

    def _dialect(self) -> Dialect:
        w, lay, ext = self.w, self.layout_of, self.ext

        def read(site: FusionSite, o, r: str, c: str) -> str:
            to_p = dict(site.to_contraction)
            sub = tuple(to_p[i] for i in o.idx)
            return f"p_{o.tensor}[{_offset(w, lay, o.tensor, sub, site.groups, ext, ('bt', r, c))}]"
        return Dialect(CUDA_FUNCTIONS, lambda b, n: (
            f"at_powi<{n}>({b})" if n > 0 else f"((T)1 / at_powi<{-n}>({b}))"), read)
