"""Symmetric products: a contraction of a tensor with itself, ``g[p,q] += x[k,p] * x[k,q]``,
whose result is the same with its two free indices swapped (a Gram matrix, a covariance, the
normal equations' J^T J), so half of it is arithmetic done twice.

The generated kernel computes such a product's register tiles on and above the diagonal only,
each storing its elements' mirror images below (autotune.backends.cpu.gemm_driver); the cost
model prices the tiles it computes and those stores (costmodel.kernel_cost).  One rule for
both, here, so that what runs and what is predicted agree.

Legality comes from the op alone: both factors read one tensor, through accesses that differ
only in one free index each (``p`` in one where the other has ``q``, at the same position),
of equal extents; every other index (batch, contracted) is read alike by both, and constant
factors may scale the product.  Swapping ``p`` and ``q`` then maps the two factors onto each
other, and their product commutes exactly, so the two triangles are equal to the bit (the
same products summed in the same order).  An epilogue keeps it where its expression is the same
with the two indices swapped (the product read at either order, the other tensors' reads
exchanged, sums and products in any order: a cosine similarity's ``g[i,j] * r[i] * r[j]``),
and the mirror images are the epilogue's results; a prologue may break it, and a pair computes
two products in one tile.
"""
from __future__ import annotations

from .gemm import gemm_form, group_size
from .ir import Access, Binary, Call, Const, Op, Pow, Unary

# Below this contraction depth the mirror images' stores (a scalar copy an element, about 1 ns)
# cost about what the arithmetic they save does (2 K flops an element).  Measured (x x^T, 1000
# x 1000, the kernel alone, 2-core Xeon, 11 interleaved rounds): one triangle against the whole
# product 0.87-1.08x at K = 96 (by register tile), 0.87x at 128, 0.72x at 256, 0.68x at 512.
SYM_MIN_K = 128


def symmetric_pair(op: Op) -> tuple[str, str] | None:
    """The free indices ``(p, q)`` that ``op``'s result is symmetric under, or None: the
    kernel's m and n (each a single index of the op's GEMM form)."""
    form = gemm_form(op)
    if form is None or form.a.tensor != form.b.tensor or len(form.m) != 1 or len(form.n) != 1:
        return None
    p, q = form.m[0], form.n[0]
    if op.extent(p) != op.extent(q) or len(form.a.idx) != len(form.b.idx):
        return None
    swap = {p: q, q: p}
    if tuple(swap.get(i, i) for i in form.a.idx) != form.b.idx:
        return None
    return p, q


def symmetric_kernel(w, parts) -> bool:
    """Whether the kernel group of ``parts`` (a :class:`~search_spaces.kernel_fusion.
    KernelParts`) computes one triangle of its result and copies it: a symmetric contraction
    of depth at least :data:`SYM_MIN_K`, without prologue or pair, whose epilogue (if any) is
    the same with the two indices swapped."""
    if parts.prologue_a is not None or parts.prologue_b is not None or parts.pair:
        return False
    op = w.op(parts.contraction)
    pair = symmetric_pair(op)
    if pair is None or group_size(op, gemm_form(op).k) < SYM_MIN_K:
        return False
    epi = parts.epilogue
    if epi is None:
        return True
    # the consumer's names of the two indices; its reads of the product are symmetric in the
    # positions that hold them
    back = {c: i for i, c in epi.to_contraction(w).items()}
    if pair[0] not in back or pair[1] not in back:
        return False
    swap = {back[pair[0]]: back[pair[1]], back[pair[1]]: back[pair[0]]}
    spots = (op.parallel.index(pair[0]), op.parallel.index(pair[1]))
    x = w.op(epi.consumer).expr
    same = _canon(x, {}, parts.contraction, spots)
    return same is not None and same == _canon(x, swap, parts.contraction, spots)


def _canon(e, swap: dict, product: str, spots: tuple[int, int]):
    """``e`` with its indices renamed by ``swap``, as a form that equal expressions share:
    sums and products flattened and ordered, reads of ``product`` at either order of its two
    symmetric positions ``spots`` alike; None for what it does not know (a condition on
    indices, whose swap this does not follow)."""
    if isinstance(e, Const):
        return ("c", e.value)
    if isinstance(e, Access):
        idx = tuple(swap.get(i, i) for i in e.idx)
        if e.tensor == product:
            flip = list(idx)
            flip[spots[0]], flip[spots[1]] = idx[spots[1]], idx[spots[0]]
            idx = min(idx, tuple(flip))
        return ("t", e.tensor, idx)
    if isinstance(e, Binary) and e.op in ("+", "*"):
        terms = []
        for t in _chain(e, e.op):
            c = _canon(t, swap, product, spots)
            if c is None:
                return None
            terms.append(c)
        return (e.op, tuple(sorted(terms, key=repr)))
    kids = {Unary: lambda: (e.x,), Binary: lambda: (e.a, e.b), Pow: lambda: (e.base,),
            Call: lambda: e.args}.get(type(e))
    if kids is None:
        return None
    out = [_canon(k, swap, product, spots) for k in kids()]
    if any(c is None for c in out):
        return None
    if isinstance(e, Call) and e.fn in ("max", "min"):
        out = sorted(out, key=repr)
    tag = {Unary: lambda: e.op, Binary: lambda: e.op, Pow: lambda: e.exponent,
           Call: lambda: e.fn}[type(e)]()
    return (type(e).__name__, tag, tuple(out))


def _chain(e, op: str) -> list:
    """The operands of a chain of one associative operator (``a * b * c``), flattened."""
    if isinstance(e, Binary) and e.op == op:
        return _chain(e.a, op) + _chain(e.b, op)
    return [e]


def computed_share(m: int, mr: int, nr: int) -> float:
    """The share of an ``m`` x ``m`` result's register tiles (``mr`` x ``nr``) the kernel
    computes when it skips those wholly below the diagonal: a row panel from row ``r`` on
    computes the columns from the panel ``r // nr`` on."""
    if m <= 0:
        return 1.0
    done = sum(m - min(m, (r // nr) * nr) for r in range(0, m, mr))
    return done / (-(-m // mr) * m)
