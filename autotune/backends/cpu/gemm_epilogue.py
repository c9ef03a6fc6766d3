"""A kernel group's epilogue (:mod:`search_spaces.epilogue`) as the kernel runs it: the
consumer's expression in C over the accumulator (``{x}``) and the other tensors it reads, as a
:class:`autotune.backends.cpu.gemm_kernel.Transform`, and those tensors as the kernel's extra
arrays: (batch, m, n) views over the contraction's index groups, broadcast (stride 0) along the
indices a tensor lacks.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from search_spaces.epilogue import Epilogue, group_strides
from search_spaces.gemm import GemmForm, gemm_form
from search_spaces.ir import Access, Binary, Call, Const, Expr, Pow, Unary
from search_spaces.workload import Workload

from autotune.backends.cpu.codegen import C_FUNCTIONS
from autotune.backends.cpu.gemm_kernel import Transform
from autotune.backends.loops import COMMON_FUNCTIONS, SCALAR_TYPES

# stand-ins for the Transform's placeholders while the C text (which has braces) is built
_X, _M, _N = "\0x\0", "\0m\0", "\0n\0"


@dataclass(frozen=True)
class EpilogueOperand:
    """A tensor the epilogue reads besides the accumulator: ``tensor`` at subscript ``idx``
    (the consumer's index names), the kernel's extra array ``arg``; ``strides``: its element
    strides over (batch, m, n) as its layout gives them, written into the C as constants (so
    that a unit or zero column stride vectorises), or None where the executor copies it into a
    broadcastable array first and the kernel reads the strides at run time."""
    arg: str
    tensor: str
    idx: tuple[str, ...]
    strides: tuple[int, ...] | None


def epilogue_code(w: Workload, epi: Epilogue, layout_of: Callable[[str], tuple[int, ...]]
                  ) -> tuple[Transform, tuple[EpilogueOperand, ...]]:
    """The epilogue as a Transform over ``{x}``, ``{m}`` and ``{n}``, and its extra arrays in
    the Transform's argument order (``layout_of``: a tensor's storage order)."""
    op = w.op(epi.consumer)
    p = w.op(epi.contraction)
    form = gemm_form(p)
    ext = dict(zip(p.domain, p.extents))
    to_p = epi.to_contraction(w)
    suf = SCALAR_TYPES[w.dtype][1]
    functions = {**COMMON_FUNCTIONS, **C_FUNCTIONS}
    operands: dict[tuple[str, tuple[str, ...]], EpilogueOperand] = {}

    def text(e: Expr) -> str:
        if isinstance(e, Const):
            return f"((T){e.value!r})"
        if isinstance(e, Access):
            if e.tensor == epi.contraction:
                return _X
            if (e.tensor, e.idx) not in operands:
                st = group_strides(tuple(to_p[i] for i in e.idx), w.shapes[e.tensor],
                                   layout_of(e.tensor), (form.batch, form.m, form.n), ext)
                operands[e.tensor, e.idx] = EpilogueOperand(f"e{len(operands)}", e.tensor,
                                                            e.idx, st)
            o = operands[e.tensor, e.idx]
            r, c = (f"{o.strides[1]}L", f"{o.strides[2]}L") if o.strides is not None else \
                (f"x->{o.arg}_r", f"x->{o.arg}_c")
            return f"x->{o.arg}[{_M} * {r} + {_N} * {c}]"
        if isinstance(e, Unary):
            return f"(-{text(e.x)})"
        if isinstance(e, Binary):
            return f"({text(e.a)} {e.op} {text(e.b)})"
        if isinstance(e, Pow):
            if e.exponent == 0:
                return "((T)1)"
            # a GNU statement expression evaluates the base once
            prod = " * ".join(["_p"] * abs(e.exponent))
            body = f"({{ T _p = {text(e.base)}; {prod}; }})"
            return f"(1/{body})" if e.exponent < 0 else body
        if isinstance(e, Call):
            return functions[e.fn].format(*[text(a) for a in e.args], s=suf)
        raise ValueError(f"{epi.consumer}: the kernel's epilogue cannot evaluate {e!r}")

    c = text(op.expr).replace("{", "{{").replace("}", "}}")
    c = c.replace(_X, "{x}").replace(_M, "{m}").replace(_N, "{n}")
    ops = tuple(operands.values())
    return Transform(c, tuple(o.arg for o in ops)), ops


def epilogue_arrays(w: Workload, epi: Epilogue, form: GemmForm,
                    operands: tuple[EpilogueOperand, ...], env) -> tuple[np.ndarray, ...]:
    """Each operand of ``env`` (tensor name -> logical array) as a (batch, m, n) array over
    ``form``'s index groups: a strided view, broadcast where the tensor lacks an index, or a
    copy where its storage nests a group's indices otherwise than row-major."""
    op = w.op(epi.contraction)
    ext = dict(zip(op.domain, op.extents))
    to_p = epi.to_contraction(w)
    order = [i for g in (form.batch, form.m, form.n) for i in g]
    shape3 = [int(np.prod([ext[i] for i in g], dtype=np.int64))
              for g in (form.batch, form.m, form.n)]
    out = []
    for o in operands:
        arr = env[o.tensor]
        it = arr.itemsize
        have = [to_p[i] for i in o.idx]
        full = np.lib.stride_tricks.as_strided(
            arr, [ext[i] for i in order],
            [arr.strides[have.index(i)] if i in have else 0 for i in order], writeable=False)
        view = full.view()
        try:
            view.shape = shape3
        except AttributeError:
            view = np.ascontiguousarray(full).reshape(shape3)
        if o.strides is not None and any(s1 > 1 and st != want * it for s1, st, want in
                                         zip(shape3, view.strides, o.strides)):
            # the C was written for the candidate's layout: never read another one with it
            raise ValueError(f"{o.tensor}: strides {view.strides} are not the layout's "
                             f"{tuple(x * it for x in o.strides)}")
        out.append(view)
    return tuple(out)
