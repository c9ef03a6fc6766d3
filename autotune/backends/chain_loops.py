"""The body of an online-softmax chain group (search_spaces.chain), for C-family emitters.

Inside one anchor tile the chain runs row by row: per row it walks the reduced index in blocks,
evaluating the score ops into block buffers (``S_<op>``), then the block's max, the rescale
factor ``exp(m_old - m_new)`` applied to the running sum and the contraction's accumulators
(``ACC``, one per free index point of the tile), the block's exponentials (``PB``), and their
sums.  At the end the accumulators are divided by the sum where the chain normalises (and
multiplied by the contraction's factors that are constant over the walk, ``/ l``), the max,
sum and contraction are written where something outside reads them, and the epilogue writes
the anchor.  The scores and exponentials never leave the block buffers.  Where a
where() mask covers a whole block of a row (search_spaces.chain_mask), the block is skipped.

:class:`ChainLoops` is a mixin over a :class:`autotune.backends.loops.LoopEmitter` language
subclass: it uses that class's literals, functions, loops and global offsets.
"""
from __future__ import annotations

import math

from search_spaces.chain import WALKED, Chain
from search_spaces.chain_mask import SKIP_MARGIN, c_never, mask_value, masks_of
from search_spaces.chain_walk import walk_innermost
from search_spaces.ir import Access


class ChainLoops:
    """Prints one chain group; call :meth:`setup_chain` after the emitter's ``__init__``.

    A language sets ``neg_inf`` (its -infinity), ``simd`` (the pragma that vectorises a loop,
    or "") and ``simd_sum`` (the same for a ``+`` reduction into ``_a``), and may override
    :meth:`rows_open` (how a tile's rows are dealt out: a loop, or a thread each)."""
    neg_inf = "-INFINITY"
    simd = "#pragma omp simd"
    simd_sum = "#pragma omp simd reduction(+:_a)"

    def setup_chain(self, chain: Chain, block: int) -> None:
        self.chain, self.block = chain, block
        self.subst: dict[str, str] = {}
        common = chain.common(self.g.anchor)
        self.adims = [common[i] for i in self.anchor.parallel]     # anchor dim k -> common name
        # a dim held whole gets literal bounds: fixed trip counts let the compiler keep a
        # row's accumulators in registers across the walk
        self.cbounds = {c: (f"b{k}", f"e{k}") if self.ntile[k] > 1 else
                        ("0", self.n(self.anchor.out_shape[k])) for k, c in enumerate(self.adims)}
        self.cbounds[WALKED] = ("jb", "je")
        self.rows = [c for c in self.adims if c.startswith("r")]
        self.free = [(k, c) for k, c in enumerate(self.adims) if c.startswith("x")]
        self.acc_size = math.prod(self.eff[k] for k, _ in self.free)
        self.masks = masks_of(self.w, chain)

    # ---- pieces ------------------------------------------------------------------------------
    def cvars(self, op: str) -> dict[str, str]:
        return {i: f"c_{c}" for i, c in self.chain.common(op).items()}

    def expr(self, e, var):
        # chain tensors are block buffers or running values, not memory
        if isinstance(e, Access) and e.tensor in self.subst:
            return self.subst[e.tensor]
        return super().expr(e, var)

    def chain_buffers(self) -> list[tuple[str, int]]:
        return [(f"S_{t}", self.block) for t in self.chain.scores] + \
            [("XB", self.block), ("PB", self.block), ("ACC", max(self.acc_size, 1))]

    def dpos(self) -> str:
        terms, stride = [], 1
        for k, c in reversed(self.free):
            start = self.cbounds[c][0]
            terms.append(f"(c_{c} - {start})*{self.n(stride)}" if start != "0" else
                         f"c_{c}*{self.n(stride)}")
            stride *= self.eff[k]
        return " + ".join(terms) or "0"

    def dnest(self, body: str, ind: str, simd: bool = True) -> list[str]:
        """``body`` over the tile's free (contraction) points; once when there are none."""
        order = [c for _, c in self.free]
        if not order:
            return [f"{ind}{body}"]
        var = {c: f"c_{c}" for c in order}
        return self.nest(order, {c: self.cbounds[c] for c in order}, var, ind, body,
                         self.simd if simd and self.simd else None)

    def jloop(self, ind: str, body: str, pragma: str = "") -> list[str]:
        head = [f"{ind}{pragma}"] if pragma else []
        return head + [f"{ind}for ({self.itype} c_{WALKED} = jb; c_{WALKED} < je; "
                       f"{self.step('c_' + WALKED)}) {{ {body} }}"]

    def walk_innermost(self, name: str, common: str) -> bool:
        return walk_innermost(self.w, self.chain, name, common, self.layout_of)

    def score(self, t: str, ind: str) -> list[str]:
        op, var, T = self.w.op(t), self.cvars(t), self.ctype
        body = self.expr(op.expr, var)
        slot = f"S_{t}[c_{WALKED} - jb]"
        if op.combiner == "none":
            return [f"{ind}/* {op.text()} */"] + self.jloop(ind, f"{slot} = {body};")
        red = list(op.reduction)
        rng = {r: ("0", self.n(op.extent(r))) for r in red}
        if self.walk_innermost(t, self.chain.common(t)[red[-1]]):
            # the block's scores accumulate over the reduction, the walk vectorised inside
            walk = "\n".join(self.jloop(ind + "  ", f"{slot} += {body};", self.simd))
            return ([f"{ind}/* {op.text()} */"] + self.jloop(ind, f"{slot} = 0;", self.simd)
                    + self.nest(red, rng, var, ind, "\n" + walk))
        inner = self.nest(red, rng, var, "", f"_a += {body};",
                          self.simd_sum if len(red) == 1 and self.simd_sum else None)
        return [f"{ind}/* {op.text()} */"] + self.jloop(
            ind, f"{T} _a = 0;\n" + "\n".join(ind + "    " + x for x in inner)
            + f"\n{ind}    {slot} = _a;")

    # ---- the tile ----------------------------------------------------------------------------
    def rows_open(self, ind: str) -> tuple[list[str], str]:
        """Opens a loop over the tile's rows (``c_r<k>`` set); the lines and the new indent."""
        out = []
        for c in self.rows:
            out.append(f"{ind}{self.loop_head('c_' + c, *self.cbounds[c])} {{")
            ind += "  "
        return out, ind

    def rows_close(self, ind: str) -> list[str]:
        out = []
        for _ in self.rows:
            ind = ind[:-2]
            out.append(f"{ind}}}")
        return out

    def chain_tile(self, ind: str = "    ") -> list[str]:
        ch, T, w = self.chain, self.ctype, self.w
        exp = lambda x: self.functions["exp"].format(x, s=self.suf)
        J, B = self.n(ch.extent), self.n(self.block)
        out = [f"{ind}/* {ch.text()}, blocks of {self.block} */"]
        rows, ind = self.rows_open(ind)
        out += rows
        out.append(f"{ind}{T} m_run = {self.neg_inf}, l_run = 0;")
        if ch.contraction:
            out += self.dnest(f"ACC[{self.dpos()}] = 0;", ind)
        I = self.itype
        if self.masks:
            # a block a mask covers adds exp(c - m) == 0 to every sum once the running max
            # is SKIP_MARGIN above the masks' constants c: skipping it is exact.  The walk
            # starts at the row's first block no mask covers and wraps around, so that the
            # covered blocks before it (a band's, a window's) come after a real max too
            never = " || ".join(c_never(m, lambda c: f"c_{c}", "jb", "(je - 1)", self.n)
                                for m in self.masks)
            nb = self.n(-(-ch.extent // self.block))
            out.append(f"{ind}{I} b0 = 0;")
            out.append(f"{ind}for (; b0 + 1 < {nb}; ++b0) {{ const {I} jb = b0 * {B}; "
                       f"const {I} je = jb + {B} < {J} ? jb + {B} : {J}; "
                       f"if (!({never})) break; }}")
            out.append(f"{ind}for ({I} bk = 0; bk < {nb}; ++bk) {{")
            ind += "  "
            out.append(f"{ind}const {I} jb = ((bk + b0) % {nb}) * {B};")
        else:
            out.append(f"{ind}for ({I} jb = 0; jb < {J}; jb += {B}) {{")
            ind += "  "
        out.append(f"{ind}const {I} je = jb + {B} < {J} ? jb + {B} : {J};")
        if self.masks:
            top = mask_value(self.masks)
            value = self.neg_inf if math.isinf(top) else f"(({T}){top!r})"
            out.append(f"{ind}if (m_run - {value} > (({T}){SKIP_MARGIN!r}) && ({never})) "
                       f"continue;")
        for t in ch.scores:
            self.subst = {s: f"S_{s}[c_{WALKED} - jb]" for s in ch.scores}
            out += self.score(t, ind)
        x = self.expr(w.op(ch.max_op).expr, self.cvars(ch.max_op))
        blk = f"[c_{WALKED} - jb]"
        out.append(f"{ind}{T} bm = {self.neg_inf};")
        out += self.jloop(ind, f"{T} _x = {x}; XB{blk} = _x; bm = _x > bm ? _x : bm;")
        out.append(f"{ind}const {T} m_new = m_run > bm ? m_run : bm;")
        # the first block has nothing to rescale (and exp(-inf - -inf) would be NaN)
        out.append(f"{ind}const {T} sc = m_run == {self.neg_inf} ? ({T})0 : "
                   f"{exp('m_run - m_new')};")
        out.append(f"{ind}l_run *= sc;")
        if ch.contraction:
            out += self.dnest(f"ACC[{self.dpos()}] *= sc;", ind)
        out += self.jloop(ind, f"PB{blk} = {exp(f'XB{blk} - m_new')};", self.simd)
        self.subst = {ch.exp_op: f"PB{blk}"}
        lsum = self.expr(w.op(ch.sum_op).expr, self.cvars(ch.sum_op))
        out.append(f"{ind}{{ {T} _a = 0;")
        out += self.jloop(ind, f"_a += {lsum};", self.simd_sum)
        out.append(f"{ind}l_run += _a; }}")
        if ch.contraction:
            if ch.norm_op:
                self.subst[ch.norm_op] = f"PB{blk}"     # p / l: divided by the final l below
            inner, _ = ch.contraction_parts(w.op(ch.contraction))
            o = self.expr(inner, self.cvars(ch.contraction))
            if self.free and self.walk_innermost(ch.contraction, self.free[-1][1]):
                # each accumulator a dot product over the block, the walk vectorised
                walk = "\n".join(self.jloop(ind + "  ", f"_a += {o};", self.simd_sum))
                out += self.dnest(f"{{ {T} _a = ACC[{self.dpos()}];\n{walk}\n{ind}  "
                                  f"ACC[{self.dpos()}] = _a; }}", ind, simd=False)
            else:
                inner = self.dnest(f"ACC[{self.dpos()}] += {o};", ind + "    ")
                out += self.jloop(ind, "\n" + "\n".join(inner) + "\n" + ind)
        out.append(f"{ind}m_run = m_new;")
        ind = ind[:-2]
        out.append(f"{ind}}}")
        out += self.finals(ind)
        return out + self.rows_close(ind)

    def finals(self, ind: str) -> list[str]:
        """The division by the final sum and every write of the group."""
        ch, out = self.chain, []
        acc = f"ACC[{self.dpos()}]"
        if ch.contraction and ch.norm_op and any(
                a.tensor == ch.norm_op for a in self.w.op(ch.contraction).reads()):
            out += self.dnest(f"{acc} /= l_run;", ind)
        outer = ch.contraction_parts(self.w.op(ch.contraction))[1] if ch.contraction else None
        if outer is not None:
            # the factors constant over the walk (``/ l``), on the final max and sum
            self.subst = {ch.max_op: "m_run", ch.sum_op: "l_run"}
            out += self.dnest(f"{acc} *= {self.expr(outer, self.cvars(ch.contraction))};", ind)
        # the max and sum are the same in every tile of the free dims: one of them writes
        once = " && ".join(f"b{k} == 0" for k, _ in self.free) or "1"
        for t, val in ((ch.max_op, "m_run"), (ch.sum_op, "l_run")):
            if t in self.mats or t == self.g.anchor:
                op = self.w.op(t)
                off = self.global_offset(t, op.parallel, self.cvars(t))
                out.append(f"{ind}if ({once}) G_{t}[{off}] = {val};")
        if ch.contraction and (ch.contraction in self.mats or ch.contraction == self.g.anchor):
            op = self.w.op(ch.contraction)
            off = self.global_offset(ch.contraction, op.parallel, self.cvars(ch.contraction))
            out += self.dnest(f"G_{ch.contraction}[{off}] = {acc};", ind)
        if ch.epilogue:
            op = self.w.op(ch.epilogue)
            self.subst = {ch.max_op: "m_run", ch.sum_op: "l_run"}
            if ch.contraction:
                self.subst[ch.contraction] = acc
            var = self.cvars(ch.epilogue)
            off = self.global_offset(ch.epilogue, op.parallel, var)
            out += self.dnest(f"G_{ch.epilogue}[{off}] = {self.expr(op.expr, var)};", ind)
        return out
