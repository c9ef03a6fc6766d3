"""Which contractions a library GEMM can run, and in which layouts it runs them without copies.

A contraction ``out[...] += A[...] * B[...] (* constants)`` maps onto a batched matmul when every
index appears in at least two of A, B and out: batch = A&B&out, M = A&out, N = B&out, K = A&B.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .ir import Access, Op, constant_value
from .footprint import strides


@dataclass(frozen=True)
class GemmForm:
    """Index groups of a contraction seen as ``out[b,m,n] = scale * sum_k A[b,m,k] B[b,k,n]``."""
    a: Access
    b: Access
    batch: tuple[str, ...]
    m: tuple[str, ...]
    n: tuple[str, ...]
    k: tuple[str, ...]
    scale: float


def group_size(op: Op, idx) -> int:
    """The elements a group of ``op``'s indices spans (a GemmForm's batch, m, n or k; 1 for
    an empty group)."""
    return math.prod(op.extent(i) for i in idx)


# gemm_form by the identity of the op asked about, the op kept so its id stays its own: the
# cost model and the space ask about the same few ops hundreds of thousands of times in a
# search (300,000 calls, 9 s at trimul N=702).  Ops are frozen, so the answer cannot go stale.
_FORMS: dict[int, tuple[Op, GemmForm | None]] = {}
_FORMS_MAX = 4096


def gemm_form(op: Op) -> GemmForm | None:
    """``op`` as a (batched) matmul, or None when it is not one."""
    hit = _FORMS.get(id(op))
    if hit is not None and hit[0] is op:
        return hit[1]
    form = _gemm_form(op)
    if len(_FORMS) >= _FORMS_MAX:
        _FORMS.clear()
    _FORMS[id(op)] = (op, form)
    return form


def _gemm_form(op: Op) -> GemmForm | None:
    if not op.is_contraction:
        return None
    scale = 1.0
    accs = []
    for f in op.factors():
        value = constant_value(f)      # a constant factor, folded: 2, 1/S, 1/sqrt(D)
        if value is not None:
            scale *= value
        elif isinstance(f, Access):
            accs.append(f)
        else:
            return None
    if len(accs) != 2:
        return None
    a, b = accs
    out = set(op.parallel)
    sa, sb = set(a.idx), set(b.idx)
    for i in op.domain:
        if (i in sa) + (i in sb) + (i in out) < 2:
            return None
    order = op.domain
    pick = lambda cond: tuple(i for i in order if cond(i))
    return GemmForm(a, b, pick(lambda i: i in sa and i in sb and i in out),
                    pick(lambda i: i in sa and i in out and i not in sb),
                    pick(lambda i: i in sb and i in out and i not in sa),
                    pick(lambda i: i in sa and i in sb and i not in out), scale)


def as_matrix_view(idx: tuple[str, ...], shape: tuple[int, ...], perm: tuple[int, ...],
                   groups: tuple[tuple[str, ...], ...]) -> bool:
    """True if a tensor (indices ``idx``, stored in ``perm`` order) is viewable without a copy
    as a 3-d array over ``groups`` (batch, rows, cols) with one of the last two axes unit-stride.
    """
    st = dict(zip(idx, strides(shape, perm)))
    ext = dict(zip(idx, shape))
    # within a group, indices must be nested row-major in storage
    if not all(nests(g, st, ext) for g in groups):
        return False
    rows, cols = (next((st[i] for i in reversed(g) if ext[i] > 1), 0) for g in groups[1:])
    return rows in (0, 1) or cols in (0, 1)


def nests(group, st: dict, ext: dict) -> bool:
    """Whether the indices of ``group`` (strides ``st``, extents ``ext`` by index) nest
    row-major into one stride, so that one axis of a view walks them all."""
    live = [i for i in group if ext[i] > 1]
    return all(st[x] == st[y] * ext[y] for x, y in zip(live, live[1:]))


def gathered(idx: tuple[str, ...], shape: tuple[int, ...], perm: tuple[int, ...],
             groups: tuple[tuple[str, ...], ...]) -> bool:
    """True where the generated kernel reads a tensor (indices ``idx``, stored in ``perm``
    order) as its (batch, rows, cols) operand over ``groups`` through offset tables (each
    element at its row's offset plus its column's: any layout's address is such a sum): its
    rows or its columns nest into no one stride, so no view expresses it, but its batch does.
    The kernel packs its operands anyway; the tables spare the copy into a matrix that
    :func:`as_matrix_view`'s test otherwise calls for."""
    st = dict(zip(idx, strides(shape, perm)))
    ext = dict(zip(idx, shape))
    return nests(groups[0], st, ext) and not all(nests(g, st, ext) for g in groups[1:])


def staged_run(idx: tuple[str, ...], shape: tuple[int, ...], perm: tuple[int, ...],
               groups: tuple[tuple[str, ...], ...]) -> int:
    """Elements of the innermost run a tensor (indices ``idx``, stored in ``perm`` order) and
    its staged (batch, rows, cols) matrix over ``groups`` (row-major, the groups' indices in
    order: what the executor copies it into where no view expresses it) have in common: the
    copy moves runs of this many contiguous elements on both sides."""
    st = dict(zip(idx, strides(shape, perm)))
    ext = dict(zip(idx, shape))
    run = 1
    for i in reversed([i for g in groups for i in g if ext.get(i, 1) > 1]):
        if st[i] != run:
            break
        run *= ext[i]
    return run


def operand_groups(form: GemmForm, broadcast: str | None = None) -> tuple[tuple, tuple, tuple]:
    """(A groups, B groups, out groups) in matmul order; ``broadcast`` ("a" or "b", from
    :func:`broadcast_form`) names the operand that is one matrix over the form's batch."""
    return ((() if broadcast == "a" else form.batch, form.m, form.k),
            (() if broadcast == "b" else form.batch, form.k, form.n),
            (form.batch, form.m, form.n))


def preferred_perm(idx: tuple[str, ...], groups: tuple[tuple[str, ...], ...]) -> tuple[int, ...]:
    """A storage order that lays a tensor out as its matmul view: batch outermost, then rows
    and cols (or cols and rows: BLAS takes either), whichever disturbs the tensor's own dim
    order least, so neighbouring elementwise groups are more likely to agree with it."""
    best = None
    for order in ((groups[0], groups[1], groups[2]), (groups[0], groups[2], groups[1])):
        perm = tuple(idx.index(i) for g in order for i in g if i in idx)
        inversions = sum(1 for x in range(len(perm)) for y in range(x + 1, len(perm))
                         if perm[x] > perm[y])
        if best is None or inversions < best[0]:
            best = (inversions, perm)
    return best[1]


def broadcast_form(form: GemmForm, op: Op, shapes: dict, layout_of) -> tuple[GemmForm, str] | None:
    """(form, "a" or "b"): the same product with the output's outermost N indices (or M
    indices) as a batch over which the other operand, A (or B), is broadcast, where that makes
    the output and the operand that has them matrix views and the plain form's output is none.

    Why: ``y[n,o,p] += w[o,c] * x[n,c,p]`` (a channel mix in channels-first order) has no batch
    index, since w lacks n; as one (o) x (n, p) GEMM its result is a staged [o, n, p] matrix
    that a transposing pass then copies into y (var_pow: the GEMM 467 us, the copy 283 us a
    call), where a product batched over n, w broadcast, writes y directly (390 us).
    ``layout_of(tensor)`` is the tensor's storage permutation."""
    if form.batch or as_matrix_view(op.parallel, shapes[op.out], layout_of(op.out),
                                    operand_groups(form)[2]):
        return None
    st = dict(zip(op.parallel, strides(shapes[op.out], layout_of(op.out))))
    for side, idx, opnd in (("n", form.n, form.b), ("m", form.m, form.a)):
        order = sorted(idx, key=lambda i: -st[i])          # outermost in the output first
        for p in range(1, len(order)):
            split = replace(form, batch=tuple(order[:p]), **{side: tuple(order[p:])})
            ga, gb, go = operand_groups(split)
            if as_matrix_view(op.parallel, shapes[op.out], layout_of(op.out), go) and \
                    as_matrix_view(opnd.idx, shapes[opnd.tensor], layout_of(opnd.tensor),
                                   gb if side == "n" else ga):
                return split, ("a" if side == "n" else "b")
    return None
