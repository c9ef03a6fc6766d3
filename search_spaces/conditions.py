"""Index conditions: the first argument of ``where(COND, A, B)``.

A condition compares two integer expressions of the op's indices (``j <= i``, ``i - 2 < j + 1``);
it reads no tensor, so it depends on the iteration point only.  :meth:`Condition.over` evaluates
it with any array library: give it each index as an integer array (broadcastable over the axes
the caller uses, at its absolute values) and it returns the boolean array.
:meth:`Condition.on_box` tells whether a condition is constant over a box of index ranges: the
question a schedule that skips masked blocks (a causal mask's upper triangle) asks per block.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Callable

COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "==": operator.eq, "!=": operator.ne}


@dataclass(frozen=True)
class IndexExpr:
    """An integer expression of the op's indices: ``sum(coef * index) + offset``.

    Written ``i``, ``j + 1``, ``i - j - 2`` in a condition; terms keep the order in which their
    index first appears, a repeated index adds to its coefficient and zero coefficients are
    dropped (:func:`index_expr`), so the text is canonical up to that order."""
    terms: tuple[tuple[str, int], ...]      # (index, nonzero coefficient)
    offset: int = 0

    @property
    def indices(self) -> tuple[str, ...]:
        return tuple(i for i, _ in self.terms)

    def text(self) -> str:
        parts: list[str] = []
        for i, c in self.terms:
            mag = i if abs(c) == 1 else f"{abs(c)}*{i}"
            parts.append(("-" if c < 0 else "") + mag if not parts else
                         f"{'-' if c < 0 else '+'} {mag}")
        if self.offset or not parts:
            parts.append(str(self.offset) if not parts else
                         f"{'-' if self.offset < 0 else '+'} {abs(self.offset)}")
        return " ".join(parts)

    def renamed(self, mapping: dict[str, str]) -> "IndexExpr":
        return IndexExpr(tuple((mapping[i], c) for i, c in self.terms), self.offset)

    def substituted(self, fn: Callable[[str], "IndexExpr"]) -> "IndexExpr":
        """Each index ``i`` replaced by the index expression ``fn(i)``."""
        terms, offset = [], self.offset
        for i, c in self.terms:
            y = fn(i)
            terms += [(j, c * k) for j, k in y.terms]
            offset += c * y.offset
        return index_expr(terms, offset)

    def over(self, index: Callable[[str], object]):
        """The value with each index given by ``index(name)`` (an int or an integer array)."""
        value = self.offset
        for i, c in self.terms:
            value = value + (index(i) if c == 1 else c * index(i))
        return value


def index_expr(terms, offset: int = 0) -> IndexExpr:
    """An :class:`IndexExpr` from ``(index, coefficient)`` pairs (a repeated index merged)."""
    coef: dict[str, int] = {}
    for i, c in terms:
        coef[i] = coef.get(i, 0) + c
    return IndexExpr(tuple((i, c) for i, c in coef.items() if c), offset)


@dataclass(frozen=True)
class Condition:
    """``lhs OP rhs`` over index expressions: a condition on the iteration point, never data."""
    op: str            # one of COMPARISONS
    lhs: IndexExpr
    rhs: IndexExpr

    @property
    def indices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.lhs.indices + self.rhs.indices))

    def text(self) -> str:
        return f"{self.lhs.text()} {self.op} {self.rhs.text()}"

    def renamed(self, mapping: dict[str, str]) -> "Condition":
        return Condition(self.op, self.lhs.renamed(mapping), self.rhs.renamed(mapping))

    def substituted(self, fn: Callable[[str], IndexExpr]) -> "Condition":
        return Condition(self.op, self.lhs.substituted(fn), self.rhs.substituted(fn))

    def over(self, index: Callable[[str], object]):
        """The condition with each index given by ``index(name)``: a bool for ints, a boolean
        array (broadcast the usual way) for integer arrays."""
        return _COMPARE[self.op](self.lhs.over(index), self.rhs.over(index))

    def holds(self, point: dict[str, int]) -> bool:
        """The condition at one iteration point (index -> value)."""
        return bool(self.over(point.__getitem__))

    def on_box(self, ranges: dict[str, tuple[int, int]]) -> bool | None:
        """True if the condition holds at every point of the box (index -> inclusive ``(lo,
        hi)``), False if at none, None if it may vary there (conservative for ``==``/``!=``,
        whose solutions need not fill the range)."""
        diff = index_expr(self.lhs.terms + tuple((i, -c) for i, c in self.rhs.terms),
                          self.lhs.offset - self.rhs.offset)
        lo = hi = diff.offset                 # bounds of lhs - rhs over the box
        for i, c in diff.terms:
            a, b = c * ranges[i][0], c * ranges[i][1]
            lo, hi = lo + min(a, b), hi + max(a, b)
        always, never = {"<": (hi < 0, lo >= 0), "<=": (hi <= 0, lo > 0),
                         ">": (lo > 0, hi <= 0), ">=": (lo >= 0, hi < 0),
                         "==": (lo == hi == 0, lo > 0 or hi < 0),
                         "!=": (lo > 0 or hi < 0, lo == hi == 0)}[self.op]
        return True if always else False if never else None
