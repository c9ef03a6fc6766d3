"""An update (``+=``) whose innermost loop gathers an operand runs GCC's own scalar code on a CPU
(``autotune.backends.cpu.codegen._Emitter.gathers``), priced at ``GATHERED_UPDATE_VEC`` of the
loop rate rather than the one-lane rate of a strided vector loop; other devices keep that."""
from __future__ import annotations

from dataclasses import replace

import pytest

import costmodel
import costmodel.model
from costmodel.devices import CPU_DEFAULT, H100
from costmodel.model import GATHERED_UPDATE_VEC
from search_spaces import load_workload
from search_spaces.candidate import IMPL_LOOP
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace, TileBounds


def _q_group(tiles, dev):
    """attention's q[h,s,d] += x[s,c] * w_q[c,h,d] as a loop group of ``tiles``."""
    w = load_workload("attention")
    base = named_plan(SearchSpace(w, TileBounds(1, 64)), "unfused")
    scheds = tuple(replace(s, impl=IMPL_LOOP, tiles=tiles, kernel=None, precision="")
                   if s.anchor == "q" else s for s in base.schedules)
    cand = replace(base, schedules=scheds, stacks=())
    return next(g for g in costmodel.estimate(w, cand, dev).groups if g.anchor == "q")


@pytest.mark.parametrize("tiles", [(2, 8, 1), (2, 32, 2)])
def test_a_gathering_update_runs_at_its_share_of_the_loop_rate(tiles):
    # d's tile of 1 or 2: the innermost loop walks s, gathering x's rows (the tile buffer it
    # accumulates in walked unit-stride, or at a stride of 2, whose lines stay near)
    g = _q_group(tiles, CPU_DEFAULT)
    assert g.strided_flops == g.flops
    at_share = g.flops / (CPU_DEFAULT.loop_flops * GATHERED_UPDATE_VEC)
    assert at_share <= g.predicted_s < 1.05 * at_share
    one_lane = g.flops / (CPU_DEFAULT.loop_flops / CPU_DEFAULT.vector_width)
    assert g.predicted_s < 0.6 * one_lane
    # the same statement walking d unit-stride stays the faster loop
    assert _q_group((2, 8, 32), CPU_DEFAULT).predicted_s < g.predicted_s


def test_only_the_cpu_price_depends_on_the_share(monkeypatch):
    """GCC's judgement is the CPU backend's: a GPU loop that gathers keeps its price."""
    before = {d.name: _q_group((2, 8, 1), d).predicted_s for d in (CPU_DEFAULT, H100)}
    monkeypatch.setattr(costmodel.model, "GATHERED_UPDATE_VEC", GATHERED_UPDATE_VEC / 2)
    # renamed devices: prices are memoised by device
    after = {d.name: _q_group((2, 8, 1), replace(d, name=d.name + "-b")).predicted_s
             for d in (CPU_DEFAULT, H100)}
    assert after["cpu"] == pytest.approx(2 * before["cpu"], rel=0.02)
    assert after["h100"] == pytest.approx(before["h100"], rel=1e-9)
