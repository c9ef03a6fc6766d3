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

from .cache_walk import LINE_BYTES, REUSE_BYTES, VECTOR_LANES, inner_nest
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


def streaming_order(op: Op, order: tuple[str, ...], dominant: dict[str, int],
                    extents: dict[str, int], item: int, dominant_bytes: int) -> tuple[str, ...]:
    """``order`` with the indices the dominant access lacks moved from outermost to just
    outside the innermost loop, in a contraction that streams a dominant operand of memory
    past the caches (``dominant_bytes`` at least :data:`STREAM_BYTES`) for a few result rows
    (those indices' trip counts at most :data:`VECTOR_LANES`, their rows within the
    first-level cache): each step of the reduction then reads the dominant operand's line once
    for all of them, where outermost they re-read the whole operand once each.

    Why: a decoding step's h[t,f] += xn[t,c] * w1[c,f] (4 tokens, a 768 x 3072 weight) walked
    t outermost, reading the 9.4 MB weight four times (615-856 us a group, about the library
    GEMM's 600-690 us at these shapes); walking t inside c reads it once: 369-463 us.  Why
    only then: soft_kmeans's s[k,c] += r[n,k] * x[n,c] (a 512 KB x, 64 ks) ran 4.3x slower
    with its 64 ks inside n."""
    absent = [i for i in order if i not in dominant]
    if not op.reduction or not absent or len(absent) == len(order) \
            or order[:len(absent)] != tuple(absent):
        return order
    few = math.prod(extents[i] for i in absent)
    if dominant_bytes < STREAM_BYTES or few > VECTOR_LANES \
            or few * extents[order[-1]] * item > REUSE_BYTES:
        return order
    present = order[len(absent):]
    return present[:-1] + tuple(absent) + present[-1:]


def item_bytes(w: Workload) -> int:
    """Bytes of one element of ``w``'s dtype."""
    return 4 if w.dtype == "float32" else 8


# An operand of memory at least this large does not stay in a core's second-level cache
# (512 KiB on the development host's Zen cores) between two passes over it.
STREAM_BYTES = 1 << 20
RUN_ON_BYTES = 32 * 1024   # a thread's contiguous walk of an output before its next tile
MIN_CHUNKS = 256           # chunks of tiles a loop group keeps at least (threads to feed)
LINE_FEED = 16             # chunks a line's worth of narrow tiles leaves at least


def nest_extents(op: Op, fshape: tuple[int, ...]) -> dict[str, int]:
    """Trip counts of ``op``'s loops inside one tile: its footprint ``fshape`` along its
    parallel indices, the full extent along its reductions."""
    return {**dict(zip(op.parallel, fshape)), **{r: op.extent(r) for r in op.reduction}}


def tile_dealing(out_shape: tuple[int, ...], eff: tuple[int, ...], perm: tuple[int, ...],
                 item: int) -> tuple[list[int], int]:
    """(a loop group's tile loops in order, outermost first; tiles a thread takes at a time),
    for an anchor of ``out_shape`` stored in ``perm`` order, tiles ``eff`` (effective sizes).

    Tiles narrower than a cache line along the anchor's contiguous dim share its lines with
    their neighbours there: dealt one at a time, two threads write the same lines and pass
    them back and forth.  So that dim's tile loop goes innermost and a thread takes a line's
    worth of neighbours at once.  Measured on 2 cores, out[i,j,z] = po + b, 128^3 floats:
    tiles (2,8,4) 6.6 ms one at a time, 1.25 ms four at a time (0.5 ms with whole rows);
    (32,4,16): 2.3 -> 0.55 ms.  Never so few chunks (LINE_FEED) that cores idle: few tiles do
    much work each (long_elementwise's rs[b] += out[b,t,c], b = 3, ran on one core)."""
    nd = len(out_shape)
    if nd == 0:
        return [], 1
    ntile = [-(-e // t) for e, t in zip(out_shape, eff)]
    kc = perm[-1]
    width = eff[kc] * item
    if ntile[kc] == 1 or width >= LINE_BYTES:
        order, chunk = list(range(nd)), 1
    else:
        order = [k for k in range(nd) if k != kc] + [kc]
        chunk = min(ntile[kc], -(-LINE_BYTES // width), -(-math.prod(ntile) // LINE_FEED))
    return order, max(chunk, _run_on_chunk(out_shape, eff, perm, item, order, ntile))


def _run_on_chunk(out_shape, eff, perm, item: int, order, ntile) -> int:
    """Tiles a thread takes at once so that its walk of the anchor's output runs on for
    RUN_ON_BYTES: neighbours along the innermost tile loop continue each other's contiguous
    runs only when that loop's dim is the first in storage order (from the innermost) that a
    tile does not cover whole.  Why: tiles dealt one at a time alternate between the threads,
    and each thread's streams start over at every tile (the prefetchers ramp up again).  Two
    cores, y = a * b + 1 over 63 M floats in tiles of 256 / 1,024 / 4,096 / 8,192 / 89,856
    floats dealt one at a time: 72 / 40 / 28 / 26 / 25 ms; trimul's gate out = sigmoid(go + b)
    * (po + b) in tiles (1, 2, 128): 98 ms, (1, 64, 128): 41 ms, whole rows: 37 ms."""
    live = [k for k in order if ntile[k] > 1]
    if not live:
        return 1
    k, run = live[-1], 1
    for d in reversed(perm):
        if d == k:
            run *= eff[d]
            break
        if eff[d] < out_shape[d]:
            return 1            # a partial dim inside k's: neighbours along k lie apart
        run *= out_shape[d]
    want = -(-RUN_ON_BYTES // (run * item))
    return max(1, min(want, ntile[k], math.prod(ntile) // MIN_CHUNKS))


def accumulates_in_tile(op: Op, layout_of, inner: str) -> bool:
    """Whether a group's anchor ``op`` with ``inner`` innermost accumulates in a per-thread
    tile buffer stored once at the end, rather than in its output: a sum or max whose layout
    walks the innermost (parallel) index with a stride (the CPU generator's ``staged``)."""
    if op.combiner not in ("sum", "max") or inner not in op.parallel:
        return False
    return strides(op.out_shape, layout_of(op.out))[op.parallel.index(inner)] != 1


def writes_in_place(g: Group, op: Op, layout_of, inner: str) -> bool:
    """Whether ``op``'s loop nest, ``inner`` innermost, writes straight into its output in its
    layout: the group's anchor, unless it accumulates in a tile buffer (fused members always
    write row-major tile buffers)."""
    return op.out == g.anchor and not accumulates_in_tile(op, layout_of, inner)


def write_strides(w: Workload, g: Group, op: Op, fp: tuple[tuple, ...], anchor: Op,
                  tiles: tuple[int, ...], layout_of, inner: str) -> dict[str, int]:
    """Element strides, by parallel index, of what ``op``'s loop nest writes when ``inner`` is
    its innermost loop: a fused member's row-major tile buffer; the anchor's output in its
    layout, or the tile buffer it accumulates in (:func:`writes_in_place`)."""
    if writes_in_place(g, op, layout_of, inner):
        return dict(zip(op.parallel, strides(op.out_shape, layout_of(op.out))))
    local = strides(footprint_shape(op, fp, anchor, tiles), tuple(range(len(op.parallel))))
    return dict(zip(op.parallel, local))



def plan_group(w: Workload, g: Group, tiles: tuple[int, ...], layout_of) -> list[MemberPlan]:
    """Footprint, executions, recompute factor and loop order of every member, program order.

    ``layout_of(tensor) -> perm`` gives storage layouts of materialized tensors.
    """
    anchor = w.op(g.anchor)
    fps = footprints(w, g, tiles)
    members = set(g.members)
    item = item_bytes(w)
    out = []
    for op in w.ops:
        if op.out not in members:
            continue
        fp = fps[op.out]
        ex = executions(op, fp, anchor, tiles)
        # the dominant access: the biggest tensor read from memory, else the op's own output
        best, best_size = None, -1
        reads = []
        for acc in op.reads():
            if acc.tensor in members:
                shp = footprint_shape(w.op(acc.tensor), fps[acc.tensor], anchor, tiles)
                st = strides(shp, tuple(range(len(shp))))
            else:
                shp = w.shapes[acc.tensor]
                st = strides(shp, layout_of(acc.tensor))
            reads.append(({i: s for i, s in zip(acc.idx, st)}, acc.tensor not in members,
                          math.prod(shp)))
            if reads[-1][2] > best_size:
                best, best_size = reads[-1][0], reads[-1][2]
        own = strides(op.out_shape, layout_of(op.out)) if op.out == g.anchor else \
            strides(op.out_shape, tuple(range(len(op.parallel))))
        fshape = footprint_shape(op, fp, anchor, tiles)
        # the dominant operand's bytes where it is a tensor of memory (0: the op's own output
        # or a member's buffer)
        dom_bytes = best_size * item if any(glob and st is best for st, glob, _ in reads) \
            else 0
        if best is None or best_size < math.prod(fshape):
            best, dom_bytes = {i: s for i, s in zip(op.parallel, own)}, 0
        extents = nest_extents(op, fshape)
        order = streaming_order(op, loop_order(op, best), best, extents, item, dom_bytes)
        largest = max([size for *_, size in reads] + [math.prod(fshape)])
        order = inner_nest(op, [(st, glob and 8 * size < largest, glob)
                                for st, glob, size in reads],
                           lambda i: write_strides(w, g, op, fp, anchor, tiles, layout_of, i),
                           order, extents, item,
                           lambda i: writes_in_place(g, op, layout_of, i))
        out.append(MemberPlan(op.out, fp, ex, ex / op.iterations, order))
    return out
