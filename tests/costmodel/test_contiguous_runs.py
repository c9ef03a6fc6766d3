"""A loop pays for each contiguous run its tiles cut a unit-stride walk into
(``costmodel.rates.RUN_FLOPS``), whether the tensor's lines come from memory or the caches."""
from __future__ import annotations

import dataclasses

import costmodel
from costmodel.devices import CPU_DEFAULT
from costmodel.rates import RUN_FLOPS, contiguous_run, line_waste
from search_spaces.candidate import GroupSchedule, make_candidate
from tests.support.workloads import workload

SCALE = "y[a,b,i,j] = x[a,b,i,j] * 2.0 + 1.0\n"


def test_contiguous_run_counts_the_inner_dims_a_box_covers():
    shape, perm = (48, 48, 24, 24), (0, 1, 2, 3)
    assert contiguous_run(shape, perm, (1, 16, 24, 24)) == 16 * 24 * 24
    assert contiguous_run(shape, perm, (8, 16, 24, 2)) == 2
    assert contiguous_run(shape, perm, (8, 16, 2, 24)) == 48
    # stored j-major: i innermost in memory, covered, then 4 js
    assert contiguous_run(shape, (0, 1, 3, 2), (8, 16, 24, 4)) == 24 * 4
    assert contiguous_run(shape, (0, 1, 3, 2), (8, 16, 4, 24)) == 4
    # line_waste reads the same runs
    assert line_waste(shape, perm, (8, 16, 24, 2)) == 8.0


# the preset with memory out of the way: the loop's own time shows
DEV = dataclasses.replace(CPU_DEFAULT, name="cpu-fast-memory", bandwidth=1e13)


def _predicted(w, tiles):
    cand = make_candidate([], {}, [GroupSchedule("y", tiles)], "t")
    return costmodel.estimate(w, cand, DEV).total_s


def test_a_tiling_that_cuts_a_unit_stride_walk_into_short_runs_pays_for_each():
    # all of it in cache: by flops alone every tiling priced alike (0.45 ms on the 2-core
    # Xeon), measured 0.25 ms in rows of 9,216 floats and 2.1 ms in runs of 2
    w = workload(SCALE, {"A": 48, "O": 24}, {"x": ["A", "A", "O", "O"]}, ["y"])
    wide, narrow = _predicted(w, (1, 16, 24, 24)), _predicted(w, (8, 16, 24, 2))
    runs = 2 * 48 * 48 * 24 * 24 / 2           # x read and y written in runs of 2
    assert narrow - wide >= 0.9 * runs * RUN_FLOPS / DEV.loop_flops
    # a run of 48 (two rows of j) costs far less than two runs of 2
    assert _predicted(w, (8, 16, 2, 24)) < narrow
