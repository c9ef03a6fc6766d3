"""The statements of an imported function as workload TOML: tensor names, one dim name per
extent, constants printed as the shortest decimals of the IR's type, comments naming lines."""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from search_spaces.conditions import IndexExpr
from search_spaces.ir import Access, Binary, Const, Expr, Pow, Select, Unary

from autotune.frontends.mlir.expressions import substitute
from autotune.frontends.mlir.records import Program, ReadFunction


def render_workload(program: Program, fn: ReadFunction, path: str) -> str:
    """The workload TOML of ``program``, written from ``fn`` read from the file ``path``."""
    names: dict[int, str] = {}
    taken = set()

    def unique(stem):
        name, n = stem, 1
        while name in taken:
            name, n = f"{stem}_{n}", n + 1
        taken.add(name)
        return name
    # inputs first, then outputs, then temporaries: an output never takes an argument's name
    for b, inp in enumerate(program.base_inputs):
        if inp is not None:
            names[b] = unique(fn.arg_names[inp])
    for oname, b in program.outputs:
        names[b] = unique(oname)
    n_tmp = 0
    for s in program.statements:
        if s.out not in names:
            names[s.out] = unique(f"t{n_tmp}")
            n_tmp += 1

    # dim names: one per distinct extent (D0, D1, ... in order of first use by an input);
    # every index of a statement binds dims of one extent, so any --dims override of a name
    # keeps the program consistent
    dim_names: dict[int, str] = {}
    inputs = []
    for b, inp in enumerate(program.base_inputs):
        if inp is None:
            continue
        shp: list = []
        for s in program.base_shapes[b]:
            if s == 1:
                shp.append(1)
                continue
            dim_names.setdefault(s, f"D{len(dim_names)}")
            shp.append(dim_names[s])
        inputs.append((names[b], shp))

    def rename(a: Access) -> Expr:
        return Access(names[int(a.tensor[1:])], a.idx)
    dtype = fn.dtype or "float32"
    width = 0
    lines = []
    sym = {"none": "=", "sum": "+=", "max": "max="}
    for s in program.statements:
        rhs = _strip(_to_text(substitute(s.expr, rename), dtype))
        lhs = f"{names[s.out]}[{','.join(s.lhs)}]"
        lines.append((f"{lhs} {sym[s.combiner]} {rhs}", s.origin))
        width = max(width, len(lines[-1][0]))
    text = "\n".join(f"{t.ljust(width)}  # {o}" if o else t for t, o in lines)
    stem = re.sub(r"[^A-Za-z0-9_.\-]", "_", Path(path).stem) or "imported"
    if not re.match(r"[A-Za-z_]", stem):
        stem = "m_" + stem
    out = [f"# imported by `autotune import-mlir` from {Path(path).name}, function @{fn.name}",
           f"name = {_q(stem)}",
           f"summary = {_q(f'imported from {Path(path).name} (@{fn.name})')}",
           f"dtype = {_q(dtype)}",
           f"outputs = [{', '.join(_q(o) for o, _ in program.outputs)}]",
           'program = """', text, '"""', "", "[dims]"]
    out += [f"{k} = {v}" for v, k in dim_names.items()]
    out += ["", "[inputs]"]
    out += [f"{n} = [{', '.join(_q(d) if isinstance(d, str) else str(d) for d in shp)}]"
            for n, shp in inputs]
    return "\n".join(out) + "\n"


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


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
    if isinstance(e, Select):
        c = e.cond
        return (f"where({_index_text(c.lhs)} {c.op} {_index_text(c.rhs)}, "
                f"{_strip(_to_text(e.a, dtype))}, {_strip(_to_text(e.b, dtype))})")
    return f"{e.fn}({', '.join(_strip(_to_text(a, dtype)) for a in e.args)})"


def _index_text(x: IndexExpr) -> str:
    """An index expression in the language's syntax: names and integers joined by + and -
    (a coefficient is written as a repeated name)."""
    parts = []
    for i, c in x.terms:
        parts += [("-" if c < 0 else "+", i)] * abs(c)
    if x.offset or not parts:
        parts.append(("-" if x.offset < 0 else "+", str(abs(x.offset))))
    text = " ".join(f"{s} {v}" for s, v in parts)
    return text[2:] if text.startswith("+ ") else text


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
