"""How much of its walk each tile of a masked chain does, and the order its tiles are dealt in.

A where() mask lets a chain skip the blocks it covers (search_spaces.chain_mask), and so makes
its tiles unequal: under a causal mask a tile of late query rows walks every block up to its
rows, a tile of early rows a few.  Dealt one at a time in their natural order, the heaviest
tiles come last and one thread ends the group alone.  Dealt heaviest first, the light ones fill
the gaps (greedy list scheduling).  causal_attention S=2048 (H=8, D=32; the chain in 8 tiles of
256 query rows, blocks of 64, 8 rows a step; 2-core AVX-512 host, one process, 41 interleaved
rounds): natural order 10.97 ms, heaviest first 9.81 ms, the same chain without the mask
17.53 ms (bench/results/causal-order/).

Both the code generator (which prints the order) and the cost model (which prices the slowest
thread) take the work from :func:`chain_tile_work`, so they cannot disagree.
"""
from __future__ import annotations

import functools
import heapq
import math

import numpy as np

from .chain import WALKED, Chain
from .chain_mask import Mask, masks_of, trim_quantum
from .workload import Workload

STEP_SAMPLES = 64        # steps of a tile looked at along one dim (evenly spaced beyond)
ORDER_TABLE_MAX = 4096   # tiles up to which a masked chain prints its dealing order


def _step_boxes(extent: int, tile: int, step: int) -> tuple[np.ndarray, ...]:
    """(tile index, first row, last row, steps of its tile) of the sampled steps along a dim."""
    tid, lo, hi, count = [], [], [], []
    for t in range(-(-extent // tile)):
        b, e = t * tile, min(t * tile + tile, extent)
        starts = np.arange(b, e, step)
        n = len(starts)
        if n > STEP_SAMPLES:
            starts = starts[np.unique(np.round(np.linspace(0, n - 1, STEP_SAMPLES)).astype(int))]
        tid.append(np.full(len(starts), t))
        lo.append(starts)
        hi.append(np.minimum(starts + step, e) - 1)
        count.append(n)
    return np.concatenate(tid), np.concatenate(lo), np.concatenate(hi), np.array(count)


def _covered(mask: Mask, box: dict[str, tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Whether the mask covers each box (index -> arrays of inclusive bounds, broadcast)."""
    d = mask.diff
    lo = hi = d.offset
    for i, k in d.terms:
        a, b = k * box[i][0], k * box[i][1]
        lo, hi = lo + np.minimum(a, b), hi + np.maximum(a, b)
    never = {"<": lo >= 0, "<=": lo > 0, ">": hi <= 0, ">=": hi < 0,
             "==": (lo > 0) | (hi < 0), "!=": (lo == 0) & (hi == 0)}[mask.cond.op]
    always = {"<": hi < 0, "<=": hi <= 0, ">": lo > 0, ">=": lo >= 0,
              "==": (lo == 0) & (hi == 0), "!=": (lo > 0) | (hi < 0)}[mask.cond.op]
    return always if mask.masked_when else never


def chain_tile_work(masks: tuple[Mask, ...], rows: tuple[tuple[str, int, int, int], ...],
                    extent: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, kept) per tile position of a chain's row dims ``rows`` (common name, extent,
    tile, rows a step), arrays shaped by the tiles along each: a tile's steps, and the share of
    its (step, block) pairs of the walk over ``extent`` in blocks of ``block`` that no mask
    covers whole (a step skips a block only where one mask covers all its rows; the code
    generator's test, autotune.backends.chain_loops).  Its walk costs about steps x kept x
    blocks; rows the masks do not read only scale the steps."""
    cond = {i for m in masks for i in m.cond.indices}
    shape = tuple(-(-e // t) for _, e, t, _ in rows)
    steps = np.ones(shape)
    tids, boxes = [], {}
    for k, (name, e, t, s) in enumerate(rows):
        tid, lo, hi, count = _step_boxes(e, t, s)
        steps = steps * count.reshape([-1 if q == k else 1 for q in range(len(rows))])
        if name in cond:
            tids.append((k, tid))
            boxes[name] = (lo, hi)
    if not masks or not tids:
        return steps, np.ones(shape)
    grids = np.meshgrid(*[np.arange(len(t)) for _, t in tids], indexing="ij")
    flat = [g.ravel() for g in grids]
    box = {n: (lo[f][:, None], hi[f][:, None]) for (n, (lo, hi)), f in zip(boxes.items(), flat)}
    jb = np.arange(0, extent, block)
    box[WALKED] = (jb[None, :], np.minimum(jb + block, extent)[None, :] - 1)
    kept_pt = np.empty(len(flat[0]))
    span = max(1, (1 << 22) // len(jb))       # boxes at a time: bounded memory
    for a in range(0, len(kept_pt), span):
        part = {n: (lo[a:a + span], hi[a:a + span]) if n != WALKED else (lo, hi)
                for n, (lo, hi) in box.items()}
        skip = np.zeros((len(part[next(iter(boxes))][0]), len(jb)), bool)
        for m in masks:
            skip |= _covered(m, part)
        kept_pt[a:a + span] = 1.0 - skip.mean(axis=1)
    used_shape = tuple(shape[k] for k, _ in tids)
    pos = np.ravel_multi_index(tuple(t[f] for (_, t), f in zip(tids, flat)), used_shape)
    n = np.bincount(pos, minlength=math.prod(used_shape))
    kept = np.bincount(pos, weights=kept_pt, minlength=len(n)) / np.maximum(n, 1)
    kept = kept.reshape(used_shape)
    kept = kept.reshape([shape[k] if any(k == q for q, _ in tids) else 1
                         for k in range(len(rows))])
    return steps, np.broadcast_to(kept, shape)


def heavy_first(work: np.ndarray, loop_order: list[int]) -> np.ndarray:
    """Flat (row-major) indices of the tiles of ``work`` (one entry per tile) in the order a
    chain deals them: heaviest first, ties in the order of the tile loops (``loop_order``,
    outermost first: search_spaces.footprint.tile_dealing) so that a chunk's neighbours stay
    neighbours."""
    ids = np.arange(work.size).reshape(work.shape).transpose(loop_order).ravel()
    w = work.transpose(loop_order).ravel()
    return ids[np.argsort(-w, kind="stable")]


def dealt_makespan(work: np.ndarray, chunk: int, units: int) -> float:
    """The slowest thread's share when ``work`` (in dealing order) is dealt ``chunk`` tiles at
    a time to ``units`` threads, each taking the next chunk as it finishes (OpenMP's dynamic
    schedule).  Many chunks: the list-scheduling bound (the mean share plus the largest
    chunk's spill), to keep the estimate cheap."""
    sizes = np.add.reduceat(work, np.arange(0, len(work), chunk)) if len(work) else work
    if len(sizes) > 512:
        return float(sizes.sum() / units + sizes.max() * (units - 1) / units)
    ends = [0.0] * units
    for s in sizes:
        heapq.heappush(ends, heapq.heappop(ends) + float(s))
    return max(ends)


@functools.lru_cache(maxsize=512)
def _work(masks: tuple[Mask, ...], dims: tuple[tuple[str, int, int, int], ...], extent: int,
          block: int) -> tuple[np.ndarray, float]:
    steps, kept = chain_tile_work(masks, dims, extent, block)
    work = steps * kept
    work.setflags(write=False)
    return work, float(work.sum() / steps.sum())


def masked_chain_work(w: Workload, chain: Chain, eff: tuple[int, ...], block: int,
                      step_dim: str = "", step: int = 1) -> tuple[np.ndarray, float, float] | None:
    """(work per tile over the chain anchor's tile grid, the share of the walk's points kept,
    the share of its blocks kept), for a chain whose where() masks let it skip blocks and trim
    their covered ends in chunks (search_spaces.chain_mask.trim_quantum; None for one without):
    tiles ``eff`` along the anchor's dims, ``step`` rows at a time along ``step_dim``
    (search_spaces.chain_walk.row_step).  The points count whole chunks (a chunk covered in
    the middle of a block, between two masks, is counted as trimmed though the walk keeps
    it); the blocks price what a block costs whatever its length (the rescale)."""
    masks = masks_of(w, chain)
    if not masks:
        return None
    anchor, common = w.op(chain.anchor), chain.common(chain.anchor)
    dims = tuple((common[i], e, t, step if common[i] == step_dim else 1)
                 for i, e, t in zip(anchor.parallel, anchor.out_shape, eff))
    work, kept = _work(masks, dims, chain.extent, trim_quantum(block))
    return work, kept, _work(masks, dims, chain.extent, block)[1]


def dealing_order(work: np.ndarray, loop_order: list[int]) -> np.ndarray | None:
    """Flat indices of a masked chain's tiles in the order it deals them (heaviest first), or
    None where they go in the order of the tile loops: all alike, or too many to list."""
    if work.size > ORDER_TABLE_MAX or np.ptp(work) <= 1e-9 * work.max():
        return None
    return heavy_first(work, loop_order)


def dealt_share(work: np.ndarray, loop_order: list[int], chunk: int, units: int) -> float:
    """The slowest of ``units`` threads' time over the mean thread's, for a masked chain's
    tiles (``work``: one entry per tile) dealt in its order (:func:`dealing_order`),
    ``chunk`` at a time: 1 for equal shares, ``units / tiles`` and more for too few tiles."""
    order = dealing_order(work, loop_order)
    if order is None:
        order = np.arange(work.size).reshape(work.shape).transpose(loop_order).ravel()
    total = float(work.sum())
    return dealt_makespan(work.ravel()[order], chunk, units) * units / total if total else 1.0
