"""The IR: scalar expression trees and generic ops with indexing maps.

A statement ``T[i,j] += A[i,k] * B[k,j]`` becomes one :class:`Op` whose iteration domain is
(i, j | k): parallel indices first (the output's, in its order), then reduction indices (in order
of first appearance).  Every operand access is a tuple of domain positions: its indexing map, a
projected permutation of the domain (possibly broadcasting).  A ``where(COND, A, B)`` is a
:class:`Select` whose :class:`~search_spaces.conditions.Condition` compares index expressions:
it reads no tensor, so :func:`index_names` (not :func:`accesses`) says what an expression
depends on.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Union

import numpy as np

from .conditions import Condition

FUNCTIONS: dict[str, int] = {
    "exp": 1, "log": 1, "sqrt": 1, "rsqrt": 1, "sigmoid": 1, "tanh": 1, "relu": 1, "abs": 1,
    "max": 2, "min": 2,
}
# Functions that cost a transcendental evaluation (weighted in the cost model).
TRANSCENDENTAL = frozenset({"exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh"})
COMBINERS = ("none", "sum", "max")


@dataclass(frozen=True)
class Const:
    value: float


@dataclass(frozen=True)
class Access:
    """A read of tensor ``tensor`` at the op's domain indices ``idx`` (names)."""
    tensor: str
    idx: tuple[str, ...]


@dataclass(frozen=True)
class Unary:
    op: str  # "neg"
    x: "Expr"


@dataclass(frozen=True)
class Binary:
    op: str  # "+", "-", "*", "/"
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True)
class Pow:
    base: "Expr"
    exponent: int


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple["Expr", ...]


@dataclass(frozen=True)
class Select:
    """``where(cond, a, b)``: ``a`` where the index condition holds, else ``b``; elementwise
    over the op's domain like any other expression (the condition reads no tensor)."""
    cond: Condition
    a: "Expr"
    b: "Expr"


Expr = Union[Const, Access, Unary, Binary, Pow, Call, Select]


def accesses(e: Expr) -> list[Access]:
    """All tensor accesses in ``e``, left to right (duplicates kept)."""
    if isinstance(e, Access):
        return [e]
    return [a for sub in children(e) for a in accesses(sub)]


def conditions(e: Expr) -> list[Condition]:
    """Every where() condition in ``e``, outermost first."""
    own = [e.cond] if isinstance(e, Select) else []
    return own + [c for sub in children(e) for c in conditions(sub)]


def children(e: Expr) -> tuple[Expr, ...]:
    """The sub-expressions of ``e`` (a condition is not one: it is no Expr)."""
    if isinstance(e, Unary):
        return (e.x,)
    if isinstance(e, Binary):
        return (e.a, e.b)
    if isinstance(e, Pow):
        return (e.base,)
    if isinstance(e, Select):
        return (e.a, e.b)
    if isinstance(e, Call):
        return e.args
    return ()


def index_names(e: Expr) -> set[str]:
    """Every index ``e`` depends on: its accesses' subscripts and its conditions' indices.

    An expression without any is a constant; one with a condition but no access still varies
    over the indices the condition names (a causal mask ``where(j <= i, 1, 0)``)."""
    used = {i for a in accesses(e) for i in a.idx}
    return used | {i for c in conditions(e) for i in c.indices}


def count_flops(e: Expr) -> tuple[int, int]:
    """(arithmetic ops, transcendental calls) of one evaluation of ``e``."""
    if isinstance(e, (Const, Access)):
        return 0, 0
    if isinstance(e, Unary):
        f, t = count_flops(e.x)
        return f + 1, t
    if isinstance(e, Binary):
        fa, ta = count_flops(e.a)
        fb, tb = count_flops(e.b)
        return fa + fb + 1, ta + tb
    if isinstance(e, Pow):
        f, t = count_flops(e.base)
        # repeated multiplication; a negative exponent adds one division
        return f + max(abs(e.exponent) - 1, 0) + (1 if e.exponent < 0 else 0), t
    if isinstance(e, Select):
        # a compare and a select per evaluation; both branches are counted (vector code
        # evaluates both and blends)
        fa, ta = count_flops(e.a)
        fb, tb = count_flops(e.b)
        return fa + fb + 2, ta + tb
    f = sum(count_flops(a)[0] for a in e.args)
    t = sum(count_flops(a)[1] for a in e.args)
    return f + (0 if e.fn in TRANSCENDENTAL else 1), t + (1 if e.fn in TRANSCENDENTAL else 0)


def to_text(e: Expr) -> str:
    """Fully parenthesised text of an expression (used in the canonical form and printing)."""
    if isinstance(e, Const):
        return repr(float(e.value))
    if isinstance(e, Access):
        return f"{e.tensor}[{','.join(e.idx)}]"
    if isinstance(e, Unary):
        return f"(-{to_text(e.x)})"
    if isinstance(e, Binary):
        return f"({to_text(e.a)} {e.op} {to_text(e.b)})"
    if isinstance(e, Pow):
        return f"({to_text(e.base)} ** {e.exponent})"
    if isinstance(e, Select):
        return f"where({e.cond.text()}, {to_text(e.a)}, {to_text(e.b)})"
    return f"{e.fn}({', '.join(to_text(a) for a in e.args)})"


def rebuild(e: Expr, access: Callable[[Access], Expr],
            cond: Callable[[Condition], Condition] = lambda c: c) -> Expr:
    """``e`` with every access replaced by ``access(it)`` and every where()'s condition by
    ``cond(it)``, the rest of the tree as it is."""
    if isinstance(e, Access):
        return access(e)
    if isinstance(e, Const):
        return e
    if isinstance(e, Unary):
        return Unary(e.op, rebuild(e.x, access, cond))
    if isinstance(e, Binary):
        return Binary(e.op, rebuild(e.a, access, cond), rebuild(e.b, access, cond))
    if isinstance(e, Pow):
        return Pow(rebuild(e.base, access, cond), e.exponent)
    if isinstance(e, Select):
        return Select(cond(e.cond), rebuild(e.a, access, cond), rebuild(e.b, access, cond))
    return Call(e.fn, tuple(rebuild(a, access, cond) for a in e.args))


def rename(e: Expr, mapping: dict[str, str]) -> Expr:
    """``e`` with its index names replaced through ``mapping``."""
    return rebuild(e, lambda a: Access(a.tensor, tuple(mapping[i] for i in a.idx)),
                   lambda c: c.renamed(mapping))


@dataclass(frozen=True)
class Op:
    """One generic op: ``out[parallel] (combiner)= expr`` over domain ``parallel + reduction``.

    Index names are canonical (``d0, d1, ...``: parallel in output order, then reduction in order
    of first appearance), so two ops that differ only in the user's index names are equal.
    """
    out: str
    parallel: tuple[str, ...]
    reduction: tuple[str, ...]
    extents: tuple[int, ...]          # per domain index, parallel then reduction
    combiner: str                     # "none" | "sum" | "max"
    expr: Expr
    line: int = field(default=0, compare=False)   # source line, for messages only

    @property
    def domain(self) -> tuple[str, ...]:
        return self.parallel + self.reduction

    def extent(self, index: str) -> int:
        return self.extents[self.domain.index(index)]

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.extents[: len(self.parallel)]

    @property
    def iterations(self) -> int:
        n = 1
        for e in self.extents:
            n *= e
        return n

    @property
    def out_size(self) -> int:
        n = 1
        for e in self.out_shape:
            n *= e
        return n

    def reads(self) -> list[Access]:
        return list(self._reads)

    @cached_property
    def _reads(self) -> tuple[Access, ...]:
        # kept: the model and the space ask an op for its reads ~400,000 times in a search
        return tuple(accesses(self.expr))

    def inputs(self) -> tuple[str, ...]:
        """Distinct tensors read, in order of first read."""
        return tuple(dict.fromkeys(a.tensor for a in self.reads()))

    def indexing_map(self, access: Access) -> tuple[int, ...]:
        """Domain positions of each subscript of ``access`` (its projected-permutation map)."""
        return tuple(self.domain.index(i) for i in access.idx)

    def factors(self) -> list[Expr]:
        return multiplicative_factors(self.expr)

    @cached_property
    def is_contraction(self) -> bool:
        """A sum whose product factors share a reduction index: a GEMM-class op."""
        if self.combiner != "sum" or not self.reduction:
            return False
        facs = [f for f in self.factors() if accesses(f)]
        if len(facs) < 2:
            return False
        # Two factors sharing a reduction index, each with an index the other lacks: a real
        # matrix product (M and N both non-trivial), not a batched dot product like sum(x*x).
        red = set(self.reduction)
        sets = [{i for a in accesses(f) for i in a.idx} for f in facs]
        for x, sx in enumerate(sets):
            for sy in sets[x + 1:]:
                if sx & sy & red and sx - sy and sy - sx:
                    return True
        return False

    def flops_per_iteration(self) -> tuple[int, int]:
        f, t = count_flops(self.expr)
        return f + (1 if self.combiner != "none" else 0), t

    def text(self) -> str:
        sym = {"none": "=", "sum": "+=", "max": "max="}[self.combiner]
        return f"{self.out}[{','.join(self.parallel)}] {sym} {to_text(self.expr)}"


def multiplicative_factors(e: Expr) -> list[Expr]:
    """Split a product into factors; ``x / y`` counts as ``x * (1/y)``."""
    if isinstance(e, Binary) and e.op == "*":
        return multiplicative_factors(e.a) + multiplicative_factors(e.b)
    if isinstance(e, Binary) and e.op == "/":
        return multiplicative_factors(e.a) + [Pow(e.b, -1)]
    if isinstance(e, Unary) and e.op == "neg":
        return [Const(-1.0)] + multiplicative_factors(e.x)
    return [e]


# What each function computes, in NumPy (arrays or scalars): the float64 reference evaluates
# with it (autotune.reference), and constant_value folds constant subexpressions with it, so the
# two cannot disagree (sigmoid's form, rsqrt's).
FUNCTION_VALUES = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sigmoid": lambda x: 0.5 * (1.0 + np.tanh(0.5 * x)), "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0), "abs": np.abs,
    "max": np.maximum, "min": np.minimum,
}
_ARITH = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
          "/": lambda a, b: a / b}


def constant_value(e: Expr) -> float | None:
    """The value of an expression that reads no tensor and no index (``sqrt(32)``, ``2 * 0.5``),
    else None; also None where it has no finite value (``log(0)``, ``1 / 0``)."""
    try:
        with np.errstate(all="ignore"):    # log(0), 1/0: no finite value, said by the None
            v = _fold(e)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return float(v) if v is not None and math.isfinite(v) else None


def _fold(e: Expr):
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Unary) and e.op == "neg":
        x = _fold(e.x)
        return None if x is None else -x
    if isinstance(e, Binary) and e.op in _ARITH:
        a, b = _fold(e.a), _fold(e.b)
        return None if a is None or b is None else _ARITH[e.op](np.float64(a), b)
    if isinstance(e, Pow):
        x = _fold(e.base)
        return None if x is None else np.float64(x) ** e.exponent
    if isinstance(e, Call) and e.fn in FUNCTION_VALUES:
        args = [_fold(a) for a in e.args]
        return None if any(a is None for a in args) else FUNCTION_VALUES[e.fn](*args)
    return None
