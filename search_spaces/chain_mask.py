"""Blocks of a chain's walk that a where() mask makes worthless, and may be skipped.

A chain's scores ``X`` (search_spaces.chain), with its elementwise score ops inlined, may be
``where(COND, A, c)`` (or ``where(COND, c, A)``) with a constant ``c`` so negative that
``exp(c - m)`` is exactly 0 once the running max ``m`` exceeds ``c`` by SKIP_MARGIN: a causal
mask's ``-1e9`` (or ``-inf``).  A block of the walked index over which COND never selects ``A``
(Condition.on_box, for one row) then adds nothing to any sum and leaves the max unchanged, so a
walk that has already seen such a margin may skip it: the result is the same to the bit.
``A`` may be such a where() again (a band: two conditions); a block any one of them covers is
skipped.  The
margin keeps this exact, not approximate: ``exp(-800)`` underflows to 0 in float64 and float32.
"""
from __future__ import annotations

from dataclasses import dataclass

from .chain import WALKED, Chain
from .conditions import Condition, IndexExpr, index_expr
from .ir import Access, Const, Select, Unary, rename
from .workload import Workload

SKIP_MARGIN = 800.0     # exp(-x) == 0.0 exactly in float64 (and float32) beyond about 745
MASK_BELOW = -1.0e4     # a branch constant this low is a mask, not a value
# the chunk of a block that a walk trims off its ends where a mask covers it: the CPU scores'
# chunk of the walk (two vectors of 16 floats, autotune.backends.chain_vectors), so that a
# trimmed block's chunks stay whole
TRIM_CHUNK = 32


@dataclass(frozen=True)
class Mask:
    """The scores equal ``value`` wherever ``cond`` (in the chain's common index names) is
    ``masked_when``."""
    cond: Condition
    value: float
    masked_when: bool

    @property
    def diff(self) -> IndexExpr:
        """``lhs - rhs`` of the condition: linear in the indices."""
        c = self.cond
        return index_expr(c.lhs.terms + tuple((i, -k) for i, k in c.rhs.terms),
                          c.lhs.offset - c.rhs.offset)


def _const(e) -> float | None:
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Unary) and e.op == "neg" and isinstance(e.x, Const):
        return -e.x.value
    return None


def masks_of(w: Workload, chain: Chain) -> tuple[Mask, ...]:
    """The chain's masks, outermost first: its scores are a where() with a mask constant in
    one branch, and the other branch may be one again (a band is ``where(j - i <= W,
    where(i - j <= W, s, -1e9), -1e9)``); empty if there is none."""
    if not chain.softmax:
        return ()                      # nothing skips a block without a running max
    x = rename(w.op(chain.max_op).expr, chain.common(chain.max_op))
    rows = {n for _, names in chain.names for _, n in names if n.startswith("r")} | {WALKED}
    out: list[Mask] = []
    while True:
        # inline elementwise score ops (a masked copy of the scores, sm = where(j <= i, s, -1e9))
        while isinstance(x, Access) and x.tensor in chain.scores \
                and w.op(x.tensor).combiner == "none":
            x = rename(w.op(x.tensor).expr, chain.common(x.tensor))
        if not isinstance(x, Select) or not set(x.cond.indices) <= rows:
            return tuple(out)
        for value, when, other in ((_const(x.b), False, x.a), (_const(x.a), True, x.b)):
            if value is not None and value <= MASK_BELOW:
                out.append(Mask(x.cond, value, when))
                x = other
                break
        else:
            return tuple(out)


def mask_value(masks: tuple[Mask, ...]) -> float:
    """The largest of the masks' constants: a block one of them covers holds scores of the
    masks' constants only (an inner mask's block may hold an outer one's), so the walk may
    skip it once its running max is SKIP_MARGIN above this."""
    return max(m.value for m in masks)


def trim_quantum(block: int) -> int:
    """The chunk a walk in blocks of ``block`` trims covered ends by: TRIM_CHUNK where it
    divides the block into two or more, else the whole block (no trim)."""
    return TRIM_CHUNK if block > TRIM_CHUNK and block % TRIM_CHUNK == 0 else block


def c_never(mask: Mask, var, lo: str, hi: str, n, rows: dict | None = None) -> str:
    """A C-family test that the mask covers the whole block ``[lo, hi]`` of the walked index
    for the current row (``var``: common name -> source variable, ``n``: integer literals), or
    for every row of a box (``rows``: common name -> (first, last) source expressions): the
    condition's difference is linear, so its ends over the box bound it."""
    d = mask.diff
    box = {**(rows or {}), WALKED: (lo, hi)}
    mn, mx = [n(d.offset)], [n(d.offset)]
    for i, k in d.terms:
        a, b = box.get(i, (var(i), var(i)))
        mn.append(f"{n(k)}*{a if k > 0 else b}")
        mx.append(f"{n(k)}*{b if k > 0 else a}")
    mn, mx = "(" + " + ".join(mn[1:] + mn[:1]) + ")", "(" + " + ".join(mx[1:] + mx[:1]) + ")"
    holds = {"<": (f"{mx} < 0", f"{mn} >= 0"), "<=": (f"{mx} <= 0", f"{mn} > 0"),
             ">": (f"{mn} > 0", f"{mx} <= 0"), ">=": (f"{mn} >= 0", f"{mx} < 0"),
             "==": (f"({mn} == 0 && {mx} == 0)", f"({mn} > 0 || {mx} < 0)"),
             "!=": (f"({mn} > 0 || {mx} < 0)", f"({mn} == 0 && {mx} == 0)")}[mask.cond.op]
    # masked everywhere: the condition always equals masked_when over the box
    return holds[0] if mask.masked_when else holds[1]
