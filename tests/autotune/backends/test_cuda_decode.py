"""CUDA loop kernels decode a thread's point with literal divisors: a member's count is its full
tile's, and only where tiles do not divide an extent do the boundary tiles' extra points get a
bounds test (the emulated results of such plans are checked in test_cuda_codegen)."""
from __future__ import annotations

import re

from autotune.backends.cuda.codegen import generate_cuda
from search_spaces import load_workload
from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace

RUNTIME_DIVISOR = re.compile(r"q (%|/=) \(")


def tiled(w, tiles):
    base = named_plan(SearchSpace(w), "heuristic")
    scheds = [GroupSchedule(s.anchor, tiles[: len(s.tiles)], s.impl) if s.impl == "loop" else s
              for s in base.schedules]
    return make_candidate(base.fused, dict(base.layouts), scheds, "tiled")


def test_tiles_that_divide_need_no_bounds_test_and_no_runtime_division():
    w = load_workload("trimul_outgoing", {"N": 16, "C": 8})
    src, _ = generate_cuda(w, tiled(w, (4, 8, 4)))
    assert not RUNTIME_DIVISOR.search(src)
    assert "continue;" not in src


def test_boundary_tiles_skip_their_extra_points_without_runtime_division():
    w = load_workload("trimul_outgoing", {"N": 13, "C": 6})
    src, _ = generate_cuda(w, tiled(w, (4, 8, 4)))
    assert not RUNTIME_DIVISOR.search(src)
    # 13 = 4 + 4 + 4 + 1 and 6 = 4 + 2: the tiled dims' ends are tested, in the decode's place
    assert "if (!(v_d0 < e0 && v_d1 < e1)) continue;" in src
    assert re.search(r"const int cnt = 4 \* 8;", src)
