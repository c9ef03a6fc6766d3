"""A reduction's private rows: partial sums (maxima) kept lane by lane across its outer
reduction loops and reduced once (a mixin of the CPU loop emitter, autotune.backends.cpu.codegen).
"""
from __future__ import annotations

import math

# A reduction's private rows (PrivateRows.private_width): each a whole number of cache lines of
# float32, and all of a tile's together at most this many elements (64 KiB of float32, inside
# a core's second-level cache).
PRIVATE_ALIGN = 16
PRIVATE_ELEMS = 16384


def lane_reduction(combiner: str) -> tuple[str, str]:
    """(the statement folding ``_v`` into ``acc``, the OpenMP reduction operator) of a sum or
    max reduction."""
    if combiner == "sum":
        return "acc += _v;", "+"
    return "acc = _v > acc ? _v : acc;", "max"


class PrivateRows:
    """The loop emitter's private-row reductions (needs its ``w``, ``buf_shape``, ``_nest``,
    ``tile_offset``, ``loop_head``, ``n`` and ``ctype``)."""

    def private_width(self, mp) -> int:
        """Elements of each output element's private row where ``mp``'s reduction keeps its
        partial sums (maxima) lane by lane across its outer reduction loops (0: it does not).

        Why: a reduction whose innermost loop walks a reduction index inside other reduction
        loops reduced across the vector's lanes after every pass of that loop.  outer4's z[i,k]
        max= a[i,j] * b[k,l] + c[j,l] (96 x 80 outputs, j 40, l 56) did 307,200 such
        reductions of 56-long rows a call: 1.74 ms; with a row of 56 partial maxima per output,
        updated element by element and reduced once, 0.36 ms (2 cores, AVX-512, GCC 12)."""
        op = self.w.op(mp.op)
        order = list(mp.order)
        if op.combiner not in ("sum", "max") or order[-1] not in op.reduction:
            return 0
        if not any(i in op.reduction for i in order[:-1]):
            return 0
        width = -(-op.extent(order[-1]) // PRIVATE_ALIGN) * PRIVATE_ALIGN
        return width if math.prod(self.buf_shape(mp.op)) * width <= PRIVATE_ELEMS else 0

    def _private_reduction(self, mp, op, rng, var, body_expr: str, target: str, off: str,
                           decls: str = ""):
        """:meth:`private_width`'s rows: set, updated element by element in the member's loop
        order (the innermost now a plain vector loop, after ``decls``: cpu.hoist), then each
        reduced into its output."""
        inner, width = mp.order[-1], self.private_width(mp)
        row = self.tile_offset(mp.op, op.parallel, var)
        p = f"P_{mp.op}[({row}) * {self.n(width)} + {var[inner]}]"
        init = "0" if op.combiner == "sum" else "-INFINITY"
        self._nest(list(op.parallel) + [inner], rng, var, f"{p} = {init};", simd=True)
        ct = self.ctype
        upd = (f"{p} += {body_expr};" if op.combiner == "sum" else
               f"{{ {ct} _v = {body_expr}, _o = {p}; {p} = _v > _o ? _v : _o; }}")
        self._nest(list(mp.order), rng, var, upd, simd=True, decls=decls)
        comb, red = lane_reduction(op.combiner)
        fin = (f"{{ {ct} acc = {init};\n"
               f"      #pragma omp simd reduction({red}:acc)\n"
               f"      {self.loop_head(var[inner], *rng[inner])} {{ {ct} _v = {p}; {comb} }}\n"
               f"      {target}[{off}] = acc; }}")
        self._nest(list(op.parallel), rng, var, fin, simd=False)
