"""A CPU chain whose accumulators stay in a buffer (not whole vectors a row) updates them at
``BUFFER_UPDATE_EFFICIENCY`` of the FMA peak, vectorised along the contiguous free dim; with
whole vectors (up to VECTOR_ACC a row) a step holds them in vectors (the vector rate), and a
GPU's chain (a row a thread) keeps its price."""
from __future__ import annotations

from dataclasses import replace

import pytest

import costmodel
import costmodel.chain_cost
from costmodel.devices import CPU_DEFAULT, H100
from search_spaces.plans import chained_plan
from search_spaces.space import SearchSpace
from tests.support.chains import kernel_sum


def _chain(c: int, dev):
    w = kernel_sum(n=64, m=256, d=16, c=c, dtype="float32")
    cand = chained_plan(SearchSpace(w))
    (g,) = [g for g in costmodel.estimate(w, cand, dev).groups if g.chain]
    return g


def test_a_buffered_update_runs_at_a_share_of_the_peak_not_the_loop_rate():
    dev = CPU_DEFAULT
    g = _chain(40, dev)
    update = 2 * 64 * 256 * 40                    # a multiply-add per row, walked point, column
    peak = costmodel.chain_cost.peak_flops(dev, 4)
    assert g.predicted_s >= update / (peak * costmodel.chain_cost.BUFFER_UPDATE_EFFICIENCY)
    # far below the loop rate's price of the same flops (the loop rate is a streaming loop's)
    assert update / dev.loop_flops > 1.5 * update / (
        peak * costmodel.chain_cost.BUFFER_UPDATE_EFFICIENCY)


@pytest.mark.parametrize("c,follows", [(40, True), (8, True), (64, False), (80, False)])
def test_the_price_follows_the_constant_where_the_accumulators_are_buffered(c, follows,
                                                                            monkeypatch):
    def prices(suffix):
        return {d.name[:4]: _chain(c, replace(d, name=d.name + suffix)).predicted_s
                for d in (CPU_DEFAULT, H100)}
    before = prices(f"-buffered-{c}-a")
    monkeypatch.setattr(costmodel.chain_cost, "BUFFER_UPDATE_EFFICIENCY",
                        costmodel.chain_cost.BUFFER_UPDATE_EFFICIENCY * 4)
    after = prices(f"-buffered-{c}-b")
    gpu = [k for k in after if k != CPU_DEFAULT.name[:4]]
    assert all(after[k] == before[k] for k in gpu)
    cpu = CPU_DEFAULT.name[:4]
    assert (after[cpu] < before[cpu]) == follows


@pytest.mark.parametrize("c,follows", [(128, True), (64, False)])
def test_spilled_vector_accumulators_follow_their_share(c, follows, monkeypatch):
    """Past 96 a row the step's vectors spill (SPILLED_SHARE); up to 96 they do not."""
    before = _chain(c, replace(CPU_DEFAULT, name=f"cpu-spill-{c}-a")).predicted_s
    monkeypatch.setattr(costmodel.chain_cost, "SPILLED_SHARE", 0.25)
    after = _chain(c, replace(CPU_DEFAULT, name=f"cpu-spill-{c}-b")).predicted_s
    assert (after > before) == follows
