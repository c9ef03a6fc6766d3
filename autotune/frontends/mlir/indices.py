"""Index arithmetic in the imported IR: ``linalg.index``, integer adds, subtracts, multiplies by
constants and casts of it, and ``arith.cmpi`` of two such values, read into the IR's index
expressions and conditions (the workload language's ``where(COND, A, B)``, built by
``arith.select`` in :mod:`autotune.frontends.mlir.body`).

Inside a body, ``linalg.index d`` is the index named :func:`dim_name` ``(d)``; the statement
writer renames it to the statement's index of iteration dim ``d`` (:func:`rename_dims`).

A compiler may also build a mask out of tensors: an integer tensor holding ``linalg.index``
(an iota), reshaped, broadcast, offset, compared into an ``i1`` tensor that a later generic
selects with, or selects numbers with into a float tensor that reads no data (what IREE makes of
``jnp.where`` on iota comparisons).  Such a tensor is read as a *symbolic* value: an index
expression, a condition, or an expression without accesses, over its own positions (named
:func:`pos_name` ``(k)``), carried through reshapes and generics into the bodies that read it.
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
ARITHMETIC = ("arith.addi", "arith.subi", "arith.muli")
Symbol = IndexExpr | Condition | Expr   # what a symbolic tensor holds


def dim_name(d: int) -> str:
    """The placeholder name of ``linalg.index d`` while a body is read."""
    return f"%dim{d}"


def pos_name(k: int) -> str:
    """The placeholder name of position ``k`` of a symbolic tensor."""
    return f"%p{k}"


def _number(name: str, kind: str) -> int | None:
    m = re.fullmatch(rf"%{kind}(\d+)", name)
    return int(m.group(1)) if m else None


def as_index(v) -> IndexExpr | None:
    """``v`` as an index expression: an index value itself, or an integer constant."""
    if isinstance(v, IndexExpr):
        return v
    if isinstance(v, Const) and float(v.value).is_integer():
        return IndexExpr((), int(v.value))
    return None


def arithmetic(name: str, a: IndexExpr, b: IndexExpr) -> IndexExpr | None:
    """``a + b``, ``a - b`` or ``a * b`` (None for a product of two indices)."""
    if name == "arith.muli":
        if a.terms and b.terms:
            return None
        k, x = (a.offset, b) if not a.terms else (b.offset, a)
        return index_expr([(i, k * c) for i, c in x.terms], k * x.offset)
    sign = 1 if name == "arith.addi" else -1
    return index_expr(a.terms + tuple((i, sign * c) for i, c in b.terms),
                      a.offset + sign * b.offset)


def compare(predicate: int, a: IndexExpr, b: IndexExpr) -> Condition | None:
    """The condition of ``arith.cmpi``; None for an unsigned comparison of values that may be
    negative (the index arithmetic subtracts), where it would not be the signed one."""
    op, unsigned = PREDICATES[predicate]
    if unsigned and (any(c < 0 for x in (a, b) for _, c in x.terms) or
                     min(a.offset, b.offset) < 0):
        return None
    return Condition(op, a, b)


def _mapped(sym: Symbol, fn) -> Symbol:
    """``sym`` with each index name replaced by ``fn(name) -> IndexExpr``."""
    if isinstance(sym, (IndexExpr, Condition)):
        return sym.substituted(fn)
    return substitute(sym, lambda a: a, lambda c: c.substituted(fn))


def rename_dims(e: Expr, fn) -> Expr:
    """``e`` with the placeholders of its conditions replaced by ``fn(d) -> IndexExpr`` (the
    statement's index of iteration dim ``d``, or the constant 0 for a size-1 dim)."""
    def one(name: str) -> IndexExpr:
        d = _number(name, "dim")
        return fn(d) if d is not None else IndexExpr(((name, 1),))
    return _mapped(e, one)


def at_dims(sym: Symbol, res: tuple) -> Symbol:
    """A symbolic operand read through its indexing map (``res``: per position the iteration
    dim, or None for a constant-0 position): positions become ``linalg.index`` placeholders."""
    def one(name: str) -> IndexExpr:
        d = res[_number(name, "p")]
        return IndexExpr(((dim_name(d), 1),)) if d is not None else IndexExpr((), 0)
    return _mapped(sym, one)


def at_positions(sym: Symbol, out_map: tuple) -> Symbol | None:
    """What a generic yields into a symbolic result, over the result's positions (``out_map``:
    per position its iteration dim); None if it uses a dim the result does not index."""
    def one(name: str) -> IndexExpr:
        d = _number(name, "dim")
        if d not in out_map:
            raise KeyError(d)
        return IndexExpr(((pos_name(out_map.index(d)), 1),))
    try:
        return _mapped(sym, one)
    except KeyError:
        return None


def reshaped(sym: Symbol, groups, fine_shape, coarse_to_fine: bool) -> Symbol | None:
    """A symbolic tensor through an expand (``coarse_to_fine``) or collapse: each group of
    fine dims holds at most one dim larger than 1 (else None: the index would need a stride)."""
    def live(g):
        return [j for j in g if fine_shape[j] > 1]
    if any(len(live(g)) > 1 for g in groups):
        return None
    if coarse_to_fine:
        def one(name: str) -> IndexExpr:
            g = live(groups[_number(name, "p")])
            return IndexExpr(((pos_name(g[0]), 1),)) if g else IndexExpr((), 0)
    else:
        coarse_of = {j: k for k, g in enumerate(groups) for j in g}

        def one(name: str) -> IndexExpr:
            j = _number(name, "p")
            return IndexExpr(((pos_name(coarse_of[j]), 1),)) if fine_shape[j] > 1 \
                else IndexExpr((), 0)
    return _mapped(sym, one)
