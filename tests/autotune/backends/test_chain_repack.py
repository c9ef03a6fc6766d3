"""A CPU chain reads an input that its scores walk with a stride from a copy with the walk
innermost (search_spaces.chain_walk.repacked): grouped-query attention's keys k[j, g, d].  The
copy is made once per call; the scores then run the walk in vector registers; the cost model
prices the same code (the copy's pass included) on CPUs, and a GPU's chain is left as it was."""
from __future__ import annotations

from dataclasses import replace

import pytest

import costmodel
import costmodel.chain_cost
from autotune.backends.cpu.codegen import generate
from costmodel.devices import CPU_DEFAULT, H100
from search_spaces.chain import detect
from search_spaces.chain_walk import repacked, row_step, vector_score
from search_spaces.plans import chained_plan
from search_spaces.space import SearchSpace
from tests.support.chains import cross, gqa, self_attention


def _repacked(w, block=16):
    (chain,) = detect(w).values()
    return repacked(w, chain, lambda t: tuple(range(len(w.shapes[t]))), block)


def test_keys_strided_along_the_walk_are_copied_walk_innermost():
    # k[j, g, d] stored as declared: the copy is [g, d, j]; the values are read along d
    assert _repacked(gqa(s=64)) == {"k": (1, 2, 0)}
    # not where the blocks leave the walk's end partial (no vector scores: the copy would
    # turn each dot product into a strided one)
    assert _repacked(gqa(s=37)) == {}


def test_no_copy_where_the_walk_is_contiguous_or_the_input_serves_the_update():
    assert _repacked(cross()) == {}                 # keys stored [h][c][j] already
    assert _repacked(self_attention(s=64)) == {}    # x is the keys and the values


def test_the_chain_code_fills_the_copy_and_scores_from_it_in_vectors():
    w = gqa(s=64, dtype="float32")        # blocks that divide the walk: whole vectors
    cand = chained_plan(SearchSpace(w))
    src, _ = generate(w, cand)
    assert "P_k[" in src and "A_k[" in src and "free(P_k);" in src
    assert "at_vloadf(&G_k[" in src                # the scores' vector loads, from the copy
    (chain,) = detect(w).values()
    packed = {"k": (1, 2, 0)}
    lay = lambda t: packed.get(t, tuple(range(len(w.shapes[t]))))   # noqa: E731
    block = next(s.chain_block for s in cand.schedules if s.chain_block)
    assert vector_score(w, chain, "s", block, lay)


def _price(dev):
    w = gqa(s=512, d=64, dtype="float32")
    cand = chained_plan(SearchSpace(w))
    return next(g for g in costmodel.estimate(w, cand, dev).groups if g.chain).predicted_s


def test_the_cpu_price_sees_the_copy_and_the_gpu_price_does_not(monkeypatch):
    with_copy = {d.name: _price(replace(d, name=d.name + "-repack-a")) for d in (CPU_DEFAULT, H100)}
    monkeypatch.setattr(costmodel.chain_cost, "repacked_layouts", lambda w, c, lay, block: (lay, {}))
    without = {d.name: _price(replace(d, name=d.name + "-repack-b")) for d in (CPU_DEFAULT, H100)}
    # the scores' dot products one at a time are dearer than the copy and the vector walk
    assert with_copy["cpu"] < 0.9 * without["cpu"]
    assert with_copy["h100"] == pytest.approx(without["h100"], rel=1e-9)


@pytest.mark.parametrize("acc,vector_bytes,rows", [(32, 64, 8), (32, 32, 8), (64, 64, 6),
                                                   (64, 32, 4), (128, 64, 4)])
def test_row_steps_follow_the_accumulators_and_the_vector_width(acc, vector_bytes, rows):
    # 6 rows of 64 accumulators hold 24 of AVX-512's 32 registers; AVX2's 16 take 4 rows
    w = gqa(s=64)
    (chain,) = detect(w).values()
    extents = {c: 16 for c in chain.common(chain.anchor).values()}
    dim, step = row_step(w, chain, extents, acc, vector_bytes)
    assert dim and step == rows
