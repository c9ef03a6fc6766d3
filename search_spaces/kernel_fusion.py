"""Fusion into the generated contraction kernel: epilogues and prologues.  Pure: no I/O.

A contraction ``p`` run by the kernel may take its elementwise consumer ``c`` as an
**epilogue**: ``c``'s expression is evaluated on the kernel's accumulator tile after the last K
slice (each read of ``p`` is the accumulator's value, every other tensor ``c`` reads is loaded
at the same element) and the result is stored straight into ``c``'s buffer in ``c``'s layout;
``p`` itself is never stored.  Legal when ``p`` is GEMM-shaped, is no program output and ``c``
is its only consumer, and ``c`` is elementwise over ``p``'s output: no reduction, where()
conditions only on indices of the kernel's rows and columns (the kernel sees an element's
flattened row and column, from which their indices are recovered, not its batch item's
indices), and every read of
``p`` uses one subscript that names each of ``c``'s indices once (any order: a transposing
consumer is a store in another layout).  The other tensors ``c`` reads are indexed by a subset
of its indices: a bias, a mask, a gate or the other projection.

It may also take the elementwise producer ``q`` of one of its operands as a **prologue**:
``q``'s expression is evaluated on each element as the operand is packed, from a tensor ``q``
reads at every one of its indices (the *main* input, which the kernel packs in the operand's
place) and others it reads at a subset of them (a layer norm's per-row statistics, computed
once per row by their own reduction, and its per-channel scale and shift).  Legal when ``q`` is
no program output, ``p`` is its only consumer and reads it as exactly one of its two operands,
and ``q`` is elementwise, its where() conditions (if any) on indices of the operand's rows
and columns.

An epilogue may read a second contraction ``p2`` besides ``p`` (a **pair**, the "dual GEMM" of
a gated projection: trimul's ``a = mask * sigmoid(ga + b) * (pa + b)``, a SwiGLU's
``silu(x W_gate) * (x W_up)``): both are computed in one kernel over the operand they share, the
other operands interleaved in blocks of half a register tile along the paired index, so that
each tile holds ``p`` and ``p2`` at the same elements and the epilogue combines them before
anything is stored; neither result is ever stored.  Legal when ``c`` is a legal epilogue of
each, they read the same tensor at the same positions as one operand (the *shared* one), their
other operands are distinct tensors of one shape read at the same positions, and their scales
and extents agree (:func:`pair_of`).  Prologues are not taken into a pair.

The fused edges ``q->p`` and ``p->c`` (and ``p2->c``) make one group of these ops (anchored at
``c``, or at ``p`` without an epilogue) whose schedule has impl ``kernel`` and the parameters
asked for ``p``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .footprint import strides
from .gemm import gemm_form
from .ir import accesses, conditions
from .workload import Workload


@dataclass(frozen=True)
class Epilogue:
    """Consumer ``consumer`` fused into the kernel of contraction ``contraction``; ``read``:
    the subscript (``consumer``'s index names) with which it reads the contraction, position
    by position the contraction's own output indices.  ``pair``: the second contraction of a
    pair (empty for none), read at ``pair_read``; ``shared``: which operand ("a" or "b" of
    the contraction's GemmForm) the two have in common."""
    contraction: str
    consumer: str
    read: tuple[str, ...]
    pair: str = ""
    pair_read: tuple[str, ...] = ()
    shared: str = ""

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
    def pair(self) -> str:
        """The pair's second contraction ("" for none)."""
        return self.epilogue.pair if self.epilogue else ""

    @property
    def members(self) -> tuple[str, ...]:
        return tuple([p.producer for p in (self.prologue_a, self.prologue_b) if p] +
                     [self.contraction] + ([self.pair] if self.pair else []) +
                     ([self.epilogue.consumer] if self.epilogue else []))


def _elementwise(op) -> bool:
    return not op.reduction and op.combiner == "none"


def _conditions_fit(op, to_p: dict[str, str], groups) -> bool:
    """Every index a where() condition of ``op`` names is among the kernel's rows or columns
    (``groups``: the contraction's (batch, rows, cols) index groups): the kernel evaluates a
    fusion at a row and a column of the operand it applies to, from which such an index's
    value is recovered (a causal mask ``j <= i`` on attention scores, a diagonal ``i == j``
    on a Gram matrix); a batch index's value is not in reach."""
    seen = set(groups[1]) | set(groups[2])
    return all(to_p.get(i) in seen for c in conditions(op.expr) for i in c.indices)


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
    f = gemm_form(op_p)
    if not _conditions_fit(op_c, dict(zip(read, op_p.parallel)), (f.batch, f.m, f.n)):
        return None
    return Epilogue(p, c, read)


def pair_of(w: Workload, p: str, p2: str, c: str) -> Epilogue | None:
    """The epilogue ``c`` would be for the pair ``p``, ``p2`` (None where they cannot be one:
    see the module docstring)."""
    if p == p2:
        return None
    e1, e2 = epilogue_of(w, p, c), epilogue_of(w, p2, c)
    if e1 is None or e2 is None:
        return None
    op1, op2 = w.op(p), w.op(p2)
    f1, f2 = gemm_form(op1), gemm_form(op2)
    if f1.scale != f2.scale:
        return None
    to1, to2 = e1.to_contraction(w), e2.to_contraction(w)
    ren = {to2[i]: to1[i] for i in w.op(c).parallel}      # p2's index names -> p's
    for shared in ("a", "b"):
        (s1, o1), (s2, o2) = [(f.a, f.b) if shared == "a" else (f.b, f.a) for f in (f1, f2)]
        if s1.tensor != s2.tensor or o1.tensor == o2.tensor or len(s1.idx) != len(s2.idx) \
                or w.shapes[o1.tensor] != w.shapes[o2.tensor]:
            continue
        r = dict(ren)
        if any(r.setdefault(j, i) != i for i, j in zip(s1.idx, s2.idx)):
            continue                   # the shared tensor read at other positions
        if any(j not in r for j in o2.idx) or tuple(r[j] for j in o2.idx) != o1.idx:
            continue
        if any(op2.extent(j) != op1.extent(i) for j, i in r.items()):
            continue
        return Epilogue(p, c, e1.read, p2, e2.read, shared)
    return None


def pair_operands(w: Workload, epi: Epilogue):
    """A pair's two non-shared operands (the first contraction's read, the second's) and
    their role in the GemmForm ("a" or "b"): what the executor interleaves."""
    role = "b" if epi.shared == "a" else "a"
    f1, f2 = gemm_form(w.op(epi.contraction)), gemm_form(w.op(epi.pair))
    return getattr(f1, role), getattr(f2, role), role


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
    role, read = roles[0]
    groups = (form.batch, form.m, form.k) if role == "a" else (form.batch, form.k, form.n)
    if not _conditions_fit(op_q, dict(zip(op_q.parallel, read.idx)), groups):
        return None
    return Prologue(p, q, role, full[0].tensor, full[0].idx)


def kernel_parts(w: Workload, fused: set[tuple[str, str]], anchor: str) -> KernelParts:
    """What the kernel group anchored at ``anchor`` runs under the fused edges ``fused``.
    ValueError where the group is no contraction with fusions the kernel can run (a
    hand-written candidate)."""
    epi = None
    p = anchor
    if gemm_form(w.op(anchor)) is None:
        into = [q for q in w.op(anchor).inputs() if (q, anchor) in fused]
        p = into[0] if into else None
        epi = (epilogue_of(w, p, anchor) if len(into) == 1 else
               pair_of(w, into[0], into[1], anchor) if len(into) == 2 else None)
        if epi is None:
            raise ValueError(f"{anchor}: no contraction with an epilogue the kernel can run")
    pro = {}
    for q in w.op(p).inputs():
        if (q, p) in fused:
            if epi is not None and epi.pair:
                raise ValueError(f"{q}->{p}: a pair takes no prologue")
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


def batch_split(groups: tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...] | None:
    """``groups`` (batch, rows, cols) with the batch split before its last index: (outer
    batch, inner batch, rows, cols), how the generated kernel reads an extra array whose batch
    does not nest as one dim (two batch strides: item b at b / inner and b % inner).  None
    for a batch of fewer than two indices."""
    return (groups[0][:-1], groups[0][-1:], *groups[1:]) if len(groups[0]) >= 2 else None


def group_strides(idx: tuple[str, ...], shape: tuple[int, ...], perm: tuple[int, ...],
                  groups: tuple[tuple[str, ...], ...], ext: dict[str, int]
                  ) -> tuple[int, ...] | None:
    """Element strides of a tensor (subscript ``idx``, stored in ``perm`` order) seen as one
    dim per index group of ``groups`` (batch, rows, cols): 0 along what it lacks (a broadcast).
    None where a group's indices are not nested row-major in its storage (the CPU executor
    then copies it over the groups it has indices in first: :func:`copy_strides`)."""
    st = dict(zip(idx, strides(shape, perm)))
    out = []
    for g in groups:
        live = [i for i in g if ext[i] > 1]
        for x, y in zip(live, live[1:]):
            if st.get(x, 0) != st.get(y, 0) * ext[y]:
                return None
        out.append(st.get(live[-1], 0) if live else 0)
    return tuple(out)


def copy_strides(idx: tuple[str, ...], groups: tuple[tuple[str, ...], ...],
                 ext: dict[str, int]) -> tuple[int, ...]:
    """Element strides over ``groups`` (batch, rows, cols) of the copy the CPU executor makes
    of an extra array no strided view expresses (read at ``idx``, contraction index names):
    row-major over the groups in which it reads a live index, 0 (a broadcast) along the
    others.  A tensor broadcast along whole groups is so copied over the rest only: contract4d's
    scale s[f] beside its (a, b) x (e, f) product, E*F elements where a copy of the whole C
    (737 K) priced its epilogue out of the search."""
    live = [any(i in idx and ext[i] > 1 for i in g) for g in groups]
    out, inner = [], 1
    for g, lv in reversed(list(zip(groups, live))):
        out.append(inner if lv else 0)
        inner *= math.prod(ext[i] for i in g) if lv else 1
    return tuple(reversed(out))


def extra_strides(idx: tuple[str, ...], shape: tuple[int, ...], perm: tuple[int, ...],
                  groups: tuple[tuple[str, ...], ...], ext: dict[str, int]
                  ) -> tuple[tuple[int, ...] | None, bool]:
    """How the kernel reads a tensor a fusion reads besides its value (subscript ``idx`` in
    contraction index names, stored in ``perm`` order) over ``groups`` (batch, rows, cols), and
    whether the CPU executor copies it first: its own strides where they nest (not copied);
    None where they nest only with the batch split before its last index (:func:`batch_split`:
    two batch strides, read at run time; not copied); else its copy's (:func:`copy_strides`).
    One rule for the kernel's C, the executor and the cost model."""
    st = group_strides(idx, shape, perm, groups, ext)
    if st is not None:
        return st, False
    split = batch_split(groups)
    if split is not None and group_strides(idx, shape, perm, split, ext) is not None:
        return None, False
    return copy_strides(idx, groups, ext), True

