"""Fusion into the generated contraction kernel: epilogues and prologues.  Pure: no I/O.

A contraction ``p`` run by the kernel may take its elementwise consumer ``c`` as an
**epilogue**: ``c``'s expression is evaluated on the kernel's accumulator tile after the last K
slice (each read of ``p`` is the accumulator's value, every other tensor ``c`` reads is loaded
at the same element) and the result is stored straight into ``c``'s buffer in ``c``'s layout;
``p`` itself is never stored.  Legal when ``p`` is GEMM-shaped, is no program output and ``c``
is its only consumer, and ``c`` is elementwise over ``p``'s output: no reduction, no where()
condition (the kernel sees flattened rows and columns, not single indices), and every read of
``p`` uses one subscript that names each of ``c``'s indices once (any order: a transposing
consumer is a store in another layout).  The other tensors ``c`` reads are indexed by a subset
of its indices: a bias, a mask, a gate or the other projection.

It may also take the elementwise producer ``q`` of one of its operands as a **prologue**:
``q``'s expression is evaluated on each element as the operand is packed, from a tensor ``q``
reads at every one of its indices (the *main* input, which the kernel packs in the operand's
place) and others it reads at a subset of them (a layer norm's per-row statistics, computed
once per row by their own reduction, and its per-channel scale and shift).  Legal when ``q`` is
no program output, ``p`` is its only consumer and reads it as exactly one of its two operands,
and ``q`` is elementwise without where() conditions.

The fused edges ``q->p`` and ``p->c`` make one group of these ops (anchored at ``c``, or at
``p`` without an epilogue) whose schedule has impl ``kernel`` and the parameters asked for ``p``.
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


@dataclass(frozen=True)
class Prologue:
    """Producer ``producer`` of operand ``operand`` ("a" or "b" of the contraction's GemmForm)
    applied as that operand is packed; the kernel packs ``main`` (read by the producer at
    subscript ``main_idx``, in its own index names) in the operand's place."""
    contraction: str
    producer: str
    operand: str
    main: str
    main_idx: tuple[str, ...]

    def to_contraction(self, w: Workload) -> dict[str, str]:
        """The producer's index names -> the contraction's (same element)."""
        form = gemm_form(w.op(self.contraction))
        read = form.a if self.operand == "a" else form.b
        return dict(zip(w.op(self.producer).parallel, read.idx))


@dataclass(frozen=True)
class KernelParts:
    """What one kernel group runs: its contraction and the fusions around it."""
    contraction: str
    epilogue: Epilogue | None = None
    prologue_a: Prologue | None = None
    prologue_b: Prologue | None = None

    @property
    def members(self) -> tuple[str, ...]:
        return tuple([p.producer for p in (self.prologue_a, self.prologue_b) if p] +
                     [self.contraction] + ([self.epilogue.consumer] if self.epilogue else []))


def _elementwise(op) -> bool:
    return not op.reduction and op.combiner == "none" and not conditions(op.expr)


def _only_consumer(w: Workload, t: str, of: str) -> bool:
    return t not in w.outputs and tuple(w.consumers.get(t, ())) == (of,)


def epilogue_of(w: Workload, p: str, c: str) -> Epilogue | None:
    """The epilogue ``c`` would be for the kernel contraction ``p`` (None where it cannot be
    one: see the module docstring)."""
    if p not in w.producer or c not in w.producer:
        return None
    op_p, op_c = w.op(p), w.op(c)
    if gemm_form(op_p) is None or not _only_consumer(w, p, c) or not _elementwise(op_c):
        return None
    reads = {a.idx for a in accesses(op_c.expr) if a.tensor == p}
    if len(reads) != 1:
        return None
    read = reads.pop()
    if len(set(read)) != len(read) or sorted(read) != sorted(op_c.parallel):
        return None
    return Epilogue(p, c, read)


def prologue_of(w: Workload, q: str, p: str) -> Prologue | None:
    """The prologue ``q`` would be for the kernel contraction ``p`` (None where it cannot be
    one: see the module docstring)."""
    if p not in w.producer or q not in w.producer:
        return None
    op_p, op_q = w.op(p), w.op(q)
    form = gemm_form(op_p)
    if form is None or not _only_consumer(w, q, p) or not _elementwise(op_q):
        return None
    roles = [(r, acc) for r, acc in (("a", form.a), ("b", form.b)) if acc.tensor == q]
    if len(roles) != 1 or len(set(roles[0][1].idx)) != len(roles[0][1].idx):
        return None
    full = [a for a in accesses(op_q.expr)
            if len(set(a.idx)) == len(a.idx) and sorted(a.idx) == sorted(op_q.parallel)]
    if not full:
        return None
    return Prologue(p, q, roles[0][0], full[0].tensor, full[0].idx)


def kernel_parts(w: Workload, fused: set[tuple[str, str]], anchor: str) -> KernelParts:
    """What the kernel group anchored at ``anchor`` runs under the fused edges ``fused``.
    ValueError where the group is no contraction with fusions the kernel can run (a
    hand-written candidate)."""
    epi = None
    p = anchor
    if gemm_form(w.op(anchor)) is None:
        p = next((q for q in w.op(anchor).inputs() if (q, anchor) in fused), None)
        epi = epilogue_of(w, p, anchor) if p is not None else None
        if epi is None:
            raise ValueError(f"{anchor}: no contraction with an epilogue the kernel can run")
    pro = {}
    for q in w.op(p).inputs():
        if (q, p) in fused:
            one = prologue_of(w, q, p)
            if one is None:
                raise ValueError(f"{q}->{p}: no prologue the kernel can run")
            pro[one.operand] = one
    parts = KernelParts(p, epi, pro.get("a"), pro.get("b"))
    inside = set(parts.members)
    if any((x in inside) != (y in inside) for x, y in fused):
        raise ValueError(f"group {{{', '.join(parts.members)}}} fuses more than the kernel "
                         "runs")
    return parts


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
