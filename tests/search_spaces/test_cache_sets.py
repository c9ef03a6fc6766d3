"""Cache-set conflicts (``cache_walk.sets_touched`` / ``conflicting``) and the dealing of tiles
(``footprint.tile_dealing``), which the CPU generator and the cost model share."""
from __future__ import annotations

import re

import pytest

from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.cache_walk import LINE_BYTES, conflicting, sets_touched
from search_spaces.footprint import LINE_FEED, MIN_CHUNKS, RUN_ON_BYTES, tile_dealing

from autotune.backends.cpu.codegen import generate
from tests.support.workloads import workload


@pytest.mark.parametrize("stride, trips, sets", [
    (4096, 64, 1),          # 4 KiB apart: one set of L1, however many lines
    (4096, 3, 1),
    (2048, 64, 2),
    (1024, 64, 4),
    (64, 64, 64),           # consecutive lines: every set
    (64, 10, 10),
    (4096 + 64, 64, 64),    # a line more than 4 KiB: the next set each step
    (12, 4096, 64),         # not a power of two: spread
])
def test_sets_touched_by_one_strided_loop_of_l1(stride, trips, sets):
    assert sets_touched(((stride, trips),)) == sets


def test_sets_touched_combines_loops_and_depends_on_the_cache():
    # two loops 4 KiB and 1 KiB apart: 4 sets of L1 between them
    assert sets_touched(((1024, 4), (4096, 8))) == 4
    # a cache of 1,024 sets (a second level): 4 KiB steps reach 16 of them, 64 KiB steps one
    assert sets_touched(((4096, 64),), 1024) == 16
    assert sets_touched(((65536, 64),), 1024) == 1


def test_conflicting_needs_more_lines_than_the_ways_of_the_sets_they_share():
    order = ("j", "i")                         # i innermost
    st = {"i": 1024, "j": 1}                   # 4 KiB rows, walked across the rows
    assert conflicting(st, ("j", "i"), {"i": 64, "j": 8}, 4)           # 64 lines, one set
    assert not conflicting(st, order, {"i": 8, "j": 8}, 4)             # 8 lines: the 8 ways
    assert not conflicting({"i": 1040, "j": 1}, order, {"i": 64, "j": 8}, 4)  # 64 sets
    assert not conflicting({"i": 1024}, order, {"i": 64, "j": 8}, 4)   # no unit-stride index
    # doubles: 512 of them make the same 4 KiB row
    assert conflicting({"i": 512, "j": 1}, order, {"i": 64, "j": 8}, 8)


@pytest.mark.parametrize("eff, perm, expected", [
    # narrow tiles along the contiguous dim go innermost, dealt a line's worth at least; more
    # where their neighbours continue the rows: RUN_ON_BYTES of them, at most a row of tiles
    # and no fewer than MIN_CHUNKS chunks in all
    ((2, 1), (0, 1), ([0, 1], 1024)),    # 4-byte wide tiles: a row of 1,024 tiles a step
    ((2, 4), (0, 1), ([0, 1], 256)),     # 256 chunks of 256
    ((2, 16), (0, 1), ([0, 1], 64)),     # a line wide: 64 a step, 32 lines of 2 rows
    ((1, 8), (1, 0), ([1, 0], 256)),     # column-major: dim 0 is contiguous, its loop innermost
    ((512, 2), (0, 1), ([0, 1], 8)),     # a line's worth: only 512 tiles in all
])
def test_tile_dealing_takes_a_lines_worth_of_narrow_tiles(eff, perm, expected):
    assert tile_dealing((512, 1024), eff, perm, 4) == expected
    assert expected[1] >= min(LINE_BYTES // (eff[perm[-1]] * 4), 1024 // eff[1])


def test_tiles_are_dealt_to_run_on_where_their_neighbours_continue_them():
    # trimul's gate in tiles (1, 2, 128): 1 KiB of each row a tile, 32 tiles make 32 KiB
    assert tile_dealing((702, 702, 128), (1, 2, 128), (0, 1, 2), 4) == ([0, 1, 2], 32)
    assert RUN_ON_BYTES == 32 * 1024
    # tiles of 32 KiB rows already run on
    assert tile_dealing((702, 702, 128), (8, 64, 128), (0, 1, 2), 4) == ([0, 1, 2], 1)
    # the contiguous dim tiled in part and walked outside the tile loop that steps: the
    # neighbours lie a column apart, nothing to continue
    assert tile_dealing((512, 1024), (64, 8), (1, 0), 4) == ([0, 1], 1)
    # few tiles: every thread keeps MIN_CHUNKS chunks to share
    few = tile_dealing((64, 64), (1, 64), (0, 1), 4)
    assert few == ([0, 1], 1) and 64 < MIN_CHUNKS


def test_a_few_narrow_tiles_are_not_dealt_to_one_thread():
    # long_elementwise's rs[b] over b = 3 in tiles of one float: a line's worth would be all
    # three, one core's work; every tile goes on its own
    assert tile_dealing((3,), (1,), (0,), 4) == ([0], 1)
    # 64 tiles of one column: a line's worth (16) would leave 4 chunks; LINE_FEED keeps 16
    assert tile_dealing((8, 64), (8, 1), (0, 1), 4) == ([0, 1], 64 // LINE_FEED)
    # many tiles keep the whole line's worth
    assert tile_dealing((512, 64), (8, 1), (0, 1), 4)[1] >= LINE_BYTES // 4


def test_tile_dealing_of_a_dim_tiled_whole_is_one_at_a_time():
    assert tile_dealing((512, 8), (2, 8), (0, 1), 4) == ([0, 1], 1)
    assert tile_dealing((), (), (), 4) == ([], 1)
    assert LINE_BYTES == 64


@pytest.mark.parametrize("tiles, layout", [((2, 1), (0, 1)), ((64, 8), (1, 0)),
                                           ((2, 4), (0, 1)), ((32, 32), (0, 1))])
def test_the_generated_loop_group_deals_tiles_as_footprint_says(tiles, layout):
    w = workload("y[i,j] = x[i,j] + 1.0\n", {"I": 64, "J": 128}, {"x": ["I", "J"]}, ["y"])
    cand = make_candidate([], {"y": layout}, [GroupSchedule("y", tiles)], "t")
    src, _ = generate(w, cand)
    (chunk,) = re.findall(r"schedule\(dynamic, (\d+)\)", src)
    eff = tuple(min(t, e) for t, e in zip(tiles, (64, 128)))
    assert int(chunk) == tile_dealing((64, 128), eff, layout, 4)[1]
