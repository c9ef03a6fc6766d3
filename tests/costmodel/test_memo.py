"""The group memo: a reused price is the price the model computes afresh, on random candidates
and their one-parameter neighbours (what a search prices), and it is reused."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.api import space_for
from autotune.search.proposals import build_with_defaults
from costmodel import model
from costmodel.devices import CPU_DEFAULT
from costmodel.memo import GroupMemo
from search_spaces import load_workload
from search_spaces.answers import params_of


class _NoMemo:
    def price(self, key, layout_of, mats, fn):
        return fn(layout_of, mats)


def _neighbourhood(space, rng, n: int) -> list:
    out = []
    for _ in range(n):
        c = space.random(rng)
        out.append(c)
        p = params_of(space, c)
        if p is None:
            continue
        _, p, opts = build_with_defaults(space, p)
        for name, values in opts.items():
            out += [build_with_defaults(space, {**p, name: v})[0] for v in values[:2]]
    return out


@pytest.mark.parametrize("name", ["trimul_outgoing", "attention", "outer_product_mean",
                                  "triangle_attention_starting"])
def test_reused_prices_equal_fresh_ones(name, small, monkeypatch):
    w = small(name)
    cands = _neighbourhood(space_for(w, "cpu"), np.random.default_rng(5), 3)
    memo = GroupMemo()
    monkeypatch.setattr(model, "_MEMO", memo)
    with_memo = [model.estimate(w, c, CPU_DEFAULT) for c in cands]
    monkeypatch.setattr(model, "_MEMO", _NoMemo())
    fresh = [model.estimate(w, c, CPU_DEFAULT) for c in cands]
    assert len(cands) > 100
    # online-softmax chains among them (priced through the memo too)
    assert name == "outer_product_mean" or any(s.chain_block for c in cands for s in c.schedules)
    assert with_memo == fresh          # every group's figures, not just the totals
    assert memo.hits > memo.misses     # neighbours share most of their groups


def test_a_changed_answer_is_priced_afresh():
    memo = GroupMemo()
    calls = []

    def price(layout_of, mats):
        calls.append(1)
        return (layout_of("a"), "b" in mats)
    layouts = {"a": (0, 1)}
    assert memo.price("k", layouts.get, {"b"}, price) == ((0, 1), True)
    assert memo.price("k", layouts.get, {"b", "c"}, price) == ((0, 1), True)   # c never asked
    assert len(calls) == 1
    assert memo.price("k", {"a": (1, 0)}.get, {"b"}, price) == ((1, 0), True)
    assert memo.price("k", layouts.get, set(), price) == ((0, 1), False)
    assert memo.price("other", layouts.get, {"b"}, price) == ((0, 1), True)
    assert len(calls) == 4 and memo.hits == 1


def test_the_memo_refuses_a_question_it_cannot_record():
    memo = GroupMemo()
    with pytest.raises(TypeError, match="materialized set"):
        memo.price("k", {}.get, {"b"}, lambda layout_of, mats: sorted(mats))


def test_a_chain_is_priced_for_its_own_block(monkeypatch):
    """Chains go through the memo too: the same chain walked in other blocks of its index is
    priced afresh (the block is part of the key), each as the model prices it without one."""
    w = load_workload("attention", {"S": 128, "H": 2, "D": 8, "C": 16})
    space = space_for(w, "cpu")
    base = params_of(space, next(c for c in (space.random(np.random.default_rng(s))
                                             for s in range(200))
                                 if any(x.chain_block for x in c.schedules)))
    name = next(k for k, v in base.items() if k.startswith("chain_block:") and v)
    cands = [build_with_defaults(space, {**base, name: b})[0] for b in space.chain_blocks(
        name.split(":", 1)[1])]
    monkeypatch.setattr(model, "_MEMO", GroupMemo())
    with_memo = [model.estimate(w, c, CPU_DEFAULT) for c in cands]
    monkeypatch.setattr(model, "_MEMO", _NoMemo())
    assert with_memo == [model.estimate(w, c, CPU_DEFAULT) for c in cands]
    assert len({e.total_s for e in with_memo}) > 1
