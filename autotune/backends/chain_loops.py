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
from search_spaces.chain_mask import masks_of
from search_spaces.chain_walk import (row_step, step_group, vector_score, vector_update,
                                     walk_innermost)
from search_spaces.ir import Access

from .chain_masks import ChainMasks
from .chain_vectors import ChainVectors


class ChainLoops(ChainVectors, ChainMasks):
    """Prints one chain group; call :meth:`setup_chain` after the emitter's ``__init__``.

    A language sets ``neg_inf`` (its -infinity), ``simd`` (the pragma that vectorises a loop,
    or "") and ``simd_sum`` (the same for a ``+`` reduction into ``_a``), and may override
    :meth:`rows_open` (how a tile's rows are dealt out: a loop, or a thread each)."""
    neg_inf = "-INFINITY"
    # a score's product over its own index in explicit vector registers (a language with
    # GCC's vector extensions and the prelude's AT_VEC types sets it)
    vector_walk = False
    simd = "#pragma omp simd"
    simd_sum = "#pragma omp simd reduction(+:_a)"
    simd_max = "#pragma omp simd reduction(max:bm)"

    vector_bytes = 64       # the widest vectors the code's machine runs (row_step)

    def setup_chain(self, chain: Chain, block: int, row_steps: bool = False) -> None:
        """``row_steps``: advance several rows at once where the chain shares a row dim
        (search_spaces.chain_walk.row_step); else one row at a time."""
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
        self.rdim, self.R = row_step(self.w, chain, {c: self.eff[k] for k, c in
                                                     enumerate(self.adims)},
                                     self.acc_size, self.vector_bytes) if row_steps else ("", 1)
        self.G = 1          # steps of a group, each block walked for all of them in turn
        if self.R > 1:      # the stepped rows innermost: a block's operands serve them all
            self.rows = [c for c in self.rows if c != self.rdim] + [self.rdim]
            self.G = step_group(self.R, self.acc_size,
                                self.eff[self.adims.index(self.rdim)],
                                4 if self.w.dtype == "float32" else 8)

    # ---- pieces ------------------------------------------------------------------------------
    def cvars(self, op: str) -> dict[str, str]:
        return {i: f"c_{c}" for i, c in self.chain.common(op).items()}

    def expr(self, e, var):
        # chain tensors are block buffers or running values, not memory
        if isinstance(e, Access) and e.tensor in self.subst:
            return self.subst[e.tensor]
        return super().expr(e, var)

    def chain_buffers(self) -> list[tuple[str, int]]:
        B, R = self.block, self.R
        # XB (the scores a softmax step takes its max over) only where there is a max
        return [(f"S_{t}", B * R) for t in self.chain.scores] + [("XB", B * R)] * \
            self.chain.softmax + [("PB", B * R), ("ACC", max(self.acc_size, 1) * R * self.G)]

    # ---- one row, or one of a step's rows (``rr``) ---------------------------------------------
    def slot(self, buf: str) -> str:
        """The walked point's element of a block buffer, in this row's part."""
        lead = f"rr*{self.n(self.block)} + " if self.R > 1 else ""
        return f"{buf}[{lead}c_{WALKED} - jb]"

    def acc(self) -> str:
        """The accumulator of the current free point, in this row's part."""
        lead = f"{self.srow('rr')}*{self.n(max(self.acc_size, 1))} + " if self.R > 1 else ""
        return f"ACC[{lead}{self.dpos()}]"

    def run(self, name: str) -> str:
        """A running value (``m_run``, ``l_run``) of this row."""
        return f"{name}[{self.srow('rr')}]" if self.R > 1 else name

    def srow(self, rr: str) -> str:
        """The group's row ``rr`` of the current step: where its running values are."""
        return f"(_st*{self.R} + {rr})" if self.R > 1 else rr

    def steps(self, ind: str, make) -> list[str]:
        """``make(indent)``'s lines once per step of the group (``c_<row>_0`` set), the steps
        past the tile's end left out; as they are for one row at a time.  A step whose rows
        are all inside the tile runs code whose rows are ``c_<row>_0 + rr``: with the last
        row clamped (:meth:`per_row`) the rows' addresses are not affine in ``rr``, and GCC kept
        attention's score sums on the stack, 8 row pointers spilled (its chain 0.55 -> 0.49
        ms, 2-core AVX-512 host); where a step may cross the tile's end the clamped code runs
        for that step only."""
        if self.R == 1:
            return make(ind)
        I, c, R = self.itype, f"c_{self.rdim}", self.R
        hi = self.cbounds[self.rdim][1]
        out = [f"{ind}for ({I} _st = 0; _st < {self.G}; _st++) {{",
               f"{ind}  const {I} {c}_0 = {c}_g + _st*{R}; if ({c}_0 >= {hi}) break;"]
        k = self.adims.index(self.rdim)
        tile, extent = self.eff[k], self.anchor.out_shape[k]
        if tile % R == 0 and extent % tile % R == 0:      # every step whole
            return out + self._rows(make, ind + "  ", True) + [f"{ind}}}"]
        return (out + [f"{ind}  if ({c}_0 + {R} <= {hi}) {{"]
                + self._rows(make, ind + "    ", True) + [f"{ind}  }} else {{"]
                + self._rows(make, ind + "    ", False) + [f"{ind}  }}", f"{ind}}}"])

    rows_whole = False      # while printing a step whose rows are all inside the tile

    def _rows(self, make, ind: str, whole: bool) -> list[str]:
        self.rows_whole = whole
        try:
            return make(ind)
        finally:
            self.rows_whole = False

    def per_row(self, ind: str, make) -> list[str]:
        """``make(indent)``'s lines once per row of the step, ``c_<row>`` set (the step's rows
        past the tile's end repeat its last row: same values, same writes); as they are for
        one row."""
        if self.R == 1:
            return make(ind)
        I, c = self.itype, f"c_{self.rdim}"
        hi = self.cbounds[self.rdim][1]
        row = f"{c}_0 + rr" if self.rows_whole else f"{c}_0 + rr < {hi} ? {c}_0 + rr : {hi} - 1"
        return ([f"{ind}for ({I} rr = 0; rr < {self.R}; rr++) {{",
                 f"{ind}  const {I} {c} = {row};"]
                + make(ind + "  ") + [f"{ind}}}"])

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

    def block_end(self) -> str:
        """``je``, the block's end: a constant offset where blocks divide the walk, so that the
        compiler knows the block loops' trip count (and keeps a step's scores in registers)."""
        I, J, B = self.itype, self.n(self.chain.extent), self.n(self.block)
        if self.chain.extent % self.block == 0:
            return f"const {I} je = jb + {B};"
        return f"const {I} je = jb + {B} < {J} ? jb + {B} : {J};"

    def jrange(self) -> tuple[str, str]:
        """The block's range its loops run: all of it, or (masked) what the skip check left
        after trimming the covered chunks off its ends (ChainMasks.skip_check)."""
        return ("ja", "jz") if self.masks else ("jb", "je")

    def jloop(self, ind: str, body: str, pragma: str = "") -> list[str]:
        head = [f"{ind}{pragma}"] if pragma else []
        lo, hi = self.jrange()
        return head + [f"{ind}for ({self.itype} c_{WALKED} = {lo}; c_{WALKED} < {hi}; "
                       f"{self.step('c_' + WALKED)}) {{ {body} }}"]

    def walk_innermost(self, name: str, common: str) -> bool:
        return walk_innermost(self.w, self.chain, name, common, self.layout_of)

    def score(self, t: str, ind: str) -> list[str]:
        op, var, T = self.w.op(t), self.cvars(t), self.ctype
        body = self.expr(op.expr, var)
        slot = self.slot(f"S_{t}")
        if op.combiner == "none":
            return [f"{ind}/* {op.text()} */"] + self.per_row(
                ind, lambda i: self.jloop(i, f"{slot} = {body};"))
        red = list(op.reduction)
        rng = {r: ("0", self.n(op.extent(r))) for r in red}
        if self.walk_innermost(t, self.chain.common(t)[red[-1]]):
            if self.vector_walk and vector_score(self.w, self.chain, t, self.block,
                                                 self.layout_of):
                return [f"{ind}/* {op.text()} */"] + self.vector_score(t, red, rng, var, ind)
            # the block's scores accumulate over the reduction, the walk vectorised inside
            # (a step's rows inside the reduction: each load of the walked operand feeds all)
            deep = ind + "  " * len(red)
            walk = "\n".join(self.per_row(deep, lambda i: self.jloop(
                i, f"{slot} += {body};", self.simd)))
            return ([f"{ind}/* {op.text()} */"]
                    + self.per_row(ind, lambda i: self.jloop(i, f"{slot} = 0;", self.simd))
                    + self.nest(red, rng, var, ind, "\n" + walk.lstrip()))
        inner = self.nest(red, rng, var, "", f"_a += {body};",
                          self.simd_sum if len(red) == 1 and self.simd_sum else None)
        return [f"{ind}/* {op.text()} */"] + self.per_row(ind, lambda i: self.jloop(
            i, f"{T} _a = 0;\n" + "\n".join(i + "    " + x for x in inner)
            + f"\n{i}    {slot} = _a;"))

    # ---- the tile ----------------------------------------------------------------------------
    def rows_open(self, ind: str) -> tuple[list[str], str]:
        """Opens a loop over the tile's rows (``c_r<k>`` set; the stepped row's first as
        ``c_<row>_0``); the lines and the new indent."""
        out = []
        for c in self.rows:
            if c == self.rdim and self.R > 1:
                lo, hi = self.cbounds[c]
                out.append(f"{ind}for ({self.itype} c_{c}_g = {lo}; c_{c}_g < {hi}; "
                           f"c_{c}_g += {self.R * self.G}) {{")
            else:
                out.append(f"{ind}{self.loop_head('c_' + c, *self.cbounds[c])} {{")
            ind += "  "
        if self.R > 1 and self.chain.softmax:
            T = self.ctype
            out.append(f"{ind}{T} m_run[{self.R * self.G}], l_run[{self.R * self.G}];")
        return out, ind

    def rows_close(self, ind: str) -> list[str]:
        out = []
        for _ in self.rows:
            ind = ind[:-2]
            out.append(f"{ind}}}")
        return out

    def softmax_step(self, ind: str) -> list[str]:
        """One row's part of a block: its max, the rescale of its sum and accumulators, its
        exponentials and their sum."""
        ch, T, w = self.chain, self.ctype, self.w
        exp = lambda x: self.functions["exp"].format(x, s=self.suf)
        m_run, l_run = self.run("m_run"), self.run("l_run")
        self.subst = {s: self.slot(f"S_{s}") for s in ch.scores}
        x = self.expr(w.op(ch.max_op).expr, self.cvars(ch.max_op))
        xb, pb = self.slot("XB"), self.slot("PB")
        out = [f"{ind}{T} bm = {self.neg_inf};"]
        out += self.jloop(ind, f"{T} _x = {x}; {xb} = _x; bm = _x > bm ? _x : bm;",
                          self.simd_max)
        out.append(f"{ind}const {T} m_new = {m_run} > bm ? {m_run} : bm;")
        # the first block has nothing to rescale (and exp(-inf - -inf) would be NaN); a row of
        # a step that has seen only masked scores keeps -inf and sums exp(-inf) = 0
        out.append(f"{ind}const {T} sc = {m_run} == {self.neg_inf} ? ({T})0 : "
                   f"{exp(f'{m_run} - m_new')};")
        m_use = "m_new"
        if self.R > 1 and self.masks:
            out.append(f"{ind}const {T} m_use = m_new == {self.neg_inf} ? ({T})0 : m_new;")
            m_use = "m_use"
        out.append(f"{ind}{l_run} *= sc;")
        if ch.contraction:
            out += self.dnest(f"{self.acc()} *= sc;", ind)
        out += self.jloop(ind, f"{pb} = {exp(f'{xb} - {m_use}')};", self.simd)
        self.subst = {ch.exp_op: pb}
        lsum = self.expr(w.op(ch.sum_op).expr, self.cvars(ch.sum_op))
        out.append(f"{ind}{{ {T} _a = 0;")
        out += self.jloop(ind, f"_a += {lsum};", self.simd_sum)
        out.append(f"{ind}{l_run} += _a; }}")
        out.append(f"{ind}{m_run} = m_new;")
        return out

    def weights_step(self, ind: str) -> list[str]:
        """A plain chain's block of weights for one row (no max, no rescale)."""
        op = self.w.op(self.chain.exp_op)
        self.subst = {s: self.slot(f"S_{s}") for s in self.chain.scores}
        body = self.expr(op.expr, self.cvars(op.out))
        return self.jloop(ind, f"{self.slot('PB')} = {body};", self.simd)

    def contraction_step(self, ind: str) -> list[str]:
        """The block's update of the accumulators (a step's rows inside the walk: each load of
        the walked operand feeds all of them)."""
        ch, T, w = self.chain, self.ctype, self.w
        self.subst = {ch.exp_op: self.slot("PB")}
        if ch.norm_op:
            self.subst[ch.norm_op] = self.slot("PB")   # p / l: divided by the final l below
        inner, _ = ch.contraction_parts(w.op(ch.contraction))
        var = self.cvars(ch.contraction)
        o = self.expr(inner, var)
        if self.vector_walk and len(self.free) == 1 and vector_update(
                w, ch, [self.free[0][1]], self.acc_size,
                self.anchor.out_shape[self.free[0][0]], self.layout_of):
            return self.vector_update(inner, var, ind)
        if self.free and self.walk_innermost(ch.contraction, self.free[-1][1]):
            # each accumulator a dot product over the block, the walk vectorised
            def dots(i):
                walk = "\n".join(self.jloop(i + "  ", f"_a += {o};", self.simd_sum))
                return self.dnest(f"{{ {T} _a = {self.acc()};\n{walk}\n{i}  "
                                  f"{self.acc()} = _a; }}", i, simd=False)
            return self.per_row(ind, dots)
        inner = self.per_row(ind + "    ",
                             lambda i: self.dnest(f"{self.acc()} += {o};", i))
        return self.jloop(ind, "\n" + "\n".join(inner) + "\n" + ind)

    def chain_tile(self, ind: str = "    ") -> list[str]:
        ch, T = self.chain, self.ctype
        J, B = self.n(ch.extent), self.n(self.block)
        out = [f"{ind}/* {ch.text()}, blocks of {self.block}"
               + (f", {self.R} rows at once */" if self.R > 1 else " */")]
        rows, ind = self.rows_open(ind)
        out += rows
        if self.R == 1 and ch.softmax:
            out.append(f"{ind}{T} m_run = {self.neg_inf}, l_run = 0;")
        out += self.steps(ind, lambda i0: self.per_row(i0, lambda i: (
            [f"{i}{self.run('m_run')} = {self.neg_inf}; {self.run('l_run')} = 0;"]
            if self.R > 1 and ch.softmax else [])
            + (self.dnest(f"{self.acc()} = 0;", i) if ch.contraction else [])))
        if self.masks:
            head, ind = self.masked_walk(ind)
            out += head
        else:
            out.append(f"{ind}for ({self.itype} jb = 0; jb < {J}; jb += {B}) {{")
            ind += "  "
            out.append(f"{ind}{self.block_end()}")
        out += self.steps(ind, self.block_step)
        ind = ind[:-2]
        out.append(f"{ind}}}")
        out += self.steps(ind, lambda i: self.per_row(i, self.finals))
        return out + self.rows_close(ind)

    def block_step(self, ind: str) -> list[str]:
        """One block of the walk for one row, or for the rows of a step."""
        ch = self.chain
        out = self.skip_check(ind) if self.masks else []
        for t in ch.scores:
            self.subst = {s: self.slot(f"S_{s}") for s in ch.scores}
            out += self.score(t, ind)
        out += self.per_row(ind, self.softmax_step if ch.softmax else self.weights_step)
        if ch.contraction:
            out += self.contraction_step(ind)
        return out

    def finals(self, ind: str) -> list[str]:
        """The division by the final sum and every write of the group (one row)."""
        ch, out = self.chain, []
        acc, m_run, l_run = self.acc(), self.run("m_run"), self.run("l_run")
        if ch.contraction and ch.norm_op and any(
                a.tensor == ch.norm_op for a in self.w.op(ch.contraction).reads()):
            out += self.dnest(f"{acc} /= {l_run};", ind)
        outer = ch.contraction_parts(self.w.op(ch.contraction))[1] if ch.contraction else None
        if outer is not None:
            # the factors constant over the walk (``/ l``), on the final max and sum
            self.subst = {ch.max_op: m_run, ch.sum_op: l_run}
            out += self.dnest(f"{acc} *= {self.expr(outer, self.cvars(ch.contraction))};", ind)
        # the max and sum are the same in every tile of the free dims: one of them writes
        once = " && ".join(f"b{k} == 0" for k, _ in self.free) or "1"
        for t, val in ((ch.max_op, m_run), (ch.sum_op, l_run)) if ch.softmax else ():
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
            self.subst = {ch.max_op: m_run, ch.sum_op: l_run}
            if ch.contraction:
                self.subst[ch.contraction] = acc
            var = self.cvars(ch.epilogue)
            off = self.global_offset(ch.epilogue, op.parallel, var)
            out += self.dnest(f"G_{ch.epilogue}[{off}] = {self.expr(op.expr, var)};", ind)
        return out
