"""Each member of an online-softmax chain pays a fixed set-up per row and block of the walk
(``costmodel.chain_cost.BLOCK_LOOP_S``): smaller blocks, more of it."""
from __future__ import annotations

import dataclasses

import pytest

import costmodel
from autotune.backends.factory import backend_kind
from costmodel import chain_cost
from costmodel.devices import CPU_DEFAULT
from search_spaces import load_workload
from search_spaces.plans import chained_plan
from search_spaces.space import SearchSpace


def _chain_s(block: int) -> float:
    w = load_workload("attention")
    c = chained_plan(SearchSpace(w, backend_kind("cpu").tile_bounds))
    chain = next(s for s in c.schedules if s.chain_block)
    scheds = tuple(dataclasses.replace(s, chain_block=block) if s is chain else s
                   for s in c.schedules)
    c = dataclasses.replace(c, schedules=scheds)
    (g,) = [g for g in costmodel.estimate(w, c, CPU_DEFAULT).groups if g.chain]
    return g.predicted_s


def test_the_block_loops_cost_in_proportion_to_the_blocks(monkeypatch):
    with_loops = {b: _chain_s(b) for b in (16, 128)}
    monkeypatch.setattr(chain_cost, "BLOCK_LOOP_S", 0.0)
    without = {b: _chain_s(b) for b in (16, 128)}
    added = {b: with_loops[b] - without[b] for b in (16, 128)}
    assert added[128] > 0
    # attention walks 256 keys: 16 blocks of 16 against 2 of 128, the same rows and members
    assert added[16] == pytest.approx(8 * added[128], rel=1e-9)
