"""Work per tile of a masked chain (search_spaces.tile_work): the kept share of each tile's
(step, block) pairs against a count over every point, the heaviest-first dealing order, and
the slowest thread's share that the cost model prices."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from search_spaces.chain import WALKED, detect
from search_spaces.chain_mask import masks_of
from search_spaces.tile_work import (chain_tile_work, dealing_order, dealt_makespan,
                                     dealt_share, heavy_first)
from tests.support.chains import CROSS, band, chain_workload, cross


def _count(masks, rows, extent, block):
    """(steps, kept) per tile position by brute force: a step skips a block where one mask's
    condition equals its masked value at every point of the step's rows and the block."""
    shape = tuple(-(-e // t) for _, e, t, _ in rows)
    steps, kept = np.zeros(shape), np.zeros(shape)
    for pos in itertools.product(*[range(n) for n in shape]):
        spans = []
        for (_, e, t, s), p in zip(rows, pos):
            b, end = p * t, min(p * t + t, e)
            spans.append([range(a, min(a + s, end)) for a in range(b, end, s)])
        pairs = skipped = 0
        for step in itertools.product(*spans):
            for jb in range(0, extent, block):
                pairs += 1
                pts = [dict(zip([n for n, *_ in rows], r), **{WALKED: j})
                       for r in itertools.product(*step)
                       for j in range(jb, min(jb + block, extent))]
                skipped += any(all(m.cond.holds(p) is m.masked_when for p in pts)
                               for m in masks)
        steps[pos] = pairs / -(-extent // block)
        kept[pos] = 1 - skipped / pairs
    return steps, kept


@pytest.mark.parametrize("make,tiles", [
    (lambda: cross(h=2, t=13, s=40), ((1, 1), (5, 4), (8, 1))),      # j <= i + 20
    (lambda: band(h=2, s=37), ((2, 1), (10, 3), (4, 1))),             # |i - j| <= 5, two masks
    (lambda: chain_workload(CROSS.replace("j <= i + 20", "j >= i - 3"), ["o"],
                            {"H": 1, "T": 29, "S": 29, "C": 2, "D": 3},
                            {"q": ["H", "T", "C"], "k": ["H", "C", "S"], "v": ["H", "S", "D"]}),
     ((1, 1), (7, 8), (3, 1))),
])
def test_each_tiles_kept_share_counts_the_steps_and_blocks_a_mask_covers(make, tiles):
    # tiles and steps that do not divide the rows, blocks that do not divide the walk
    w = make()
    (chain,) = detect(w).values()
    masks = masks_of(w, chain)
    assert masks
    common = chain.common(chain.anchor)
    anchor = w.op(chain.anchor)
    rows = tuple((common[i], e, t, s) for i, e, (t, s) in zip(anchor.parallel,
                                                              anchor.out_shape, tiles))
    for block in (4, 7, 16):
        steps, kept = chain_tile_work(masks, rows, chain.extent, block)
        want_steps, want_kept = _count(masks, rows, chain.extent, block)
        np.testing.assert_allclose(steps, want_steps)
        np.testing.assert_allclose(kept, want_kept, atol=1e-12)
        assert 0 < kept.min() < kept.max() <= 1         # unequal tiles, some blocks skipped


def test_heaviest_tiles_are_dealt_first_and_balance_two_threads():
    work = np.array([1.0, 3.0, 5.0, 7.0])
    order = heavy_first(work, [0])
    assert order.tolist() == [3, 2, 1, 0]
    # dealt in turn to whichever thread is free: 7 | 5, 5+3 | 7+1 -> 8 each
    assert dealt_makespan(work[order], 1, 2) == 8.0
    assert dealt_makespan(work, 1, 2) == 10.0               # natural order: 1+5 | 3+7
    assert dealt_share(work, [0], 1, 2) == 1.0
    assert dealt_makespan(work[order], 2, 2) == 12.0        # two at a time: 7+5 | 3+1
    # ties keep the loops' order (a chunk's neighbours stay neighbours); dims swapped
    grid = np.array([[1.0, 1.0], [2.0, 2.0]])
    assert heavy_first(grid, [0, 1]).tolist() == [2, 3, 0, 1]
    assert heavy_first(grid, [1, 0]).tolist() == [2, 3, 0, 1]
    assert heavy_first(np.array([[1.0, 2.0], [1.0, 2.0]]), [1, 0]).tolist() == [1, 3, 0, 2]
    # equal tiles, or too many to list: the loops' own order; equal shares but too few
    # tiles for the threads
    assert dealing_order(np.ones(6), [0]) is None
    assert dealing_order(np.arange(5000.0), [0]) is None
    assert dealt_share(np.ones(3), [0], 1, 2) == pytest.approx(4 / 3)


def test_many_chunks_take_the_list_scheduling_bound():
    work = np.full(2000, 2.0)
    work[0] = 50.0
    got = dealt_makespan(work, 1, 2)
    assert work.sum() / 2 <= got <= work.sum() / 2 + 50.0
