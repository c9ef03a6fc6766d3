"""An elementwise statement whose innermost loop walks its operands with a stride pays for each
element it loads or stores (``STRIDED_ACCESS_FLOPS`` flop-equivalents at the one-lane rate),
not only for its flops: outer_product_mean's bias add ``out[i,j,z] = po[i,j,z] + b_o[z]``
with z's tile of 1 walks j, a stride of Z, in both po and out.  Updates keep their own rates,
and other devices their prices."""
from __future__ import annotations

from dataclasses import replace

import pytest

import costmodel
import costmodel.model
from costmodel.devices import CPU_DEFAULT, H100
from costmodel.model import STRIDED_ACCESS_FLOPS
from search_spaces import load_workload
from search_spaces.candidate import IMPL_LOOP
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace, TileBounds


def _group(anchor, tiles, dev, workload="outer_product_mean"):
    """``anchor``'s loop group of the unfused plan with ``tiles``."""
    w = load_workload(workload)
    base = named_plan(SearchSpace(w, TileBounds(1, 128)), "unfused")
    scheds = tuple(replace(s, impl=IMPL_LOOP, tiles=tiles, kernel=None, precision="")
                   if s.anchor == anchor else s for s in base.schedules)
    cand = replace(base, schedules=scheds, stacks=())
    g = next(g for g in costmodel.estimate(w, cand, dev).groups if g.anchor == anchor)
    assert g.impl == "loop"
    return g


def test_a_strided_elementwise_walk_pays_per_element():
    dev = CPU_DEFAULT
    g = _group("out", (16, 16, 1), dev)
    elems = 128 ** 3                                      # N x N x Z at the default dims
    assert g.strided_flops == g.flops == elems
    # two strided accesses an element (po read, out written), at the one-lane rate
    floor = elems * 2 * STRIDED_ACCESS_FLOPS / (dev.loop_flops / dev.vector_width)
    assert g.predicted_s >= floor
    assert g.predicted_s < 1.5 * floor + 1e-4
    # its flops alone, even at one lane, would price it at a sixth of that
    assert elems / (dev.loop_flops / dev.vector_width) < floor / 5
    # the same statement walking z unit-stride is priced by its bytes (16 MB at the preset's 10 GB/s), well below
    unit = _group("out", (16, 16, 128), dev)
    assert unit.strided_flops == 0
    assert unit.predicted_s < g.predicted_s / 2


def test_the_price_follows_the_constant_on_cpus_only(monkeypatch):
    """The floor is the CPU's (GCC's gathers and scatters); a GPU loop keeps its price, and so
    does an update that gathers (attention's q projection with d's tile of 1)."""
    def prices(suffix):
        out = {d.name: _group("out", (16, 16, 1), replace(d, name=d.name + suffix)).predicted_s
               for d in (CPU_DEFAULT, H100)}
        out["q"] = _group("q", (2, 8, 1), replace(CPU_DEFAULT, name="cpu" + suffix),
                          workload="attention").predicted_s
        return out
    before = prices("-strided-a")
    monkeypatch.setattr(costmodel.model, "STRIDED_ACCESS_FLOPS", 2 * STRIDED_ACCESS_FLOPS)
    after = prices("-strided-b")  # devices of their own: prices are memoised by device
    assert after["cpu"] > 1.7 * before["cpu"]
    assert after["h100"] == pytest.approx(before["h100"], rel=1e-9)
    assert after["q"] == pytest.approx(before["q"], rel=1e-9)
