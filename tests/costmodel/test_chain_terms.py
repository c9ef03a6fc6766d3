"""Two terms of an online-softmax chain's price (costmodel.chain_cost).

``row_refetch``: a chain tile's rows read their slices of the walked inputs again where the
rows between two uses of a slice read more than the private cache holds.  Triangle attention
around the ending node is the case: its keys and values kh[h,k,j,d] are read per (h, j), and
the tile runs its rows i outermost.

``BLOCK_LOOP_S``: each member pays a fixed set-up per row and block of the walk: smaller
blocks, more of it."""
from __future__ import annotations

import dataclasses

import pytest

import costmodel
from autotune.backends.factory import backend_kind
from costmodel import chain_cost, model
from costmodel.chain_cost import row_refetch
from costmodel.devices import CPU_DEFAULT
from costmodel.memo import GroupMemo
from search_spaces import load_workload
from search_spaces.chain import WALKED, detect
from search_spaces.plans import chained_plan
from search_spaces.space import SearchSpace

CAP = 512e3


@pytest.fixture(scope="module")
def ending():
    w = load_workload("triangle_attention_ending")       # N = 256, H = 4, D = 32
    (chain,) = detect(w).values()
    return w, chain


def _box(w, chain, tiles):
    anchor = w.op(chain.anchor)
    common = chain.common(chain.anchor)
    box = {common[i]: t for i, t in zip(anchor.parallel, tiles)}
    box[WALKED] = chain.extent
    return box


def _chain(workload: str, dev=CPU_DEFAULT, **change):
    """The chained plan's chain group of ``workload`` with its schedule's fields ``change``d,
    priced afresh (the tests change cost constants between calls; tests/conftest.py puts the
    process's memo back after each test)."""
    model._MEMO = GroupMemo()
    w = load_workload(workload)
    c = chained_plan(SearchSpace(w, backend_kind("cpu").tile_bounds))
    chain = next(s for s in c.schedules if s.chain_block)
    scheds = tuple(dataclasses.replace(s, **change) if s is chain else s for s in c.schedules)
    c = dataclasses.replace(c, schedules=scheds)
    (g,) = [g for g in costmodel.estimate(w, c, dev).groups if g.chain]
    return g


def test_keys_read_per_column_are_read_again_for_every_row_of_the_outer_loop(ending):
    w, chain = ending
    # go[i, j, h, d]: 8 x 64 x 2 rows; between two i the rows read 64 x 2 slices of 32 KiB
    times = row_refetch(w, chain, _box(w, chain, (8, 64, 2, 32)), 4, CAP)
    assert times["kh"] == times["vh"] == 8
    # the triangle bias tb[h,k,i] is read per (h, i): its slice comes back after 2 rows
    assert times["tb"] == 1


def test_rows_whose_slices_stay_in_cache_read_them_once(ending):
    w, chain = ending
    # one j and one h a tile: between two i the rows read one slice of each input
    times = row_refetch(w, chain, _box(w, chain, (8, 1, 1, 32)), 4, CAP)
    assert set(times.values()) == {1.0}
    # the same tile as above with a cache that holds everything it reads
    times = row_refetch(w, chain, _box(w, chain, (8, 64, 2, 32)), 4, 1e12)
    assert set(times.values()) == {1.0}


def _chain_bytes(tiles, tile_cache: float) -> float:
    dev = dataclasses.replace(CPU_DEFAULT, tile_cache_bytes=tile_cache)
    return _chain("triangle_attention_ending", dev, tiles=tiles).bytes


def test_the_chain_pays_for_the_reads_again_in_its_bytes():
    again = _chain_bytes((8, 64, 2, 32), CAP)
    once = _chain_bytes((8, 64, 2, 32), 1e12)
    # kh and vh (33.5 MB each) read 8 times over instead of once
    assert again - once >= 2 * 7 * 256 * 256 * 4 * 32 * 4
    # a tile whose slices stay in cache pays nothing more
    assert _chain_bytes((8, 1, 1, 32), CAP) == _chain_bytes((8, 1, 1, 32), 1e12)


def test_the_block_loops_cost_in_proportion_to_the_blocks(monkeypatch):
    with_loops = {b: _chain("attention", chain_block=b).predicted_s for b in (16, 128)}
    monkeypatch.setattr(chain_cost, "BLOCK_LOOP_S", 0.0)
    without = {b: _chain("attention", chain_block=b).predicted_s for b in (16, 128)}
    added = {b: with_loops[b] - without[b] for b in (16, 128)}
    assert added[128] > 0
    # attention walks 256 keys: 16 blocks of 16 against 2 of 128, the same rows and members
    assert added[16] == pytest.approx(8 * added[128], rel=1e-9)


def test_a_gpu_chain_pays_neither_term(monkeypatch):
    """A GPU runs a chain's rows a thread each: no loop over the tile's rows, none over a
    block's points per row either."""
    from costmodel.devices import H200
    before = {b: _chain("triangle_attention_ending", H200, chain_block=b) for b in (16, 128)}
    monkeypatch.setattr(chain_cost, "BLOCK_LOOP_S", 0.0)
    monkeypatch.setattr(chain_cost, "row_refetch",
                        lambda *a, **k: pytest.fail("row_refetch asked for a GPU"))
    for b, g in before.items():
        after = _chain("triangle_attention_ending", H200, chain_block=b)
        assert (after.predicted_s, after.bytes) == (g.predicted_s, g.bytes)
