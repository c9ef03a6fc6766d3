"""Transcendental subexpressions that do not vary along a loop group's innermost loop, computed
once before it instead of once per element.

Why: GCC does not move them out itself.  se_block's ``y[b,c,p] = x[b,c,p] * sigmoid(u[b,c])``
with p innermost evaluated the sigmoid (an inlined exp, AT_EXPf) for each of its 2 M elements:
the group ran 712-773 us on 2 cores against 381-435 us with the sigmoid computed once per row
(the generated function and the same with the one value hoisted by hand, best of 40 calls
each; the 2-core AMD EPYC, AVX2, GCC 12, the backend's flags), where XLA ran the whole block
in 449 us (bench/results/epyc-avx2-3462ffb).  Only subexpressions with a transcendental call
are moved: cheap arithmetic costs less than the register it would hold.  Every loop the CPU
emitter writes takes them: assignments, sums and maxima over an outer or the innermost index,
private rows (a layer norm's rsqrt of its row's variance, once a row); costmodel.model prices
them once per pass of the innermost loop.
"""
from __future__ import annotations

from typing import Callable

from search_spaces.ir import TRANSCENDENTAL, Access, Call, Const, Expr, children, index_names


def _costly(e: Expr, inlined: Callable[[str], Expr | None]) -> bool:
    if isinstance(e, Call) and e.fn in TRANSCENDENTAL:
        return True
    if isinstance(e, Access):
        body = inlined(e.tensor)
        return body is not None and _costly(body, inlined)
    return any(_costly(c, inlined) for c in children(e))


def invariant_calls(e: Expr, inner: str, inlined: Callable[[str], Expr | None]
                    ) -> list[Expr]:
    """The largest subexpressions of ``e`` that read nothing indexed by ``inner`` and evaluate
    a transcendental function (through ``inlined(tensor)``, the expression an inlined
    tensor's reads evaluate, None for a stored one), each once, in the order met."""
    if isinstance(e, Const):
        return []
    if inner not in index_names(e) and _costly(e, inlined):
        return [e]
    out: list[Expr] = []
    for c in children(e):
        out += [s for s in invariant_calls(c, inner, inlined) if s not in out]
    return out


def hoisted(em, e: Expr, var: dict[str, str], inner: str) -> tuple[str, str]:
    """(declarations of the invariant values, ``e`` rendered reading them) for emitter
    ``em`` (autotune.backends.cpu.codegen), whose ``expr`` substitutes the names while
    ``em.hoist_names`` holds them for ``var``."""
    subs = invariant_calls(e, inner, lambda t: em.w.op(t).expr if t in em.inlined else None)
    names = {s: f"_h{k}" for k, s in enumerate(subs)}
    decls = "".join(f"const {em.ctype} {names[s]} = {em.expr(s, var)}; " for s in subs)
    em.hoist_names = (var, names)
    try:
        return decls, em.expr(e, var)
    finally:
        em.hoist_names = None
