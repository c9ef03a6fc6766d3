"""An online-softmax chain's score that sums over its own index innermost on a CPU (attention's
keys stored row-major) runs ``rates.reduction_gain`` faster than the lanes' rate; one whose walk
goes innermost (keys stored head-dim first: the vector-register path) does not use it, nor does
a GPU, nor a loop group whose innermost loop is a reduction (docs/costmodel.md, section 1)."""
from __future__ import annotations

import itertools
from dataclasses import replace

import pytest

import costmodel
import costmodel.rates
from costmodel.devices import CPU_DEFAULT, H100
from costmodel.rates import reduction_gain
from search_spaces import load_workload
from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.space import SearchSpace
from tests.support.workloads import workload

_NAMES = itertools.count()


def _chain_group(k_perm, dev, monkeypatch, gain):
    """attention's chain group (blocks of 64, tiles of 32 x 4 x 32) with k stored ``k_perm``,
    REDUCTION_GAIN patched to ``gain`` (a fresh device name each call: prices are memoised by
    device)."""
    monkeypatch.setattr(costmodel.rates, "REDUCTION_GAIN", gain)
    w = load_workload("attention")
    space = SearchSpace(w)
    cand = space.build(lambda n, opts: 1 if n.startswith("chain:") else 64
                       if n.startswith("chain_block:") else opts[0])
    d = cand.to_dict()
    d["layouts"].pop("k", None)
    if tuple(k_perm) != (0, 1, 2):
        d["layouts"]["k"] = list(k_perm)
    for s in d["schedules"]:
        if s.get("chain_block"):
            s["tiles"] = [32, 4, 32]
    cand = type(cand).from_dict(d)
    assert cand.layout("k", 3) == tuple(k_perm)
    dev = replace(dev, name=f"{dev.name}-{next(_NAMES)}")
    return next(g for g in costmodel.estimate(w, cand, dev).groups if g.chain)


def test_the_gain_by_device_and_walk():
    assert reduction_gain(CPU_DEFAULT, False) == costmodel.rates.REDUCTION_GAIN > 1
    assert reduction_gain(CPU_DEFAULT, True) == costmodel.rates.STRIDED_REDUCTION_GAIN > 1
    assert reduction_gain(H100, False) == reduction_gain(H100, True) == 1.0


def test_a_row_major_key_score_runs_its_gain_faster(monkeypatch):
    g1, g2, g4 = (_chain_group((0, 1, 2), CPU_DEFAULT, monkeypatch, x) for x in (1.0, 2.0, 4.0))
    assert g4.bound == "compute"
    # the score's term scales as 1 / gain, the rest of the chain does not
    assert g4.predicted_s < g2.predicted_s < g1.predicted_s
    assert g1.predicted_s - g2.predicted_s == pytest.approx(
        2 * (g2.predicted_s - g4.predicted_s), rel=1e-6)


@pytest.mark.parametrize("k_perm, dev", [((0, 2, 1), CPU_DEFAULT), ((0, 1, 2), H100)])
def test_no_gain_on_the_vector_path_or_a_gpu(monkeypatch, k_perm, dev):
    a, b = (_chain_group(k_perm, dev, monkeypatch, x) for x in (1.0, 4.0))
    assert a.predicted_s == pytest.approx(b.predicted_s, rel=1e-9)


def test_a_loop_groups_innermost_sum_keeps_the_lanes_rate(monkeypatch):
    w = workload("s[i,j] += a[i,c] * b[j,c]\n", {"I": 256, "J": 256, "C": 512},
                 {"a": ["I", "C"], "b": ["J", "C"]}, ["s"])
    cand = make_candidate([], {}, [GroupSchedule("s", (64, 64))], "t")
    prices = []
    for gain in (1.0, 4.0):
        monkeypatch.setattr(costmodel.rates, "REDUCTION_GAIN", gain)
        dev = replace(CPU_DEFAULT, name=f"cpu-{next(_NAMES)}")
        (g,) = costmodel.estimate(w, cand, dev).groups
        assert g.chained_flops == g.flops     # the sum over c innermost
        prices.append(g.predicted_s)
    assert prices[0] == pytest.approx(prices[1], rel=1e-9)
