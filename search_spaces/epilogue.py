"""Epilogue fusion into the generated contraction kernel.  Pure: no I/O.

A contraction ``p`` run by the kernel may take its elementwise consumer ``c`` as an epilogue:
``c``'s expression is evaluated on the kernel's accumulator tile after the last K slice (each
read of ``p`` is the accumulator's value, every other tensor ``c`` reads is loaded at the same
element) and the result is stored straight into ``c``'s buffer in ``c``'s layout; ``p`` itself
is never stored.  The fused edge ``p->c`` makes a group of exactly these two ops, anchored at
``c``, whose schedule has impl ``kernel`` and the kernel parameters asked for ``p``.

Legal when ``p`` is GEMM-shaped, is no program output and ``c`` is its only consumer (nothing
else needs ``p`` in memory), and ``c`` is elementwise over ``p``'s output: no reduction, no
where() condition (the kernel sees flattened rows and columns, not single indices), and every
read of ``p`` uses one subscript that names each of ``c``'s indices once (any order: a
transposing consumer is a store in another layout).  The other tensors ``c`` reads are indexed
by a subset of its indices: a bias, a mask, a gate or the other projection.
"""
from __future__ import annotations

from dataclasses import dataclass

from .footprint import strides
from .gemm import gemm_form
from .ir import accesses, conditions
from .workload import Workload


@dataclass(frozen=True)
class Epilogue:
    """Consumer ``consumer`` fused into the kernel of contraction ``contraction``; ``read``:
    the subscript (``consumer``'s index names) with which it reads the contraction, position
    by position the contraction's own output indices."""
    contraction: str
    consumer: str
    read: tuple[str, ...]

    def to_contraction(self, w: Workload) -> dict[str, str]:
        """The consumer's index names -> the contraction's (same element)."""
        return dict(zip(self.read, w.op(self.contraction).parallel))


def epilogue_of(w: Workload, p: str, c: str) -> Epilogue | None:
    """The epilogue ``c`` would be for the kernel contraction ``p`` (None where it cannot be
    one: see the module docstring)."""
    if p not in w.producer or c not in w.producer:
        return None
    op_p, op_c = w.op(p), w.op(c)
    if gemm_form(op_p) is None or p in w.outputs or tuple(w.consumers.get(p, ())) != (c,):
        return None
    if op_c.reduction or op_c.combiner != "none" or conditions(op_c.expr):
        return None
    reads = {a.idx for a in accesses(op_c.expr) if a.tensor == p}
    if len(reads) != 1:
        return None
    read = reads.pop()
    if len(set(read)) != len(read) or sorted(read) != sorted(op_c.parallel):
        return None
    return Epilogue(p, c, read)


def kernel_parts(w: Workload, fused: set[tuple[str, str]], anchor: str
                 ) -> tuple[str, Epilogue | None]:
    """The contraction that the kernel group anchored at ``anchor`` runs (under the fused
    edges ``fused``), and its epilogue (None for a contraction alone).  ValueError where the
    group is neither (a hand-written candidate)."""
    if gemm_form(w.op(anchor)) is not None:
        return anchor, None
    p = next((q for q in w.op(anchor).inputs() if (q, anchor) in fused), None)
    epi = epilogue_of(w, p, anchor) if p is not None else None
    if epi is None or any(c == anchor and q != p for q, c in fused) \
            or any(q == anchor for q, _ in fused):
        raise ValueError(f"{anchor}: no contraction with an epilogue the kernel can run")
    return p, epi


def group_strides(idx: tuple[str, ...], shape: tuple[int, ...], perm: tuple[int, ...],
                  groups: tuple[tuple[str, ...], ...], ext: dict[str, int]
                  ) -> tuple[int, ...] | None:
    """Element strides of a tensor (subscript ``idx``, stored in ``perm`` order) seen as one
    dim per index group of ``groups`` (batch, rows, cols): 0 along what it lacks (a broadcast).
    None where a group's indices are not nested row-major in its storage (the executor then
    copies it into a broadcastable array first)."""
    st = dict(zip(idx, strides(shape, perm)))
    out = []
    for g in groups:
        live = [i for i in g if ext[i] > 1]
        for x, y in zip(live, live[1:]):
            if st.get(x, 0) != st.get(y, 0) * ext[y]:
                return None
        out.append(st.get(live[-1], 0) if live else 0)
    return tuple(out)
