"""C + OpenMP source for the loop groups of a candidate (the CPU backend's kernels).

Each loop group becomes one function ``void group_K(void **args)``: an OpenMP-parallel loop over
the anchor's tiles; inside a tile every member is evaluated over its footprint into a per-thread
buffer (members read each other's buffers, never memory written by another tile), and the anchor
writes its tile of the output in the candidate's layout (first in a tile buffer of its own where
that layout would make each reduction step a strided read-modify-write: `_Emitter.staged`).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from search_spaces.candidate import IMPL_LOOP, Candidate
from search_spaces.chain import detect
from search_spaces.chain_walk import repacked_layouts
from search_spaces.partition import groups, materialized
from search_spaces.footprint import accumulates_in_tile, strides, tile_dealing
from search_spaces.inlining import inlined_members
from search_spaces.ir import Access
from search_spaces.serial import loop_group_serial
from search_spaces.tile_work import dealing_order, masked_chain_work
from search_spaces.workload import Workload

from autotune.backends.buffers import ALIGN
from autotune.backends.chain_loops import ChainLoops
from autotune.backends.cpu.hoist import hoisted
from autotune.backends.cpu.prelude import EXP_BOUNDS, PRELUDE  # noqa: F401 (re-exported)
from autotune.backends.cpu.private_rows import PrivateRows, lane_reduction
from autotune.backends.cpu.machine import machine_bounds
from autotune.backends.cpu.repack import repack_code
from autotune.backends.cpu.strided_walk import walks_a_stride
from autotune.backends.loops import LoopEmitter


@dataclass(frozen=True)
class GroupKernel:
    """One generated function: its name and the tensors its ``args`` array holds, in order."""
    index: int
    name: str
    anchor: str
    args: tuple[str, ...]       # global tensors: reads first, then written ones
    writes: tuple[str, ...]


# C spellings of the functions loops.COMMON_FUNCTIONS lacks, and of those it spells in a way
# that does not vectorise here (the kernel's epilogues use them too):
# * exp and tanh through AT_EXP (argument bounded below: EXP_BOUNDS) and AT_TANH (PRELUDE):
#   float32's inlined (fast_exp, fast_tanh: 2x libmvec's on the development host), float64's
#   libm/libmvec;
# * max, min and relu as comparisons: under -fno-finite-math-only GCC calls libm's fmaxf per
#   element (NaN rules), 5x slower than a vector max in a plain loop here.
C_FUNCTIONS = {"rsqrt": "(1/sqrt{s}({0}))", "sigmoid": "(1/(1+AT_EXP{s}(-({0}))))",
               "exp": "AT_EXP{s}({0})", "tanh": "AT_TANH{s}({0})",
               "relu": "({{ __auto_type _r = ({0}); _r > 0 ? _r : 0; }})",
               "max": "({{ __auto_type _a = ({0}); __auto_type _b = ({1}); _a > _b ? _a : _b; }})",
               "min": "({{ __auto_type _a = ({0}); __auto_type _b = ({1}); _a < _b ? _a : _b; }})"}


# An innermost assignment loop that calls these ends in an overlapped vector of OVERLAP_BYTES
# (AVX2's), not a scalar remainder (_Emitter._overlapped_nest; float32's inlined AT_TANHf too:
# a 997 x 53 tanh group 31.8 -> 25.0 us on 2 cores), after the invariant ones (cpu.hoist).
LIBM_CALLS = ("AT_EXP", "logf(", "log(", "AT_TANH")
OVERLAP_BYTES = 32


class _Emitter(PrivateRows, LoopEmitter):
    FUNCTIONS = C_FUNCTIONS
    hoist_names = None  # (var, {expression: name}) while autotune.backends.cpu.hoist renders

    @functools.cached_property
    def inlined(self) -> frozenset[str]:
        """Members evaluated inside their one reader's expression, with no tile buffer
        (search_spaces.inlining)."""
        return inlined_members(self.w, self.g, self.plans, self.mats, self.layout_of)

    def expr(self, e, var):
        if self.hoist_names is not None and var is self.hoist_names[0] and e in self.hoist_names[1]:
            return self.hoist_names[1][e]
        if isinstance(e, Access) and e.tensor in self.inlined:
            op = self.w.op(e.tensor)
            return self.expr(op.expr, {p: var[i] for p, i in zip(op.parallel, e.idx)})
        return super().expr(e, var)

    def n(self, x: int) -> str:
        return f"{x}L"

    def power(self, base: str, exponent: int) -> str:
        # a GNU statement expression evaluates the base once
        prod = " * ".join(["_p"] * abs(exponent))
        body = f"({{ {self.ctype} _p = {base}; {prod}; }})"
        return f"(1/{body})" if exponent < 0 else body

    def select(self, cond: str, a: str, b: str) -> str:
        # both branches evaluated before the choice, as where() means (their accesses are in
        # the statement's domain, so always in bounds): a ternary with a load in one branch
        # must not load where it is not taken, which GCC 12 could only do with a masked load
        # it did not vectorise (gram_norm's where(i == j, 0, g * rsqrt(..)): 2.5 ms a scalar
        # loop); as two values and a blend, it vectorises like max and min
        return f"({{ __auto_type _t = ({a}); __auto_type _f = ({b}); {cond} ? _t : _f; }})"

    def local_index(self, v: str, start: str | None) -> str:
        return f"({v} - {start})" if start is not None else f"({v})"

    def _nest(self, order, rng, var, body: str, simd: bool, decls: str = "") -> None:
        """A loop nest around ``body``; ``decls`` (cpu.hoist's values) right before its
        innermost loop, in a block of their own."""
        pragma = "#pragma omp simd" if simd else None
        if not decls:
            self.lines.extend(self.nest(order, rng, var, "    ", body, pragma))
            return
        outer = self.nest(order[:-1], rng, var, "    ", "")
        ind = outer[-1]                 # the innermost body's indent (the body itself empty)
        inner = self.nest(order[-1:], rng, var, "  ", body, pragma)
        self.lines.extend(outer[:-1] + [f"{ind}{{ {decls}"] + [ind + x for x in inner]
                          + [f"{ind}}}"])

    def _overlapped_nest(self, order, rng, var, body: str, decls: str = "") -> None:
        """A loop nest whose innermost loop, an assignment that may run twice on an element
        (it reads nothing it writes), ends in one whole vector that overlaps the last full
        ones instead of a scalar remainder.  Why: a remainder calls the scalar libm function
        (expf, tanhf) per element, ~13 ns each where a vector call costs ~2 ns an element:
        rows of 53 tanh ran 3.19 ns an element, 2.42 overlapped; rows of 21, 4.47 and 2.56
        (one core, GCC 12, libmvec)."""
        v, (lo, hi) = var[order[-1]], rng[order[-1]]
        vw = OVERLAP_BYTES // np.dtype(self.w.dtype).itemsize
        outer = self.nest(order[:-1], rng, var, "    ", "")
        ind = outer[-1]                 # the innermost body's indent (the body itself empty)
        self.lines.extend(outer[:-1] + [ind + line for line in (
            f"{{ {decls}const long _lo = {lo}, _hi = {hi}, _m = _lo + ((_hi - _lo) / {vw}) * {vw};",
            "  #pragma omp simd",
            f"  for (long {v} = _lo; {v} < _m; {v}++) {body}",
            f"  if (_m < _hi && _hi - _lo >= {vw}) {{",
            "    #pragma omp simd",
            f"    for (long _k = 0; _k < {vw}; _k++) {{ const long {v} = _hi - {vw} + _k; {body} }}",
            "  } else {",
            f"    for (long {v} = _m; {v} < _hi; {v}++) {body}",
            "  } }")])

    @functools.cached_property
    def staged(self) -> bool:
        """Whether the anchor accumulates in a per-thread tile buffer, stored once at the end.

        So it does when it sums (or maxes) over a reduction outside its innermost loop, which
        reads and writes each output element once per reduction step, and its layout walks the
        innermost index with a stride: in place, every step would touch one cache line per
        element, at a power-of-two stride all in a few cache sets (gated_mlp, T=512: ``u``
        column-major with tiles of 2 x 1024 ran 1.35 s against 4-10 ms for its row-major
        twins, 100x the model's estimate)."""
        inner = next(m for m in self.plans if m.op == self.g.anchor).order[-1]
        return accumulates_in_tile(self.anchor, self.layout_of, inner)

    def local(self, tensor: str) -> bool:
        return tensor in self.members and (tensor != self.g.anchor or self.staged)

    def member(self, mp) -> None:
        op = self.w.op(mp.op)
        rng = self.bounds(mp.op)
        var = {i: f"v_{i}" for i in op.domain}
        is_anchor = mp.op == self.g.anchor
        target = self.ref(mp.op)
        off = self.offset(mp.op, op.parallel, var)
        add = self.lines.append
        add(f"    /* {op.text()} */")
        init = {"sum": "0", "max": "-INFINITY"}.get(op.combiner)
        order = list(mp.order)
        inner = order[-1]
        red_inner = inner in op.reduction
        if init is not None and not red_inner:
            self._nest([i for i in op.parallel], rng, var, f"{target}[{off}] = {init};", simd=True)
        # every loop evaluates its transcendentals that do not vary along its innermost loop
        # once before that loop (cpu.hoist; costmodel.model prices them so)
        decls, body_expr = hoisted(self, op.expr, var, inner)
        # (a call is in the declarations or in the body: the statement's whole rendering)
        libm = any(c in decls + body_expr for c in LIBM_CALLS)
        if op.combiner == "none" and libm:
            self._overlapped_nest(order, rng, var, f"{target}[{off}] = {body_expr};", decls)
        elif op.combiner == "none":
            self._nest(order, rng, var, f"{target}[{off}] = {body_expr};", simd=True,
                       decls=decls)
        elif red_inner and self.private_width(mp):
            self._private_reduction(mp, op, rng, var, body_expr, target, off, decls)
        elif red_inner:
            comb, red = lane_reduction(op.combiner)
            outer = order[:-1]
            first = [i for i in op.reduction if i not in outer]
            # reductions outside the innermost loop accumulate into the target across passes
            acc_init = f"{target}[{off}]" if len(first) < len(op.reduction) else init
            inner_code = (f"{{ {decls}{self.ctype} acc = {acc_init};\n"
                          f"      #pragma omp simd reduction({red}:acc)\n"
                          f"      {self.loop_head(var[inner], *rng[inner])}"
                          f" {{ {self.ctype} _v = {body_expr}; {comb} }}\n"
                          f"      {target}[{off}] = acc; }}")
            if len(first) < len(op.reduction):
                self._nest([i for i in op.parallel], rng, var, f"{target}[{off}] = {init};",
                           simd=True)
            self._nest(outer, rng, var, inner_code, simd=False)
        else:
            # max: a select and an unconditional store; `if (_v > t) t = _v;` vectorised as a
            # masked store (vmaskmovps), microcoded on AMD's Zen: a max= over a middle index
            # of 9 (512 x 144 rows) ran 0.27 ms, the select 0.10 ms
            upd = (f"{target}[{off}] += {body_expr};" if op.combiner == "sum" else
                   f"{{ {self.ctype} _v = {body_expr}, _o = {target}[{off}]; "
                   f"{target}[{off}] = _v > _o ? _v : _o; }}")
            self._nest(order, rng, var, upd, simd=not self.gathers(op, inner), decls=decls)
        if self.local(mp.op) and (mp.op in self.mats or is_anchor):
            gvar = {i: f"v_{i}" for i in op.parallel}
            # the store walks global memory in its own layout's order (contiguous innermost),
            # a fused member's too: attention's p stored key-major, written in its tile
            # buffer's order (a store per line, eight times over for the recomputed tiles),
            # made its softmax group 14 ms where the model said 1.8 ms
            st = dict(zip(op.parallel, strides(self.w.shapes[mp.op], self.layout_of(mp.op))))
            order = sorted(op.parallel, key=lambda i: -st[i])
            self._nest(order, rng, gvar,
                       f"G_{mp.op}[{self.global_offset(mp.op, op.parallel, gvar)}] = "
                       f"L_{mp.op}[{off}];", simd=True)

    def gathers(self, op, inner: str) -> bool:
        """Whether ``op``'s statement walks a stride along ``inner``, its innermost loop: an
        update that does runs without ``omp simd`` (:func:`.strided_walk.walks_a_stride`
        gives the reasons)."""
        return walks_a_stride(op, inner, self.stride, self.inlined, self.w.op)

    def tile_buffers(self) -> list[tuple[str, int]]:
        """Per-thread buffers (name, elements): each fused member's footprint (and the
        anchor's tile, when it is :attr:`staged`), and the private rows of reductions that
        keep them (:meth:`private_width`)."""
        bufs = [(f"L_{m}", math.prod(self.buf_shape(m))) for m in self.g.members
                if self.local(m) and m not in self.inlined]
        return bufs + [(f"P_{mp.op}", math.prod(self.buf_shape(mp.op)) * self.private_width(mp))
                       for mp in self.plans
                       if mp.op not in self.inlined and self.private_width(mp)]

    def tile_table(self, order: list[int]) -> list[int] | None:
        """Flat tile indices in the order they are dealt, or None for the loops' order."""
        return None

    def tile_body(self) -> list[str]:
        self.lines = []
        for mp in self.plans:
            if mp.op not in self.inlined:
                self.member(mp)
        return self.lines

    repack: dict[str, tuple[int, ...]] = {}    # inputs copied into another layout first
    function_attr = ""                          # printed before the group's function

    def emit(self, index: int) -> tuple[str, GroupKernel]:
        g = self.g
        reads, writes = self.arguments()
        args = tuple(reads + writes)
        name = f"group_{index}"
        ct = self.ctype
        head = [f"{self.function_attr}void {name}(void **args) {{"]
        for k, t in enumerate(args):
            const = "const " if t in reads else ""
            arg = "A" if t in self.repack else "G"
            head.append(f"  {const}{ct} *restrict {arg}_{t} = ({const}{ct} *)args[{k}];")
        if self.repack:     # read from copies (set by a chain's setup_chain)
            head += repack_code(self.w.shapes, self.repack, self.base_layout_of, ct)
        nd = len(self.anchor.parallel)
        # a group too small to share runs on the calling thread (search_spaces.serial)
        serial = " if(0)" if loop_group_serial(self.w, g.members) else ""
        head.append(f"  #pragma omp parallel{serial}")
        head.append("  {")
        locals_ = self.tile_buffers()
        # tile buffers on a cache line, whole lines long: malloc's 16-byte alignment splits
        # every other vector store across two lines (autotune.backends.buffers)
        for m, size in locals_:
            head.append(f"  {ct} *restrict {m} = ({ct} *)aligned_alloc({ALIGN}, "
                        f"(sizeof({ct}) * {size}L + {ALIGN - 1}) / {ALIGN} * {ALIGN});")
        collapse = f" collapse({nd})" if nd > 1 else ""
        order, chunk = tile_dealing(self.anchor.out_shape, tuple(self.eff),
                                    tuple(self.layout_of(g.anchor)),
                                    np.dtype(self.w.dtype).itemsize)
        table = self.tile_table(order) if nd else None
        if table is not None:
            # tiles dealt in a listed order (a masked chain's, heaviest first)
            head.insert(0, f"static const int TILES_{index}[{len(table)}] = "
                           f"{{{', '.join(map(str, table))}}};")
            head.append(f"  #pragma omp for schedule(dynamic, {chunk})")
            head.append(f"  for (long _tt = 0; _tt < {len(table)}L; _tt++) {{")
            head.append(f"    const long _t = TILES_{index}[_tt];")
            for k in range(nd):
                inner = math.prod(self.ntile[k + 1:])
                head.append(f"    const long t{k} = _t / {inner}L % {self.ntile[k]}L;")
        else:
            head.append(f"  #pragma omp for schedule(dynamic, {chunk}){collapse}" if nd else "")
            loops = "".join(f"  for (long t{k} = 0; t{k} < {self.ntile[k]}L; t{k}++)\n"
                            for k in order)
            head.append(loops + "  {")
        for k in range(nd):
            head.append(self.tile_bounds(k, "    "))
        body = self.tile_body()
        tail = ["  }"] + [f"  free({m});" for m, _ in locals_] + ["  }"] + \
            [f"  free(P_{t});" for t in self.repack] + ["}"]
        src = "\n".join(head + body + tail)
        return src, GroupKernel(index, name, g.anchor, args, tuple(writes))


class _ChainEmitter(ChainLoops, _Emitter):
    """A chain group: row by row, blocks of the walked index (autotune.backends.chain_loops)."""
    staged = False          # its anchor's stores are the chain's own
    inlined: frozenset[str] = frozenset()     # every member has its block buffer
    # A chain's sums over a block (the scores' dot products, the block's exp sum) are plain
    # loops, which GCC 12 vectorises on its own under -ffast-math.  With `omp simd reduction`
    # it took a scalar path for some block sizes: a causal attention's 32-long score dot
    # product ran one multiply-add at a time at blocks of 16 (perf: 46 % of the group on the
    # loop's compare), 15.7 ms against 4.8 ms plain; a local-window attention at blocks of 128
    # and 256 ran 10.1 and 19.5 ms against 4.9 and 8.5 ms.  Plain was never measurably slower
    # (four chains, every block size, one process, 5 interleaved rounds).
    simd_sum = ""
    vector_walk = True
    # Its loops (the block's max, exponentials, sums and rescales) at the full vector width:
    # GCC vectorised them at 256 bits on AVX-512, and attention's chain group ran 0.46-0.48
    # against 0.38-0.40 ms at 512 (S=256, H=8, D=32, 7 interleaved rounds, 2-core Xeon)
    function_attr = "AT_WIDE "

    def setup_chain(self, chain, block: int, row_steps: bool = False) -> None:
        # inputs the scores walk with a stride are read from a copy, walk innermost (chain_walk.
        # repacked): the chain's decisions (vector scores, row steps) and offsets see its layout
        self.vector_bytes = machine_bounds().vec_bytes[0]
        self.base_layout_of = self.layout_of
        self.layout_of, self.repack = repacked_layouts(self.w, chain, self.base_layout_of,
                                                       block)
        super().setup_chain(chain, block, row_steps)

    def tile_buffers(self) -> list[tuple[str, int]]:
        return self.chain_buffers()

    def tile_table(self, order: list[int]) -> list[int] | None:
        # a masked chain's tiles are unequal: heaviest first (search_spaces.tile_work)
        masked = masked_chain_work(self.w, self.chain, tuple(self.eff), self.block, self.rdim,
                                   self.R)
        ids = dealing_order(masked[0], order) if masked else None
        return None if ids is None else [int(i) for i in ids]

    def tile_body(self) -> list[str]:
        return self.chain_tile()


def generate_units(w: Workload, cand: Candidate) -> list[tuple[str, GroupKernel]]:
    """One self-contained C source per loop group (compiled and cached separately, so that
    candidates differing in one group recompile only that group)."""
    mats = materialized(w, cand.fused_pairs)
    out = []
    chains = detect(w) if any(s.chain_block for s in cand.schedules) else {}
    for k, g in enumerate(groups(w, cand.fused_pairs)):
        sched = cand.schedule(g.anchor)
        if sched.impl != IMPL_LOOP:
            continue
        if sched.chain_block:
            em = _ChainEmitter(w, cand, g, mats)
            em.setup_chain(chains[g.anchor], sched.chain_block, row_steps=True)
        else:
            em = _Emitter(w, cand, g, mats)
        src, kern = em.emit(k)
        out.append((PRELUDE + "\n" + src + "\n", kern))
    return out


def generate(w: Workload, cand: Candidate) -> tuple[str, list[GroupKernel]]:
    """C source for every loop group of ``cand`` and the argument lists of its functions."""
    units = generate_units(w, cand)
    body = "\n\n".join(src.removeprefix(PRELUDE) for src, _ in units)
    return PRELUDE + body, [k for _, k in units]
