"""The syntax of ``where(COND, A, B)``: its parse-tree nodes, the parser of its condition, the
lowering of the condition to the IR and the check that it names only the statement's indices.

COND compares two index expressions with ``<``, ``<=``, ``>``, ``>=``, ``==`` or ``!=``; an index
expression is an index name, an integer, or a sum or difference of those (``i``, ``j + 1``,
``i - 2``).  Everything else in a condition (a tensor access, a call, a float, ``*``, a second
comparison) is one located error.  The parser functions take the statement parser
(``search_spaces.lang``) positioned at the ``where`` token and advance it.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .conditions import COMPARISONS, Condition, index_expr
from .errors import Located

SYNTAX = "where(COND, A, B)"
MAX_INTEGER = (1 << 31) - 1      # integers in a condition, like extents


@dataclass(frozen=True)
class PIndexTerm:
    """One term of an index expression: an index name or a non-negative integer, signed."""
    sign: int                 # +1 or -1
    value: str | int
    col: int


@dataclass(frozen=True)
class PCondition:
    op: str
    lhs: tuple[PIndexTerm, ...]
    rhs: tuple[PIndexTerm, ...]


@dataclass(frozen=True)
class PWhere:
    """``where(COND, A, B)`` as parsed, with the column of ``where``."""
    cond: PCondition
    a: object                 # PExpr
    b: object
    col: int


def parse_where(p) -> PWhere:
    """``where(COND, A, B)``; ``p.cur`` is the ``where`` name, followed by ``(``."""
    tok = p.cur
    p.i += 2
    p.nest()
    cond = _condition(p)
    if p.cur.text not in (",", ")"):
        raise p.err(f"expected ',' after the condition of where(), found {p.describe(p.cur)}")
    args = []
    while p.cur.text == ",":
        p.i += 1
        args.append(p.expr())
    p.expect(")")
    if len(args) != 2:
        raise p.err(f"where() takes 3 arguments ({SYNTAX}: a condition, the value where it "
                    f"holds, the value where it does not), got {1 + len(args)}", tok)
    p.depth -= 1
    return PWhere(cond, args[0], args[1], tok.col)


def _condition(p) -> PCondition:
    lhs = _index_sum(p)
    if p.cur.text not in COMPARISONS:
        raise p.err(f"the condition of where() must compare two index expressions with one of "
                    f"{' '.join(COMPARISONS)}; found {p.describe(p.cur)}")
    op = p.cur.text
    p.count_operator()
    rhs = _index_sum(p)
    if p.cur.text in COMPARISONS:
        raise p.err("a where() condition is one comparison; chained comparisons are not "
                    "supported")
    return PCondition(op, lhs, rhs)


def _index_sum(p) -> tuple[PIndexTerm, ...]:
    """Index names and integers joined by '+' and '-'."""
    terms = [_index_term(p, 1)]
    while p.cur.text in ("+", "-") and p.cur.kind == "op":
        sign = 1 if p.cur.text == "+" else -1
        p.count_operator()
        terms.append(_index_term(p, sign))
    if p.cur.text in ("*", "/", "**"):
        raise p.err(f"only '+' and '-' combine indices in a where() condition, found "
                    f"{p.cur.text!r}")
    return tuple(terms)


def _index_term(p, sign: int) -> PIndexTerm:
    tok = p.cur
    if tok.kind == "num":
        if not re.fullmatch(r"\d+", tok.text):
            raise p.err(f"a where() condition compares integer index expressions; {tok.text} "
                        f"is not an integer")
        if int(tok.text) > MAX_INTEGER:
            raise p.err(f"integer {tok.text} in a where() condition is out of range "
                        f"(at most 2^31 - 1)")
        p.i += 1
        return PIndexTerm(sign, int(tok.text), tok.col)
    if tok.kind == "name":
        nxt = p.toks[p.i + 1].text
        if nxt in ("[", "("):
            what = f"tensor access {tok.text}[...]" if nxt == "[" else f"call {tok.text}(...)"
            raise p.err(f"a where() condition compares indices only; the {what} cannot "
                        f"appear in it")
        p.i += 1
        return PIndexTerm(sign, tok.text, tok.col)
    raise p.err(f"expected an index name or an integer in the where() condition, found "
                f"{p.describe(tok)}")


def lower_condition(c: PCondition) -> Condition:
    """The IR condition (index names as written; the loader renames them)."""
    def side(terms):
        offset = sum(t.sign * t.value for t in terms if isinstance(t.value, int))
        return index_expr([(t.value, t.sign) for t in terms if isinstance(t.value, str)], offset)
    return Condition(c.op, side(c.lhs), side(c.rhs))


def check_indices(w: PWhere, indices: list[str], dims: dict[str, int], loc: Located,
                  line: int) -> None:
    """Every name in the condition of ``w`` is one of the statement's ``indices`` (those its
    accesses bind, whose extents are known)."""
    for t in w.cond.lhs + w.cond.rhs:
        if isinstance(t.value, int) or t.value in indices:
            continue
        hint = (f"; {t.value!r} is a dim: a condition compares indices and integers"
                if t.value in dims else "")
        raise loc.error(f"unknown index {t.value!r} in the where() condition (this statement's "
                        f"indices: {', '.join(indices) or 'none'}){hint}", line, t.col)
