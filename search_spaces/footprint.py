"""Footprints of fused ops inside their anchor's tiles, recompute factors and loop orders.

For one anchor tile, each member op is evaluated over the part of its output that the tile needs:
its footprint.  Footprints are symbolic boxes: each output dim of a member is either the tile of
one anchor parallel dim (``("tile", k)``) or its whole extent (``("full",)``).  A member reached
through a consumer's reduction index (the operands of an einsum) needs that dim in full, so every
tile along the anchor's other free dims recomputes it: that is where recompute comes from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .ir import Op
from .partition import Group
from .workload import Workload

FULL = ("full",)


@dataclass(frozen=True)
class MemberPlan:
    """One member of a group inside one anchor tile."""
    op: str
    footprint: tuple[tuple, ...]   # per output dim: ("tile", k) or FULL
    executions: int                # body evaluations over the whole run
    recompute: float               # executions / own iterations (1.0 = computed once)
    order: tuple[str, ...]         # loop order over the op's domain, outermost first


def tile_sizes(anchor: Op, tiles: tuple[int, ...]) -> tuple[int, ...]:
    """Effective tile per anchor parallel dim (clipped to the extent)."""
    return tuple(min(max(int(t), 1), e) for t, e in zip(tiles, anchor.out_shape))


def n_tiles(anchor: Op, tiles: tuple[int, ...]) -> int:
    return math.prod(math.ceil(e / t) for e, t in zip(anchor.out_shape, tile_sizes(anchor, tiles)))


def footprints(w: Workload, g: Group, tiles: tuple[int, ...]) -> dict[str, tuple[tuple, ...]]:
    """Symbolic footprint of every member's output, per anchor tile."""
    anchor = w.op(g.anchor)
    eff = tile_sizes(anchor, tiles)
    fp: dict[str, tuple[tuple, ...]] = {
        g.anchor: tuple(("tile", k) if eff[k] < anchor.out_shape[k] else FULL
                        for k in range(len(anchor.parallel)))}
    members = set(g.members)
    order = [op.out for op in w.ops if op.out in members]
    for name in reversed(order):
        if name == g.anchor:
            continue
        op = w.op(name)
        dims: list[tuple | None] = [None] * len(op.parallel)
        for c in w.consumers[name]:
            if c not in members:
                continue
            cop = w.op(c)
            for acc in cop.reads():
                if acc.tensor != name:
                    continue
                for m, idx in enumerate(acc.idx):
                    pos = cop.domain.index(idx)
                    got = fp[c][pos] if pos < len(cop.parallel) else FULL
                    dims[m] = got if dims[m] in (None, got) else FULL
        fp[name] = tuple(d if d is not None else FULL for d in dims)
    return fp


def footprint_shape(op: Op, fp: tuple[tuple, ...], anchor: Op, tiles: tuple[int, ...]
                    ) -> tuple[int, ...]:
    eff = tile_sizes(anchor, tiles)
    return tuple(eff[d[1]] if d[0] == "tile" else op.out_shape[m] for m, d in enumerate(fp))


def executions(op: Op, fp: tuple[tuple, ...], anchor: Op, tiles: tuple[int, ...]) -> int:
    """Body evaluations of ``op`` over all anchor tiles (exact, boundary tiles included)."""
    eff = tile_sizes(anchor, tiles)
    used = {d[1] for d in fp if d[0] == "tile"}
    n = 1
    for k, (e, t) in enumerate(zip(anchor.out_shape, eff)):
        if k in used:
            n *= e                       # the tiles of this dim partition it exactly
        elif t < e:
            n *= math.ceil(e / t)        # each tile along it recomputes the whole footprint
    for m, d in enumerate(fp):
        if d[0] != "tile":
            n *= op.out_shape[m]
    for r in op.reduction:
        n *= op.extent(r)
    return n


def strides(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a tensor of logical ``shape`` stored in ``perm`` order (outermost first)."""
    st = [0] * len(shape)
    acc = 1
    for d in reversed(perm):
        st[d] = acc
        acc *= shape[d]
    return tuple(st)


def loop_order(op: Op, dominant_strides: dict[str, int]) -> tuple[str, ...]:
    """Domain indices outermost first: descending stride in the dominant access, so the
    innermost loop walks unit-stride memory (indices absent from it go outermost)."""
    big = 1 << 62
    return tuple(sorted(op.domain, key=lambda i: (-dominant_strides.get(i, big),
                                                   op.domain.index(i))))


def plan_group(w: Workload, g: Group, tiles: tuple[int, ...], layout_of) -> list[MemberPlan]:
    """Footprint, executions, recompute factor and loop order of every member, program order.

    ``layout_of(tensor) -> perm`` gives storage layouts of materialized tensors.
    """
    anchor = w.op(g.anchor)
    fps = footprints(w, g, tiles)
    members = set(g.members)
    out = []
    for op in w.ops:
        if op.out not in members:
            continue
        fp = fps[op.out]
        ex = executions(op, fp, anchor, tiles)
        # the dominant access: the biggest tensor read from memory, else the op's own output
        best, best_size = None, -1
        for acc in op.reads():
            if acc.tensor in members:
                shp = footprint_shape(w.op(acc.tensor), fps[acc.tensor], anchor, tiles)
                st = strides(shp, tuple(range(len(shp))))
            else:
                shp = w.shapes[acc.tensor]
                st = strides(shp, layout_of(acc.tensor))
            size = math.prod(shp)
            if size > best_size:
                best, best_size = {i: s for i, s in zip(acc.idx, st)}, size
        own = strides(op.out_shape, layout_of(op.out)) if op.out == g.anchor else \
            strides(op.out_shape, tuple(range(len(op.parallel))))
        own_size = math.prod(footprint_shape(op, fp, anchor, tiles))
        if best is None or best_size < own_size:
            best = {i: s for i, s in zip(op.parallel, own)}
        out.append(MemberPlan(op.out, fp, ex, ex / op.iterations, loop_order(op, best)))
    return out
