"""Which index neighbouring GPU threads take in a CUDA loop kernel.

A CUDA loop kernel strides each member's flattened footprint over the block's threads (one
output element a thread, autotune.backends.cuda.codegen).  The index that flattening decodes
first is the one neighbouring threads differ in: a warp's 32 accesses to a tensor touch one
run of memory (one transaction) when that index walks the tensor at unit stride, and up to 32
sectors when it does not.  The loop orders planned for the CPU (search_spaces.footprint) follow
the largest read whatever it is stored like: trimul N=702's heuristic plan had the centre
layer norm's store 492,804 floats apart between neighbouring threads.  A reduction whose largest
read walks the reduced dim at unit stride is the other way round: a warp takes each output
element (:func:`warp_reduced`).
"""
from __future__ import annotations

import math

from .footprint import strides
from .partition import Group
from .workload import Workload


def global_accesses(g: Group, mats, op) -> list[tuple[str, tuple[str, ...]]]:
    """(tensor, the op's index per tensor dim) of a member's reads and writes in global
    memory: everything but the group's other members, which live in shared memory; its own
    output where it is the anchor or is read by another group (``mats``)."""
    local = set(g.members) - {g.anchor}
    out = [(a.tensor, a.idx) for a in op.reads() if a.tensor not in local]
    if op.out == g.anchor or op.out in mats:
        out.append((op.out, op.parallel))
    return out


def thread_order(w: Workload, g: Group, mats, op, par_order: list[str], layout_of,
                 extents: dict[str, int] | None = None) -> list[str]:
    """A member's parallel indices, the thread-fastest last: of its largest global access (read
    or write) that walks any of them, the index it walks at the smallest stride (unit stride
    where the tile spans more than one point of that index: ``extents``, the member's
    footprint per parallel index); ``par_order`` as planned where no access walks one (a
    reduction over the contiguous dim, for one)."""
    ext = extents or {}
    best = None
    for tensor, idx in global_accesses(g, mats, op):
        st = dict(zip(idx, strides(w.shapes[tensor], layout_of(tensor))))
        walked = [i for i in par_order if i in st and ext.get(i, 2) > 1]
        size = math.prod(w.shapes[tensor])
        if walked and (best is None or size > best[0]):
            best = (size, min(walked, key=lambda i: st[i]))
    if best is None:
        return par_order
    return [i for i in par_order if i != best[1]] + [best[1]]


WARP = 32     # lanes a CUDA warp reduction spreads a reduced index over


def warp_reduced(w: Workload, g: Group, op, layout_of, extents: dict[str, int]) -> str | None:
    """The reduced index a CUDA loop kernel spreads over a warp's lanes for member ``op``, or
    None: where the member's largest read (a tensor in its layout, or another member's
    row-major buffer of shape ``extents[member]``) walks a reduced index of extent >= WARP at
    unit stride.  One thread per output element would walk that read with a row's length
    between neighbouring threads (a layer norm's mean over contiguous channels: 32 lines a
    warp load, and on a shared-memory row of 32k floats every thread in one bank); a warp per
    output element reads it in runs of 32 and sums with shuffles."""
    if op.combiner not in ("sum", "max") or not op.reduction:
        return None
    best = None
    for a in op.reads():
        if a.tensor in g.members:
            shape = extents.get(a.tensor)
            if shape is None:
                continue
            st = strides(shape, tuple(range(len(shape))))
        else:
            shape = w.shapes[a.tensor]
            st = strides(shape, layout_of(a.tensor))
        size = math.prod(shape)
        if best is None or size > best[0]:
            best = (size, dict(zip(a.idx, st)))
    if best is None:
        return None
    unit = [r for r in op.reduction if best[1].get(r) == 1 and op.extent(r) >= WARP]
    return unit[0] if unit else None
