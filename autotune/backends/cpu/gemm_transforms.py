"""A kernel group's fusions (:mod:`search_spaces.kernel_fusion`) as the kernel runs them: the
epilogue's and the prologues' expressions in C, each a
:class:`autotune.backends.cpu.gemm_kernel.Transform` over the value (``{x}``: the accumulator,
or the main input's element being packed) and the other tensors it reads, and those tensors as
the kernel's extra arrays: 3-d views over the contraction's index groups ((batch, m, n) for the
epilogue, (batch, m, k) and (batch, k, n) for the prologues of A and B), broadcast (stride 0)
along the indices a tensor lacks.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from search_spaces.gemm import gemm_form
from search_spaces.ir import Access, Binary, Call, Const, Expr, Pow, Select, Unary
from search_spaces.kernel_fusion import (Epilogue, KernelParts, Prologue, batch_split,
                                         extra_strides)
from search_spaces.workload import Workload

from autotune.backends.cpu.codegen import C_FUNCTIONS
from autotune.backends.cpu.gemm_kernel import IDENTITY, Transform
from autotune.backends.cpu.staging import Staging
from autotune.backends.loops import COMMON_FUNCTIONS, SCALAR_TYPES

# stand-ins for the Transform's placeholders while the C text (which has braces) is built
_X, _Y, _R, _C = "\0x\0", "\0y\0", "\0r\0", "\0c\0"


@dataclass(frozen=True)
class TransformOperand:
    """A tensor a transform reads besides its value: ``tensor`` at subscript ``idx`` (the
    fused op's index names), the kernel's extra array ``arg``; ``strides``: its element strides
    over the transform's (batch, rows, cols) as its layout gives them, written into the C as
    constants (so that a unit or zero stride vectorises): the layout's, or those of the copy
    the executor makes first where the layout does not nest a group's indices; None where the
    batch takes two strides (read at run time)."""
    arg: str
    tensor: str
    idx: tuple[str, ...]
    strides: tuple[int, ...] | None


@dataclass(frozen=True)
class FusionSite:
    """Where one fusion applies: the contraction and the fused op, how the op's index names
    map onto the contraction's, the contraction's index groups the transform sees (batch, rows,
    cols), the placeholder names of rows and cols, and the prefix of its extra arrays' names."""
    contraction: str
    op: str
    to_contraction: tuple[tuple[str, str], ...]
    groups: tuple[tuple[str, ...], ...]
    rows: str
    cols: str
    prefix: str


def sites(w: Workload, parts: KernelParts) -> list[tuple[FusionSite, Epilogue | Prologue]]:
    """Each fusion of ``parts`` with its site, in the kernel's argument order (prologue of A,
    of B, epilogue)."""
    f = gemm_form(w.op(parts.contraction))
    out = []
    for pro, groups, rc in ((parts.prologue_a, (f.batch, f.m, f.k), ("m", "k")),
                            (parts.prologue_b, (f.batch, f.k, f.n), ("k", "n"))):
        if pro is not None:
            out.append((FusionSite(parts.contraction, pro.producer,
                                   tuple(pro.to_contraction(w).items()), groups, *rc,
                                   pro.operand), pro))
    if parts.epilogue is not None:
        epi = parts.epilogue
        out.append((FusionSite(parts.contraction, epi.consumer,
                               tuple(epi.to_contraction(w).items()), (f.batch, f.m, f.n), "m",
                               "n", "e"), epi))
    return out


@dataclass(frozen=True)
class Dialect:
    """How a language spells what a transform needs: its functions (beside
    :data:`COMMON_FUNCTIONS`), an integer power ``power(base, exponent)``, and an extra
    array's element ``read(site, operand, row, col)`` (None: this module's ``x->ARG[...]``)."""
    functions: dict
    power: Callable[[str, int], str]
    read: Callable[[FusionSite, TransformOperand, str, str], str] | None = None


def _gnu_power(base: str, n: int) -> str:
    # a GNU statement expression evaluates the base once
    body = f"({{ T _p = {base}; {' * '.join(['_p'] * abs(n))}; }})"
    return f"(1/{body})" if n < 0 else body


C_DIALECT = Dialect(C_FUNCTIONS, _gnu_power)


def transform_code(w: Workload, site: FusionSite, is_value: Callable[[Access], bool],
                   layout_of: Callable[[str], tuple[int, ...]],
                   is_second: Callable[[Access], bool] = lambda a: False,
                   dialect: Dialect = C_DIALECT
                   ) -> tuple[Transform, tuple[TransformOperand, ...]]:
    """The fused op's expression as a Transform (``is_value``: the accesses that read
    ``{x}``; ``is_second``: those that read ``{y}``, a pair's second contraction), and its
    extra arrays in the Transform's argument order; ``dialect``: the language (C by default,
    CUDA for autotune.backends.cuda.mma_kernel)."""
    op = w.op(site.op)
    p = w.op(site.contraction)
    ext = dict(zip(p.domain, p.extents))
    to_p = dict(site.to_contraction)
    suf = SCALAR_TYPES[w.dtype][1]
    functions = {**COMMON_FUNCTIONS, **dialect.functions}
    operands: dict[tuple[str, tuple[str, ...]], TransformOperand] = {}

    def index(i: str) -> str:
        """The value of the fused op's index ``i`` at the element: recovered from the flattened
        row or column of the site (row-major over its group's indices)."""
        ci = to_p[i]
        for group, flat in ((site.groups[1], _R), (site.groups[2], _C)):
            if ci in group:
                pos = group.index(ci)
                inner = math.prod(ext[j] for j in group[pos + 1:])
                v = f"{flat} / {inner}L" if inner > 1 else flat
                return f"(({v}) % {ext[ci]}L)" if pos > 0 else f"({v})"
        raise ValueError(f"{site.op}: where() reads index {i}, a batch index of the kernel")

    def index_value(x) -> str:
        terms = [index(i) if c == 1 else f"({c}L * {index(i)})" for i, c in x.terms]
        return "(" + " + ".join(terms + [f"{x.offset}L"]) + ")"

    def text(e: Expr) -> str:
        if isinstance(e, Const):
            return f"((T){e.value!r})"
        if isinstance(e, Access):
            if is_value(e):
                return _X
            if is_second(e):
                return _Y
            if (e.tensor, e.idx) not in operands:
                st, _ = extra_strides(tuple(to_p[i] for i in e.idx), w.shapes[e.tensor],
                                      layout_of(e.tensor), site.groups, ext)
                operands[e.tensor, e.idx] = TransformOperand(
                    f"{site.prefix}{len(operands)}", e.tensor, e.idx, st)
            o = operands[e.tensor, e.idx]
            if dialect.read is not None:
                return dialect.read(site, o, _R, _C)
            r, c = (f"{o.strides[1]}L", f"{o.strides[2]}L") if o.strides is not None else \
                (f"x->{o.arg}_r", f"x->{o.arg}_c")
            return f"x->{o.arg}[{_R} * {r} + {_C} * {c}]"
        if isinstance(e, Unary):
            return f"(-{text(e.x)})"
        if isinstance(e, Binary):
            return f"({text(e.a)} {e.op} {text(e.b)})"
        if isinstance(e, Pow):
            if e.exponent == 0:
                return "((T)1)"
            return dialect.power(text(e.base), e.exponent)
        if isinstance(e, Call):
            return functions[e.fn].format(*[text(a) for a in e.args], s=suf)
        if isinstance(e, Select):
            cond = f"({index_value(e.cond.lhs)} {e.cond.op} {index_value(e.cond.rhs)})"
            return f"({cond} ? {text(e.a)} : {text(e.b)})"
        raise ValueError(f"{site.op}: the kernel cannot evaluate {e!r} in a fusion")

    c = text(op.expr).replace("{", "{{").replace("}", "}}")
    c = c.replace(_X, "{x}").replace(_Y, "{y}")
    c = c.replace(_R, "{" + site.rows + "}").replace(_C, "{" + site.cols + "}")
    ops = tuple(operands.values())
    return Transform(c, tuple(o.arg for o in ops)), ops


def is_value_of(fusion: Epilogue | Prologue) -> Callable[[Access], bool]:
    """The accesses of a fused op that read the transform's value."""
    if isinstance(fusion, Epilogue):
        return lambda a: a.tensor == fusion.contraction
    return lambda a: a.tensor == fusion.main and a.idx == fusion.main_idx


def kernel_transforms(w: Workload, parts: KernelParts, layout_of, dialect: Dialect = C_DIALECT
                      ) -> tuple[dict[str, Transform], tuple[tuple[FusionSite,
                                                                  TransformOperand], ...]]:
    """The transforms of ``parts`` by hook ("prologue_a", "prologue_b", "epilogue"; identity
    where there is no fusion) and every extra array with its site, in argument order."""
    hooks = {"prologue_a": IDENTITY, "prologue_b": IDENTITY, "epilogue": IDENTITY}
    extras = []
    for site, fusion in sites(w, parts):
        second = (lambda a: a.tensor == parts.pair) if site.prefix == "e" and parts.pair \
            else (lambda a: False)
        t, ops = transform_code(w, site, is_value_of(fusion), layout_of, second, dialect)
        hook = "epilogue" if site.prefix == "e" else f"prologue_{site.prefix}"
        hooks[hook] = t
        extras += [(site, o) for o in ops]
    return hooks, tuple(extras)


def _compact_copy(full: np.ndarray, o: TransformOperand, groups, shape3, stage, name: str
                  ) -> np.ndarray:
    """``full`` (one dim per index, in the groups' order) copied over the groups ``o.strides``
    has live (``kernel_fusion.copy_strides``), broadcast as ``shape3`` along the others."""
    live = [s != 0 for s in o.strides] if o.strides is not None else [True] * len(groups)
    dims = [lv for g, lv in zip(groups, live) for _ in g]
    part = full[tuple(slice(None) if lv else 0 for lv in dims)]
    compact = [n if lv else 1 for n, lv in zip(shape3, live)]
    if stage is None:
        copy = np.ascontiguousarray(part).reshape(compact)
    else:
        copy = stage.matrix(name, part, compact)
    return np.broadcast_to(copy, shape3)


def _split_batch(full: np.ndarray, groups, ext: dict[str, int]) -> np.ndarray | None:
    """``full`` (one dim per index, in the groups' order) over the groups split as
    ``kernel_fusion.batch_split`` says (outer batch, inner batch, rows, cols), where its rows
    and cols nest and its batch does not as one dim (a tensor broadcast along part of a
    two-index batch: triangle attention's bias tb[h,j,k] over the logits' (h, i) batch, copied
    whole on every call before: 67 M floats, 0.19 s); None where that does not express it
    either."""
    split = batch_split(groups)
    return None if split is None else _merged(full, [len(g) for g in split])


def _merged(full: np.ndarray, lengths: list[int]) -> np.ndarray | None:
    """``full`` with each run of ``lengths`` consecutive dims merged into one, as a view; None
    where a run's dims do not nest row-major.  Checked on the strides: NumPy's in-place shape
    change that this replaces builds the copy before it refuses (110 us a call for contract4d's
    737 K-element broadcast, two thirds of its epilogue group's overhead)."""
    shape, st, at = [], [], 0
    for n in lengths:
        live = [(full.shape[d], full.strides[d]) for d in range(at, at + n) if full.shape[d] != 1]
        at += n
        if any(sx != sy * ny for (_, sx), (ny, sy) in zip(live, live[1:])):
            return None
        shape.append(math.prod(x for x, _ in live))
        st.append(live[-1][1] if live else 0)
    return np.lib.stride_tricks.as_strided(full, shape, st, writeable=False)


def transform_arrays(w: Workload, extras: tuple[tuple[FusionSite, TransformOperand], ...], env,
                     stage: Staging | None = None, tag: str = "",
                     copied: list | None = None) -> tuple[np.ndarray, ...]:
    """Each extra array of ``env`` (tensor name -> logical array) as a 3-d array over its
    site's index groups: a strided view, broadcast where the tensor lacks an index, or a copy
    (over the groups it has indices in: :func:`_compact_copy`) where its storage nests a
    group's indices otherwise than row-major (into ``stage``'s kept
    matrix, copied over the cores, where there is a stage: a fresh single-threaded copy of
    trimul's ga[i,k,c] stored channel-first, 252 MB, made its epilogue group 1.29 s where
    the model priced 0.28 s with the copy at the cores' transposing rate).  ``copied``: a
    list that gets the name of each tensor copied rather than viewed."""
    out = []
    for n, (site, o) in enumerate(extras):
        op = w.op(site.contraction)
        ext = dict(zip(op.domain, op.extents))
        to_p = dict(site.to_contraction)
        order = [i for g in site.groups for i in g]
        shape3 = [math.prod(ext[i] for i in g) for g in site.groups]
        arr = env[o.tensor]
        it = arr.itemsize
        have = [to_p[i] for i in o.idx]
        full = np.lib.stride_tricks.as_strided(
            arr, [ext[i] for i in order],
            [arr.strides[have.index(i)] if i in have else 0 for i in order], writeable=False)
        view = _merged(full, [len(g) for g in site.groups])
        if view is None:
            view = _split_batch(full, site.groups, ext)
            if view is None:
                if copied is not None:
                    copied.append(o.tensor)
                view = _compact_copy(full, o, site.groups, shape3, stage, f"{tag}:x{n}")
        if o.strides is not None and view.ndim == 3 and any(
                s1 > 1 and st != want * it for s1, st, want in
                zip(shape3, view.strides, o.strides)):
            # the C was written for the candidate's layout: never read another one with it
            raise ValueError(f"{o.tensor}: strides {view.strides} are not the layout's "
                             f"{tuple(x * it for x in o.strides)}")
        out.append(view)
    return tuple(out)
