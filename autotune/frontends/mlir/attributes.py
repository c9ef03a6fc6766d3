"""Reading MLIR types and attributes through the Python bindings, old and new: type checks,
numbers and strings out of attributes, argument names, and attributes shortened for messages."""
from __future__ import annotations

import re


def isa(obj, cls) -> bool:
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


def one_line(s: str) -> str:
    """``s`` with its runs of whitespace (newlines included) as single spaces."""
    return " ".join(str(s).split())


def short(attr) -> str:
    """An attribute as one line of at most 60 characters, for a message."""
    s = one_line(str(attr))
    return s if len(s) <= 60 else s[:57] + "..."


def str_attr(attr) -> str:
    """The text of a string attribute."""
    v = getattr(attr, "value", None)
    if isinstance(v, str):
        return v
    return str(attr).strip('"')


def float_attr(ir, attr) -> float:
    """The number of a float or integer attribute (``ir``: the bindings' ``ir`` module)."""
    if isa(attr, ir.FloatAttr):
        return float(ir.FloatAttr(attr).value)
    if isa(attr, ir.IntegerAttr):
        return float(ir.IntegerAttr(attr).value)
    raise ValueError(f"unsupported splat value {attr}")


def arg_name(attrs, n: int) -> str:
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
