"""Index arithmetic in a generic's body: ``linalg.index``, integer adds and subtracts of it,
``arith.cmpi`` of two such values, read into the IR's index expressions and conditions (the
workload language's ``where(COND, A, B)``, built by ``arith.select`` in
:mod:`autotune.frontends.mlir.body`).

While a body is read, ``linalg.index d`` is the index named :func:`dim_name` ``(d)``; the
statement writer renames it to the statement's index of iteration dim ``d``
(:func:`rename_dims`).
"""
from __future__ import annotations

import re

from search_spaces.conditions import Condition, IndexExpr, index_expr
from search_spaces.ir import Const, Expr

from autotune.frontends.mlir.expressions import substitute

# arith.cmpi predicates, by their enum value: (comparison, unsigned)
PREDICATES = {0: ("==", False), 1: ("!=", False), 2: ("<", False), 3: ("<=", False),
              4: (">", False), 5: (">=", False), 6: ("<", True), 7: ("<=", True),
              8: (">", True), 9: (">=", True)}
# integer ops that keep an index's value (the indices of a body are small and non-negative)
CASTS = ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci")
ARITHMETIC = {"arith.addi": 1, "arith.subi": -1}


def dim_name(d: int) -> str:
    """The placeholder name of ``linalg.index d`` while a body is read."""
    return f"%dim{d}"


def dim_of(name: str) -> int | None:
    """The iteration dim of a placeholder made by :func:`dim_name`, else None."""
    m = re.fullmatch(r"%dim(\d+)", name)
    return int(m.group(1)) if m else None


def as_index(v) -> IndexExpr | None:
    """``v`` as an index expression: an index value itself, or an integer constant."""
    if isinstance(v, IndexExpr):
        return v
    if isinstance(v, Const) and float(v.value).is_integer():
        return IndexExpr((), int(v.value))
    return None


def combine(name: str, a: IndexExpr, b: IndexExpr) -> IndexExpr:
    """``a + b`` or ``a - b`` for ``arith.addi`` / ``arith.subi``."""
    sign = ARITHMETIC[name]
    return index_expr(a.terms + tuple((i, sign * c) for i, c in b.terms),
                      a.offset + sign * b.offset)


def compare(predicate: int, a: IndexExpr, b: IndexExpr) -> Condition | None:
    """The condition of ``arith.cmpi``; None for an unsigned comparison of values that may be
    negative (the index arithmetic subtracts), where it would not be the signed one."""
    op, unsigned = PREDICATES[predicate]
    if unsigned and any(c < 0 for x in (a, b) for _, c in x.terms) or \
            unsigned and min(a.offset, b.offset) < 0:
        return None
    return Condition(op, a, b)


def rename_dims(e: Expr, fn) -> Expr:
    """``e`` with the placeholders of its conditions replaced by ``fn(d) -> IndexExpr`` (the
    statement's index of iteration dim ``d``, or the constant 0 for a size-1 dim)."""
    def side(x: IndexExpr) -> IndexExpr:
        terms, offset = [], x.offset
        for i, c in x.terms:
            d = dim_of(i)
            y = fn(d) if d is not None else IndexExpr(((i, 1),))
            terms += [(j, c * k) for j, k in y.terms]
            offset += c * y.offset
        return index_expr(terms, offset)
    return substitute(e, lambda a: a, lambda c: Condition(c.op, side(c.lhs), side(c.rhs)))
