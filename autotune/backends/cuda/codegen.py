"""CUDA C source for the loop groups of a candidate (the CUDA backend's kernels).

Each loop group becomes one ``extern "C" __global__`` kernel with one thread block per anchor
tile: the block decodes ``blockIdx.x`` into per-dim tile coordinates (the anchor's innermost
storage dim varies fastest, so neighbouring blocks touch neighbouring memory), then evaluates
every member over its footprint (``search_spaces.footprint``), in program order.  A member's
footprint is flattened and strided over the block's threads; each thread owns output elements
and loops over the member's reduction dims itself, except where the member's largest read walks
a reduced dim at unit stride (search_spaces.threads.warp_reduced: a layer norm's mean over its
contiguous channels): there a warp owns an output element, its lanes stride that dim and
combine their partial results with ``__shfl_xor_sync``.  Members other than the anchor live in
dynamic shared memory (``extern __shared__`` split into one row-major buffer per member, rows of
a multiple of 32 banks padded by one element, ``costmodel.cuda_limits.shared_layout``) with a
``__syncthreads()`` after each; members read by other groups are also written to global memory,
and the anchor writes its tile straight to global memory in the candidate's layout.

The same semantics as the C backend (``autotune.backends.cpu.codegen``): the same footprints,
offsets and expression translation (``autotune.backends.loops.LoopEmitter``, shared with it),
with CUDA math functions.  Not the same loop orders: across a member's threads the fastest
index is the one its largest global access walks at unit stride (search_spaces.threads), so a
warp's accesses coalesce.
"""
from __future__ import annotations

import math

from costmodel.cuda_limits import padded_shape, shared_layout
from search_spaces.candidate import IMPL_KERNEL, IMPL_LOOP, Candidate
from search_spaces.chain import detect
from search_spaces.footprint import item_bytes, strides
from search_spaces.partition import Group, groups, materialized
from search_spaces.threads import thread_order, warp_reduced
from search_spaces.workload import Workload

from autotune.backends.chain_loops import ChainLoops
from autotune.backends.cuda.kernels import (CUDA_FUNCTIONS, PRELUDE, CudaKernel, TileTooLarge,
                                            check_limits)
from autotune.backends.cuda.mma_kernel import MmaEmitter
from autotune.backends.cuda.mma_prelude import MMA_PRELUDE
from autotune.backends.loops import LoopEmitter

__all__ = ["CudaKernel", "TileTooLarge", "check_limits", "generate_cuda", "kernel_source"]

CUDA_TAGS = {"float32": "f32", "float64": "f64"}     # names the shared buffer, -inf
DEFAULT_BLOCK = 256
MAX_BLOCK = 1024
INT32_MAX = 2**31 - 1


class _KernelEmitter(LoopEmitter):
    FUNCTIONS = CUDA_FUNCTIONS

    def __init__(self, w: Workload, cand: Candidate, g: Group, mats: set[str], block: int):
        super().__init__(w, cand, g, mats)
        self.tag = CUDA_TAGS[w.dtype]
        layout, self.smem_bytes = shared_layout(w, g, self.tiles)
        self.item = item_bytes(w)
        self.smem_off = {m: off for m, off, _ in layout}
        self.grid = math.prod(self.ntile)
        counts = [math.prod(self.buf_shape(mp.op)) for mp in self.plans]
        self.block = min(block, max(32, -(-max(counts) // 32) * 32))
        sizes = [math.prod(w.shapes[t]) for m in g.members for t in
                 (list(w.op(m).inputs()) + [m])] + counts + [self.grid]
        big = max(sizes + [max(w.op(m).extents, default=1) for m in g.members])
        self.itype = "int" if big < INT32_MAX // 2 else "long long"
        self.lit = "" if self.itype == "int" else "LL"

    def n(self, x: int) -> str:
        return f"{x}{self.lit}"

    def power(self, base: str, exponent: int) -> str:
        p = f"at_powi<{abs(exponent)}>({base})"
        return f"((({self.ctype})1) / {p})" if exponent < 0 else p

    def step(self, v: str) -> str:
        return f"++{v}"

    def buf_strides(self, tensor: str) -> tuple[int, ...]:
        """A member's shared-memory buffer: row-major with padded rows, as
        costmodel.cuda_limits.shared_layout sizes it."""
        shape = padded_shape(self.buf_shape(tensor), self.item)
        return strides(shape, tuple(range(len(shape))))


    # ---- one member ----------------------------------------------------------------------
    def thread_order(self, op, par_order: list[str]) -> list[str]:
        """The member's parallel indices, the thread-fastest last (search_spaces.threads)."""
        extents = dict(zip(op.parallel, self.buf_shape(op.out)))
        return thread_order(self.w, self.g, self.mats, op, par_order, self.layout_of, extents)

    def member(self, mp, out: list[str]) -> None:
        op = self.w.op(mp.op)
        I, ct = self.itype, self.ctype
        var = {i: f"v_{i}" for i in op.domain}
        rng = self.bounds(mp.op)
        lo = {i: rng[i][0] for i in op.parallel}
        # counts are the full tile's, constants: the decode below divides by literals (a
        # multiply and a shift, where a runtime divisor costs a few dozen instructions), and a
        # boundary tile's points past its end are skipped
        cnt, guards = {}, []
        for i in op.parallel:
            start, hi = rng[i]
            if start == "0":
                cnt[i] = hi
                continue
            k = int(start[1:])              # b<k>..e<k>: the anchor tile's range along dim k
            cnt[i] = self.n(self.eff[k])
            if self.anchor.out_shape[k] % self.eff[k]:
                guards.append(f"{var[i]} < {hi}")
        red_order = [i for i in mp.order if i in op.reduction]
        lanes = warp_reduced(self.w, self.g, op, self.layout_of, {
            m: self.buf_shape(m) for m in self.g.members if m != self.g.anchor})
        par_order = [i for i in mp.order if i in op.parallel]
        if lanes is None:
            par_order = self.thread_order(op, par_order)
        else:       # a warp per output element, its lanes along the reduced index
            red_order = [i for i in red_order if i != lanes] + [lanes]
        is_anchor = mp.op == self.g.anchor
        add = out.append
        add(f"  /* {op.text()}" + (f"; a warp per element, lanes along {lanes}" if lanes else "")
            + " */")
        add("  {")
        total = " * ".join(cnt[i] for i in par_order) or "1"
        add(f"    const {I} cnt = {total};")
        if lanes:
            add("    const int lane = threadIdx.x % AT_WARP;")
            add(f"    for ({I} f = threadIdx.x / AT_WARP; f < cnt; f += blockDim.x / AT_WARP) {{")
        else:
            add(f"    for ({I} f = threadIdx.x; f < cnt; f += blockDim.x) {{")
        if par_order:
            add(f"      {I} q = f;")
            for pos, i in enumerate(reversed(par_order)):
                if pos == len(par_order) - 1:
                    add(f"      const {I} {var[i]} = {lo[i]} + q;")
                else:
                    add(f"      const {I} {var[i]} = {lo[i]} + q % {cnt[i]}; q /= {cnt[i]};")
        if guards:      # the same for a warp's lanes (f is): they skip together
            add(f"      if (!({' && '.join(guards)})) continue;")
        body = self.expr(op.expr, var)
        if op.combiner == "none":
            add(f"      const {ct} val = {body};")
        else:
            init = "0" if op.combiner == "sum" else f"AT_NEG_INF_{self.tag}"
            add(f"      {ct} acc = ({ct}){init};" if op.combiner == "sum" else
                f"      {ct} acc = {init};")
            upd = (f"acc += {body};" if op.combiner == "sum" else
                   f"{{ const {ct} v = {body}; acc = v > acc ? v : acc; }}")
            if lanes:
                v, (lo, hi) = var[lanes], rng[lanes]
                out.extend(self.nest(red_order[:-1], rng, var, "      ",
                                     f"for ({I} {v} = {lo} + lane; {v} < {hi}; {v} += AT_WARP) "
                                     f"{upd}"))
                # the lanes' partial results combined in log2(AT_WARP) shuffles; every lane
                # of the warp is here (f is the same for all of them)
                comb = "acc += o_;" if op.combiner == "sum" else "acc = o_ > acc ? o_ : acc;"
                add("      for (int o = AT_WARP / 2; o > 0; o >>= 1) { "
                    f"const {ct} o_ = __shfl_xor_sync(0xffffffffu, acc, o); {comb} }}")
            else:
                out.extend(self.nest(red_order, rng, var, "      ", upd))
            add(f"      const {ct} val = acc;")
        store = "      if (lane == 0) " if lanes else "      "
        if is_anchor:
            add(f"{store}G_{mp.op}[{self.global_offset(mp.op, op.parallel, var)}] = val;")
        else:
            add(f"{store}L_{mp.op}[{self.offset(mp.op, op.parallel, var)}] = val;")
            if mp.op in self.mats:
                add(f"{store}G_{mp.op}[{self.global_offset(mp.op, op.parallel, var)}] = val;")
        add("    }")
        add("  }")
        if not is_anchor:
            add("  __syncthreads();")

    # ---- the kernel ----------------------------------------------------------------------
    all_bounds = False          # b<k>/e<k> for untiled dims too
    # a tile's end is read only where tiles do not divide the extent (a member's counts are
    # the full tile's): elsewhere it is declared for nothing
    end_qualifier = "[[maybe_unused]] "

    def body(self, out: list[str]) -> None:
        for mp in self.plans:
            self.member(mp, out)

    def emit(self, index: int, prefix: str) -> tuple[str, CudaKernel]:
        g = self.g
        I, ct = self.itype, self.ctype
        reads, writes = self.arguments()
        args = tuple(reads + writes)
        name = f"{prefix}group_{index}"
        params = [f"const {ct}* __restrict__ G_{t}" for t in reads] + \
                 [f"{ct}* __restrict__ G_{t}" for t in writes]
        out = [f"/* group {index}: {', '.join(m for m in g.members)}; anchor {g.anchor}; "
               f"tiles {tuple(self.eff)}; grid {self.grid}; block {self.block}; "
               f"shared {self.smem_bytes} B */",
               f'extern "C" __global__ void __launch_bounds__({self.block}) {name}(',
               "    " + ",\n    ".join(params) + ") {"]
        if self.smem_off:
            out.append(f"  extern __shared__ __align__(16) {ct} smem_{self.tag}[];")
            for m, off in self.smem_off.items():
                out.append(f"  {ct}* __restrict__ L_{m} = smem_{self.tag} + {off};")
        shape = self.anchor.out_shape
        nd = len(shape)
        perm = self.layout_of(g.anchor)
        tiled = [k for k in reversed(perm) if self.ntile[k] > 1]   # fastest-varying first
        if tiled:
            out.append(f"  {I} r = ({I})blockIdx.x;")
        for pos, k in enumerate(tiled):
            if pos == len(tiled) - 1:
                out.append(f"  const {I} t{k} = r;")
            else:
                out.append(f"  const {I} t{k} = r % {self.n(self.ntile[k])}; "
                           f"r /= {self.n(self.ntile[k])};")
        for k in range(nd):      # untiled dims need no bounds: footprints use them in full
            if self.ntile[k] > 1 or self.all_bounds:
                if self.ntile[k] == 1:
                    out.append(f"  const {I} t{k} = 0;")
                out.append(self.tile_bounds(k, "  "))
        self.body(out)
        out.append("}")
        kern = CudaKernel(index, name, g.anchor, tuple(m.op for m in self.plans), args,
                          tuple(writes), tuple(self.eff), self.grid, self.block,
                          self.smem_bytes, I, ct)
        return "\n".join(out), kern


class _ChainKernel(ChainLoops, _KernelEmitter):
    """A chain group (autotune.backends.chain_loops): one thread per row of the tile, its block
    buffers and accumulators in the thread's own arrays; no shared memory."""
    simd = simd_sum = simd_max = ""
    all_bounds = True

    def __init__(self, w: Workload, cand: Candidate, g: Group, mats: set[str], block: int,
                 chain, chain_block: int):
        LoopEmitter.__init__(self, w, cand, g, mats)    # footprints would ask for shared memory
        self.tag = CUDA_TAGS[w.dtype]
        self.smem_off, self.smem_bytes = {}, 0
        self.grid = math.prod(self.ntile)
        sizes = [math.prod(w.shapes[t]) for m in g.members
                 for t in list(w.op(m).inputs()) + [m]] + [self.grid]
        big = max(sizes + [max(w.op(m).extents, default=1) for m in g.members])
        self.itype = "int" if big < INT32_MAX // 2 else "long long"
        self.lit = "" if self.itype == "int" else "LL"
        self.setup_chain(chain, chain_block)        # prints literals: after itype
        self.neg_inf = f"AT_NEG_INF_{self.tag}"
        self.row_dims = [(k, c) for k, c in enumerate(self.adims) if c.startswith("r")]
        nrows = math.prod(self.eff[k] for k, _ in self.row_dims)
        self.block = min(block, max(32, -(-nrows // 32) * 32))

    def rows_open(self, ind: str) -> tuple[list[str], str]:
        I, ct = self.itype, self.ctype
        cnt = {k: f"(e{k} - b{k})" for k, _ in self.row_dims}
        out = [f"{ind}const {I} nrows = {' * '.join(cnt.values()) or '1'};",
               f"{ind}for ({I} f = threadIdx.x; f < nrows; f += blockDim.x) {{"]
        ind += "  "
        out.append(f"{ind}{I} q = f;")
        for pos, (k, c) in enumerate(reversed(self.row_dims)):
            last = pos == len(self.row_dims) - 1
            out.append(f"{ind}const {I} c_{c} = b{k} + " + (
                "q;" if last else f"q % {cnt[k]}; q /= {cnt[k]};"))
        out += [f"{ind}{ct} {name}[{size}];" for name, size in self.chain_buffers()]
        return out, ind

    def rows_close(self, ind: str) -> list[str]:
        return [f"{ind[:-2]}}}"]

    def body(self, out: list[str]) -> None:
        out.extend(self.chain_tile("  "))


def generate_cuda(w: Workload, cand: Candidate, *, block: int = DEFAULT_BLOCK,
                  smem_limit: int | None = None, prefix: str = ""
                  ) -> tuple[str, list[CudaKernel]]:
    """CUDA source for every loop group and every kernel group (:mod:`.mma_kernel`) of
    ``cand``, and each kernel's launch record.

    ``block`` caps the threads per block, a multiple of 32 (a kernel whose largest footprint is
    smaller gets fewer, a multiple of 32).  ``smem_limit`` (bytes per block): raise :class:`TileTooLarge`
    when a kernel needs more.  ``prefix`` is put before every kernel name (so several plans
    can share one translation unit).
    """
    if not 32 <= block <= MAX_BLOCK or block % 32:
        # whole warps: a warp reduction's shuffles need all 32 lanes of every warp
        raise ValueError(f"block {block}: use a multiple of 32 in 32..{MAX_BLOCK} threads")
    mats = materialized(w, cand.fused_pairs)
    parts, kernels = [PRELUDE], []
    for k, g in enumerate(groups(w, cand.fused_pairs)):
        sched = cand.schedule(g.anchor)
        if sched.impl == IMPL_KERNEL and not cand.stack(g.anchor):
            if MMA_PRELUDE not in parts:
                parts.append(MMA_PRELUDE)
            em = MmaEmitter(w, cand, g)
        elif sched.impl != IMPL_LOOP:
            continue
        elif sched.chain_block:
            em = _ChainKernel(w, cand, g, mats, block, detect(w)[g.anchor], sched.chain_block)
        else:
            em = _KernelEmitter(w, cand, g, mats, block)
        if em.grid > INT32_MAX:
            raise TileTooLarge(f"group {k} (anchor {g.anchor}): {em.grid} tiles exceed the "
                               f"grid limit {INT32_MAX}; use larger tiles")
        src, kern = em.emit(k, prefix)
        parts.append(src)
        kernels.append(kern)
    if smem_limit is not None:
        check_limits(kernels, smem_limit)
    return "\n\n".join(parts) + "\n", kernels


def kernel_source(source: str, kern: CudaKernel) -> str:
    """The prelude plus one kernel of ``source`` (for writing one ``.cu`` per kernel)."""
    start = source.index(f"/* group {kern.index}:")
    end = source.find("\n/* group ", start + 1)
    body = source[start:] if end < 0 else source[start:end]
    return PRELUDE + (MMA_PRELUDE if kern.whole_warps else "") + "\n" + body.rstrip() + "\n"

