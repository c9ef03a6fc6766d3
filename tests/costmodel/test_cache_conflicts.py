"""Two loop-group terms of the analytic model: stores whose lines crowd into a few cache sets
(``footprint.conflicting``), and the per-tile overhead paid once per chunk of tiles a thread
takes (``rates.tile_overhead_s``)."""
from __future__ import annotations

import dataclasses

import costmodel
from costmodel.devices import CPU_DEFAULT
from costmodel.rates import RUN_FLOPS, tile_overhead_s
from search_spaces.candidate import GroupSchedule, make_candidate
from tests.support.workloads import workload

DEV = CPU_DEFAULT


def _transposing_add_s(cols: int, tiles=(64, 8)) -> float:
    """Seconds per element of y[i,j] = x[i,j] + 1 with x column-major, y row-major of ``cols``
    columns: the walk goes down x's columns, so each store strides a row of y."""
    w = workload("y[i,j] = x[i,j] + 1.0\n", {"I": 512, "J": cols}, {"x": ["I", "J"]}, ["y"])
    cand = make_candidate([], {"x": (1, 0)}, [GroupSchedule("y", tiles)], "t")
    (g,) = costmodel.estimate(w, cand, DEV).groups
    return g.predicted_s / (512 * cols)


def test_stores_four_kib_apart_turn_the_walk_and_the_model_prices_the_turned_one():
    # 1,024 floats a row: walking down x's columns would put the 64 rows of a tile in one set of
    # L1 (measured: gelu_mlp's bias add, 9 ns an element); the walk goes along the rows instead
    # (cache_walk.inner_nest: a crowded walk counts as far), gathering x's column-major rows
    # within L1, and the model prices that walk: about what 1,040 columns cost
    crowded, spread = _transposing_add_s(1024), _transposing_add_s(1040)
    assert crowded < 1.5 * spread
    line_s = 64 / DEV.bandwidth
    assert crowded < 0.5 * line_s


def test_a_few_rows_a_tile_stay_within_the_ways():
    # 8 rows of 4 KiB: the 8 ways of the one set hold them
    few, spread = _transposing_add_s(1024, (8, 8)), _transposing_add_s(1040, (8, 8))
    assert few < 1.5 * spread


def test_tile_overhead_is_paid_per_chunk_dealt_plus_setup_per_member():
    dev = dataclasses.replace(DEV, tile_overhead_s=60e-9)    # this host's calibrated figure
    n = 262_144
    one = tile_overhead_s(dev, n, 1, 1)
    sixteen = tile_overhead_s(dev, n, 16, 1)
    assert abs(one - dev.tile_overhead_s * n / dev.parallel_units) < 1e-12
    assert sixteen < one / 4
    assert sixteen >= dev.tile_setup_s * n / dev.parallel_units
    # each extra member adds its set-up, not another dealing
    extra = tile_overhead_s(dev, n, 1, 3) - one
    assert abs(extra - dev.tile_setup_s * n * 2 / dev.parallel_units) < 1e-12


def test_narrow_tiles_dealt_in_chunks_are_priced_below_one_at_a_time():
    # 2 x 1 tiles of a row-major 512 x 1024 output: 16 to a thread at a time
    w = workload("y[i,j] = x[i,j] + 1.0\n", {"I": 512, "J": 1024}, {"x": ["I", "J"]}, ["y"])
    cand = make_candidate([], {}, [GroupSchedule("y", (2, 1))], "t")
    (g,) = costmodel.estimate(w, cand, DEV).groups
    per_tile = DEV.tile_overhead_s * 262_144 / DEV.parallel_units
    # less the runs of one element the tiles cut x and y into (rates.RUN_FLOPS), priced alike
    # however the tiles are dealt
    runs_s = 2 * 512 * 1024 * RUN_FLOPS / DEV.loop_flops
    assert 0 < g.predicted_s - runs_s < per_tile
