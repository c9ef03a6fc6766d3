"""Helpers of the MLIR importer (:mod:`autotune.frontends.mlir.importer`) that need no importer state:
expressions (folding, printing, substitution), source locations, dim factor lists and MLIR
attribute access."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from search_spaces.ir import Access, Binary, Call, Const, Expr, Pow, Unary

_LETTERS = "ijklmnopqrstuvwxyzabcdefgh"


# ---- small helpers ------------------------------------------------------------------------------
def _line_col(loc) -> tuple[int, int]:
    m = re.search(r":(\d+):(\d+)", str(loc))
    return (int(m.group(1)), int(m.group(2))) if m else (1, 1)


def _fmt(value: float, dtype: str) -> str:
    """A constant as the shortest decimal that rounds to the same value of the IR's type."""
    if not math.isfinite(value):
        raise ValueError(value)
    if dtype == "float32" and float(np.float32(value)) == value:
        text = np.format_float_positional(np.float32(value), unique=True, trim="0")
        if "e" not in text and len(text) > 24:
            text = np.format_float_scientific(np.float32(value), unique=True, trim="0")
    else:
        text = repr(float(value))
    text = text.replace("e+", "e")
    if text.startswith("."):
        text = "0" + text
    if text.startswith("-."):
        text = "-0" + text[1:]
    if text.endswith("."):
        text += "0"
    return text


def _to_text(e: Expr, dtype: str) -> str:
    if isinstance(e, Const):
        return _fmt(e.value, dtype)
    if isinstance(e, Access):
        return f"{e.tensor}[{','.join(e.idx)}]"
    if isinstance(e, Unary):
        return f"(-{_to_text(e.x, dtype)})"
    if isinstance(e, Binary):
        return f"({_to_text(e.a, dtype)} {e.op} {_to_text(e.b, dtype)})"
    if isinstance(e, Pow):
        return f"({_to_text(e.base, dtype)} ** {e.exponent})"
    return f"{e.fn}({', '.join(_strip(_to_text(a, dtype)) for a in e.args)})"


def _strip(text: str) -> str:
    """Drop the outermost parentheses of a statement's right-hand side."""
    if text.startswith("(") and text.endswith(")"):
        depth = 0
        for n, ch in enumerate(text):
            depth += ch == "("
            depth -= ch == ")"
            if depth == 0 and n < len(text) - 1:
                return text
        return text[1:-1]
    return text


_FOLD = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "rsqrt": lambda x: 1 / math.sqrt(x),
         "tanh": math.tanh, "abs": abs, "sigmoid": lambda x: 1 / (1 + math.exp(-x)),
         "max": max, "min": min}


def _fold(e: Expr) -> Expr:
    """Fold operations on constants (in float64) and recognise sigmoid."""
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


def _subst(e: Expr, fn) -> Expr:
    """``e`` with every access replaced by ``fn(access)`` (an Expr), folded bottom-up."""
    if isinstance(e, Access):
        return fn(e)
    if isinstance(e, Const):
        return e
    if isinstance(e, Unary):
        return _fold(Unary(e.op, _subst(e.x, fn)))
    if isinstance(e, Binary):
        return _fold(Binary(e.op, _subst(e.a, fn), _subst(e.b, fn)))
    if isinstance(e, Pow):
        return _fold(Pow(_subst(e.base, fn), e.exponent))
    return _fold(Call(e.fn, tuple(_subst(a, fn) for a in e.args)))


def _slot(kind: str, n: int) -> Access:
    """A placeholder for the generic's n-th input ("in") or output ("out") block argument."""
    return Access(f"%{kind}{n}", ())


def _slot_of(a: Access) -> tuple[str, int]:
    m = re.fullmatch(r"%(in|out)(\d+)", a.tensor)
    return m.group(1), int(m.group(2))


# ---- source locations ----------------------------------------------------------------------------
def _strip_locations(text: str) -> str:
    """``text`` without its ``loc(...)`` annotations and ``#loc`` aliases, lines kept in place.

    IR printed with debug info (as iree-compile prints it) carries the locations of the program
    it came from; without them the parser gives every op its line in this file, which is what
    an error message should name."""
    if "loc" not in text:
        return text
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        ch = text[i]
        if ch == '"':                       # a string literal: copied as is
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i, line_start = j + 1, False
            continue
        if line_start and text.startswith("#loc", i):   # an alias definition: a whole line
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("loc(", i) and (i == 0 or not (text[i - 1].isalnum()
                                                         or text[i - 1] in "_.$")):
            depth, j = 0, i + 3
            while j < n:
                c = text[j]
                if c == '"':
                    j += 1
                    while j < n and text[j] != '"':
                        j += 2 if text[j] == "\\" else 1
                elif c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            while out and out[-1] in (" ", "\t"):
                out.pop()
            out.append("\n" * text.count("\n", i, j + 1))
            i = j + 1
            continue
        out.append(ch)
        line_start = ch == "\n" or (line_start and ch in " \t")
        i += 1
    return "".join(out)


# ---- factor lists ----------------------------------------------------------------------------
def _prefix(fl: list[int]) -> list[int]:
    out, p = [], 1
    for f in fl:
        p *= f
        out.append(p)
    return out


def _merge(a: list[int], b: list[int]):
    """The common refinement of two factorisations of one extent, or None if there is none."""
    pts = sorted(set(_prefix(a)) | set(_prefix(b)))
    out, prev = [], 1
    for p in pts:
        if p % prev:
            return None
        if p != prev:
            out.append(p // prev)
        prev = p
    return out


def _split(fl: list[int], sizes: list[int]) -> list[list[int]]:
    """Cut a factor list into consecutive parts whose products are ``sizes``."""
    parts, k = [], 0
    for s in sizes:
        part, p = [], 1
        while p < s and k < len(fl):
            part.append(fl[k])
            p *= fl[k]
            k += 1
        parts.append(part)
    return parts


# ---- attribute helpers ------------------------------------------------------------------------
def _isa(obj, cls) -> bool:
    """isinstance for MLIR types/attributes/affine exprs, with old and new Python bindings."""
    if isinstance(obj, cls):
        return True
    check = getattr(cls, "isinstance", None)
    if check is not None:
        return bool(check(obj))
    try:
        cls(obj)
    except Exception:
        return False
    return True


def _one_line(s: str) -> str:
    return " ".join(str(s).split())


def _short(attr) -> str:
    s = _one_line(str(attr))
    return s if len(s) <= 60 else s[:57] + "..."


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _str_attr(attr) -> str:
    v = getattr(attr, "value", None)
    if isinstance(v, str):
        return v
    return str(attr).strip('"')


def _float_attr(ir, attr) -> float:
    if _isa(attr, ir.FloatAttr):
        return float(ir.FloatAttr(attr).value)
    if _isa(attr, ir.IntegerAttr):
        return float(ir.IntegerAttr(attr).value)
    raise ValueError(f"unsupported splat value {attr}")


def _arg_name(attrs, n: int) -> str:
    """A name for argument n: from a ``jax.arg_info`` / ``name`` string attribute, else argN."""
    if attrs is not None:
        text = str(attrs)
        for key in ("jax.arg_info", "iree.abi.name", "name"):
            m = re.search(re.escape(key) + r'\s*=\s*"([^"]*)"', text)
            if m:
                info = m.group(1)
                names = re.findall(r"[A-Za-z_][A-Za-z0-9_]*", info)
                if names and not re.search(r"\[\s*\d+\s*\]\s*$", info):
                    return names[-1]
    return f"arg{n}"


# ---- values --------------------------------------------------------------------------------------
@dataclass
class _Val:
    """What an SSA value is: a tensor (``vid``), a splat constant, an empty tensor, a scalar."""
    kind: str                   # "tensor" | "const" | "empty" | "scalar" | "int"
    shape: tuple[int, ...] = ()
    value: float = 0.0
    vid: int = -1


@dataclass
class _Generic:
    line: int
    col: int
    name: str
    sizes: list[int]                         # per iteration dim
    reduction: list[bool]
    operands: list[tuple[_Val, list]]         # ins then outs: (value, map results)
    n_in: int
    expr: Expr                                # with %in/%out slots; constants substituted
    combiner: str                             # none | sum | max
    init: Expr | None                         # what the reduction starts from, if not neutral
    result: _Val | None = None
    is_copy: bool = False                     # a transpose/broadcast copy of one tensor
    known_line: bool = True                   # False: the passes lost its location (inlined)


@dataclass
class _Stmt:
    out: int                                  # base id
    lhs: list[str]
    combiner: str
    expr: Expr                                # accesses name bases as "#<id>"
    line: int
    origin: str
