"""Expressions of a generic's body while they are imported: placeholders for its block
arguments (slots), substitution, and folding of constants (with ``sigmoid`` recognised)."""
from __future__ import annotations

import math
import re

from search_spaces.ir import Access, Binary, Call, Const, Expr, Pow, Select, Unary

_FOLD = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "rsqrt": lambda x: 1 / math.sqrt(x),
         "tanh": math.tanh, "abs": abs, "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
         "max": max, "min": min}


def slot(kind: str, n: int) -> Access:
    """A placeholder for the generic's n-th input ("in") or output ("out") block argument."""
    return Access(f"%{kind}{n}", ())


def slot_of(a: Access) -> tuple[str, int]:
    """The (kind, n) of a placeholder made by :func:`slot`."""
    m = re.fullmatch(r"%(in|out)(\d+)", a.tensor)
    return m.group(1), int(m.group(2))


def fold(e: Expr) -> Expr:
    """Fold operations on constants (in float64), selects whose condition names no index or
    whose branches agree, and recognise sigmoid."""
    if isinstance(e, Select):
        if not e.cond.indices:
            return e.a if e.cond.holds({}) else e.b
        return e.a if e.a == e.b else e
    try:
        if isinstance(e, Unary) and isinstance(e.x, Const):
            return Const(-e.x.value)
        if isinstance(e, Binary) and isinstance(e.a, Const) and isinstance(e.b, Const):
            a, b = e.a.value, e.b.value
            return Const({"+": a + b, "-": a - b, "*": a * b, "/": a / b}[e.op])
        if isinstance(e, Pow) and isinstance(e.base, Const):
            return Const(float(e.base.value) ** e.exponent)
        if isinstance(e, Call) and all(isinstance(a, Const) for a in e.args):
            return Const(float(_FOLD[e.fn](*[a.value for a in e.args])))
    except (ArithmeticError, ValueError):
        return e
    x = _sigmoid_arg(e)
    return Call("sigmoid", (x,)) if x is not None else e


def substitute(e: Expr, fn, cond=None) -> Expr:
    """``e`` with every access replaced by ``fn(access)`` (an Expr) and every where()
    condition by ``cond(condition)`` (unchanged without ``cond``), folded bottom-up."""
    if isinstance(e, Access):
        return fn(e)
    if isinstance(e, Const):
        return e
    if isinstance(e, Unary):
        return fold(Unary(e.op, substitute(e.x, fn, cond)))
    if isinstance(e, Binary):
        return fold(Binary(e.op, substitute(e.a, fn, cond), substitute(e.b, fn, cond)))
    if isinstance(e, Pow):
        return fold(Pow(substitute(e.base, fn, cond), e.exponent))
    if isinstance(e, Select):
        return fold(Select(cond(e.cond) if cond else e.cond, substitute(e.a, fn, cond),
                           substitute(e.b, fn, cond)))
    return fold(Call(e.fn, tuple(substitute(a, fn, cond) for a in e.args)))


def _is_const(e, value) -> bool:
    return isinstance(e, Const) and e.value == value


def _sigmoid_arg(e: Expr):
    """x when ``e`` is 1/(1+exp(-x)) (either operand order of the sum), else None."""
    if not (isinstance(e, Binary) and e.op == "/" and _is_const(e.a, 1.0)):
        return None
    s = e.b
    if not (isinstance(s, Binary) and s.op == "+"):
        return None
    for one, ex in ((s.a, s.b), (s.b, s.a)):
        if _is_const(one, 1.0) and isinstance(ex, Call) and ex.fn == "exp":
            arg = ex.args[0]
            if isinstance(arg, Unary):
                return arg.x
            if isinstance(arg, Binary) and arg.op == "*":
                if _is_const(arg.a, -1.0):
                    return arg.b
                if _is_const(arg.b, -1.0):
                    return arg.a
            if isinstance(arg, Binary) and arg.op == "-" and _is_const(arg.a, 0.0):
                return arg.b
    return None
