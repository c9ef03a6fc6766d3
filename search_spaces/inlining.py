"""Fused members a loop group computes inside their one reader's expression.  Pure: no I/O.

A loop group evaluates each fused member over its footprint into a per-thread tile buffer, which
its readers then load.  A member read exactly once in the group, by a reader that visits each of
its elements once, needs no buffer: its expression can be evaluated where the reader loads it
(the same arithmetic, the same number of times), and a chain of such members becomes one
expression.  The buffer's stores and loads go: a 4-D broadcast sum reduced by a max
(``o[i,j,k,l] = a[i,j] * b[k,l] + c[j,l]``, ``z[i,k] max= o``) kept a 70 KB buffer per tile and
ran 2.6-3.0 ms; inlined, 1.74 ms (one core's C, the same tiles, 30 calls each).

A member ``m`` is inlined when:

* it is elementwise (no reduction of its own), not the anchor and not materialized (every one
  of its readers is in the group);
* the group reads it in exactly one access, whose subscript names every index of the reader's
  domain once: so each evaluation serves one of the reader's iterations, never several (a
  broadcast read, ``o[t,c] += g[t,f] * w[f,c]`` with ``g`` elementwise, would evaluate ``g`` once
  per ``c`` instead of once);
* its own reads, seen from the reader's loops, walk no new stride: every tensor it reads is
  either constant along the reader's innermost index or contiguous along it, so the reader's
  innermost loop vectorises as it did over the buffer.
"""
from __future__ import annotations

from .footprint import MemberPlan, strides
from .ir import Access, accesses, rename
from .partition import Group
from .workload import Workload


def inlined_members(w: Workload, g: Group, plans: list[MemberPlan], mats: set[str],
                    layout_of) -> frozenset[str]:
    """The members of the loop group ``g`` (its ``plans``, program order) evaluated inside their
    reader's expression; ``layout_of(tensor) -> perm`` the storage layouts."""
    reads: dict[str, list[tuple[str, Access]]] = {}
    for mp in plans:
        for acc in w.op(mp.op).reads():
            reads.setdefault(acc.tensor, []).append((mp.op, acc))
    order = {mp.op: mp.order for mp in plans}
    # program order backwards: a member inlined into an inlined reader is judged from the loops
    # that finally evaluate it (each op names its indices d0, d1, ..., so a member's names are
    # mapped through its reader's onto those loops' names)
    final: dict[str, tuple[dict[str, str], tuple[str, ...]]] = {}   # the inlined ones
    for mp in reversed(plans):
        m, op = mp.op, w.op(mp.op)
        if m == g.anchor or m in mats or op.combiner != "none":
            continue
        uses = reads.get(m, [])
        if len(uses) != 1:
            continue
        reader, acc = uses[0]
        rop = w.op(reader)
        if len(set(acc.idx)) != len(acc.idx) or set(acc.idx) != set(rop.domain):
            continue
        to_loops, loops = final.get(reader, ({i: i for i in rop.domain}, order[reader]))
        mapping = {p: to_loops[i] for p, i in zip(op.parallel, acc.idx)}
        if all(_unit_or_absent(w, a, loops[-1], g, layout_of)
               for a in accesses(rename(op.expr, mapping))):
            final[m] = (mapping, loops)
    return frozenset(final)


def _unit_or_absent(w: Workload, a: Access, inner: str, g: Group, layout_of) -> bool:
    """Whether ``a`` is constant along ``inner`` or walks it with stride 1 (a member's tile
    buffer is row-major: only its last subscript is contiguous)."""
    if inner not in a.idx:
        return True
    pos = a.idx.index(inner)
    if a.tensor in g.members:
        return pos == len(a.idx) - 1
    return strides(w.shapes[a.tensor], layout_of(a.tensor))[pos] == 1
