"""Vector code for a CPU chain group's two products (autotune.backends.chain_loops).

Written as loops over buffers, GCC kept a chain's running sums in memory: a load, a
multiply-add and a store per vector.  These printers hold them in GCC vector registers
(``AT_VEC`` types of the CPU prelude, autotune.backends.cpu.codegen) for a chunk of the block
(the scores) or for the whole block (the accumulators), each vector of the walked operand
loaded once for every row of a step.  Which products qualify is decided in
search_spaces.chain_walk (vector_score, vector_update), where the cost model asks too.
"""
from __future__ import annotations

from search_spaces.chain import WALKED
from search_spaces.ir import Access, index_names
from search_spaces.orders import split_factors


def sum_parts(op, red) -> tuple:
    """A sum's body as (the product of its factors that read a reduced index, the product of
    the others or None): the second is constant over the sum, applied once to its result."""
    if op.combiner != "sum":
        return op.expr, None
    inner, outer = split_factors(op, lambda k, f: not index_names(f) & set(red))
    return (op.expr, None) if inner is None else (inner, outer)


class ChainVectors:
    """Mixin of :class:`~autotune.backends.chain_loops.ChainLoops` for C with GCC's vector
    extensions: its ``expr`` loads a vector where an access runs along ``vloads``."""
    def expr(self, e, var):
        if self.vloads and isinstance(e, Access) and self._along(e, var, self.vloads):
            return f"at_vload{self.suf}(&{super().expr(e, var)})"
        return super().expr(e, var)

    # while printing vector code: the common index (the walk, or a free dim) along which
    # accesses load a vector of consecutive elements
    vloads = ""

    @staticmethod
    def _along(e: Access, var, common: str) -> bool:
        return f"c_{common}" in (var.get(i) for i in e.idx)

    def vector_expr(self, e, var, common: str) -> str:
        """``e`` with every access along ``common`` a vector load."""
        self.vloads = common
        try:
            return self.expr(e, var)
        finally:
            self.vloads = ""

    def vector_score(self, t: str, red, rng, var, ind: str) -> list[str]:
        """A score summed over its own index into vector registers: per chunk of the block
        (one or two vectors of the walk), every row of the step holds its sums in registers
        while the reduction runs innermost, each vector of the walked operand loaded once for
        all rows.  Why: written as loops over buffers, GCC kept the rows' sums in memory (a
        load, a multiply-add and a store per vector): attention's chain ran 0.33 ms against
        0.23 ms with the sums in registers (scratch prototypes, 2-core AVX-512 host).  The
        factors constant over the sum (attention's ``/ sqrt(D)``) scale the chunk's sums once,
        not every product: GCC multiplied each row's broadcast operand (a scalar multiply and
        a register broadcast per row and step of the reduction, where a broadcast load does),
        attention's chain 0.52 -> 0.46 ms."""
        I, V, L = self.itype, f"AT_VEC{self.suf}", f"AT_VL{self.suf}"
        ix = "rr" if self.R > 1 else "0"
        # the block's range, from its start (a masked block's trimmed ends are whole chunks)
        lo, hi = ("0", self.n(self.block)) if not self.masks else ("ja - jb", "jz - jb")
        inner, scale = sum_parts(self.w.op(t), red)
        vbody = self.vector_expr(inner, var, WALKED)
        jj = f"const {I} c_{WALKED} = jb + c_jv + _v * {L};"
        deep = ind + "  " * (len(red) + 1)
        update = [f"{deep}for (int _v = 0; _v < _nv; _v++) {{ {jj}"] + self.per_row(
            deep + "  ", lambda i: [f"{i}_s[{ix}][_v] += {vbody};"]) + [f"{deep}}}"]
        out = [f"{ind}{{ enum {{ _nv = {self.block} >= 2 * {L} ? 2 : 1 }};",
               f"{ind}for ({I} c_jv = {lo}; c_jv < {hi}; c_jv += _nv * {L}) {{",
               f"{ind}  {V} _s[{self.R}][_nv];",
               f"{ind}  for (int _r = 0; _r < {self.R}; _r++) for (int _v = 0; _v < _nv; _v++) "
               f"_s[_r][_v] = ({V}){{0}};"]
        out += self.nest(red, rng, var, ind + "  ", "\n" + "\n".join(update))
        out += [f"{ind}  for (int _v = 0; _v < _nv; _v++) {{ {jj}"]
        k = "" if scale is None else f" * {self.vector_expr(scale, var, WALKED)}"
        out += self.per_row(ind + "    ", lambda i: [
            f"{i}{{ {V} _t = _s[{ix}][_v]{k}; "
            f"__builtin_memcpy(&{self.slot(f'S_{t}')}, &_t, sizeof(_t)); }}"])
        return out + [f"{ind}  }}", f"{ind}}} }}"]

    def vector_update(self, inner, var, ind: str) -> list[str]:
        """The accumulators' update with a step's accumulators in vector registers over the
        block (loaded from ``ACC`` before it, stored after): written as loops over ``ACC``,
        GCC loaded and stored them around every multiply-add (attention's chain 0.36 ms
        against 0.28 ms, scratch prototypes, 2-core AVX-512 host)."""
        I, V, L = self.itype, f"AT_VEC{self.suf}", f"AT_VL{self.suf}"
        x = self.free[0][1]
        lo = self.cbounds[x][0]
        A, R, ix = self.n(self.acc_size), self.R, "rr" if self.R > 1 else "0"
        o = self.vector_expr(inner, var, x)
        size = "sizeof(_o[0][0])"
        out = [f"{ind}{{ enum {{ _nx = {self.acc_size} / {L} }};",
               f"{ind}{V} _o[{R}][_nx];",
               f"{ind}for (int _r = 0; _r < {R}; _r++) for (int _x = 0; _x < _nx; _x++) "
               f"__builtin_memcpy(&_o[_r][_x], &ACC[{self.srow('_r')}*{A} + _x*{L}], {size});"]
        upd = [f"{ind}  for (int _x = 0; _x < _nx; _x++) {{ const {I} c_{x} = {lo} + _x * {L};"]
        upd += self.per_row(ind + "    ", lambda i: [f"{i}_o[{ix}][_x] += {o};"])
        upd += [f"{ind}  }}"]
        out += self.jloop(ind, "\n" + "\n".join(upd) + "\n" + ind)
        out.append(f"{ind}for (int _r = 0; _r < {R}; _r++) for (int _x = 0; _x < _nx; _x++) "
                   f"__builtin_memcpy(&ACC[{self.srow('_r')}*{A} + _x*{L}], &_o[_r][_x], {size});")
        return out + [f"{ind}}}"]
