"""Early stops that noise cannot fool, in a search on the fake backend: the give-up factor widens
with the run-to-run spread the search has seen, a model favourite's slow first run is made
again, and a run taken under load is repeated rather than trusted (and the progress says the
machine is busy).  The loop itself (timed_runs, the load probe): backends/test_load.py."""
from __future__ import annotations

import dataclasses
import math

import pytest

from autotune.backends.base import Leniency, MeasureSettings
from autotune.backends.factory import backend_kind
from autotune.backends.fake import FakeBackend
from autotune.search.noise import NoiseBand, is_favourite
from costmodel import estimate
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace, TileBounds

from tests.support.fake_search import (CHEAP, DEV, name_of, named_in_order, run, unchained)


@pytest.fixture
def w(small):
    return unchained(small("gated_mlp"))


@pytest.fixture
def space(w):
    # the cpu kind's loop tiles without the generated kernel: whether a first run lands in the
    # band depends on every draw of the 30 trials, which the kernel's questions change
    # (tests/autotune/search/test_search_logic.py does the same)
    return SearchSpace(w, TileBounds(1, backend_kind("cpu").tile_bounds.hi))


def pred(w, space, name: str) -> float:
    return estimate(w, named_plan(space, name), DEV).total_s


# ---- the noise band ----------------------------------------------------------------------------

def test_the_noise_band_is_the_median_log_deviation_of_repeats():
    band = NoiseBand()
    assert band.spread() == 0.0
    band.add((1.0,))                                # one run: no spread to learn
    assert len(band) == 0
    band.add((1.0, 1.1, 0.9))                       # the median run itself is left out
    assert len(band) == 2
    assert band.spread() == pytest.approx((math.log(1.1) + math.log(1 / 0.9)) / 2)
    band.add((2.0, 3.0, 2.0, 3.0))                  # 2.5 the median: each 0.18 or 0.22 off
    assert len(band) == 6
    devs = sorted([math.log(1.1), math.log(1 / 0.9)] + [math.log(2.5 / 2), math.log(3 / 2.5)] * 2)
    assert band.spread() == pytest.approx((devs[2] + devs[3]) / 2)


def test_the_noise_band_widens_the_give_up_threshold():
    s = MeasureSettings()
    assert s.give_up_at(Leniency(0.0)) == 1.15      # a quiet machine: the fixed factor
    assert s.give_up_at(Leniency(0.05)) == pytest.approx(math.exp(6 * 0.05))
    assert s.give_up_at(Leniency(0.05, favourite=True)) == math.inf
    quiet, noisy = s.cutoff(1.0, Leniency(0.0)), s.cutoff(1.0, Leniency(0.05))
    assert quiet.gives_up(1.3) and not noisy.gives_up(1.3) and noisy.gives_up(1.4)


def test_the_search_tells_the_backend_the_spread_of_its_repeats(w, space, fresh_db):
    # noise and trials enough that first runs land in the band whatever the model's ranking
    # (at sigma 0.2 and 30 trials, one change of the model left none: 0 of 30, 6 of 40 here)
    backend = FakeBackend(w, DEV, sigma=0.3)
    run(w, space, fresh_db, dataclasses.replace(CHEAP, budget=40, prune_factor=1e9), backend)
    band = NoiseBand()
    for leniency, m in zip(backend.leniencies, backend.results):
        assert leniency.spread == band.spread()
        band.add(m.times)
    assert backend.leniencies[-1].spread > 0.05     # the noise was seen, and passed on
    # a first run past the fixed factor but within the band is not the end of a candidate
    spared = 0
    for (_, _, best_s), leniency, m in zip(backend.calls, backend.leniencies, backend.results):
        if best_s is None or m.status != "ok" or leniency.favourite:
            continue
        factor = MeasureSettings().give_up_at(leniency)
        if 1.15 * best_s < m.times[0] <= factor * best_s:
            assert len(m.times) > 1
            spared += 1
        elif m.times[0] > factor * best_s:
            assert len(m.times) == 1
    assert spared


# ---- the model's favourites ----------------------------------------------------------------------

def test_favourites_are_the_best_few_predictions_seen():
    seen = [5.0, 1.0, 2.0, 3.0, 4.0]
    assert is_favourite(1.0, seen, 1) and not is_favourite(2.0, seen, 1)
    assert is_favourite(4.0, seen, 4) and not is_favourite(5.0, seen, 4)
    assert not is_favourite(0.5, seen, 0)


class SlowFirst(FakeBackend):
    """The fake, but the first run of ``slow`` takes ``seconds`` (a hiccup no probe saw)."""

    def __init__(self, *a, slow: str = "", seconds: float = 0.0, **kw):
        super().__init__(*a, **kw)
        self.slow, self.seconds = slow, seconds

    def run_time(self, cand, run):
        return self.seconds if cand.key == self.slow and run == 0 else \
            super().run_time(cand, run)


def test_the_named_plans_are_measured_fastest_predicted_first(w, space, fresh_db):
    """The likely best is measured first, so a slow named plan after it is given up on after
    one run (no favourites here) instead of being timed in full."""
    order = named_in_order(w, space)
    backend = FakeBackend(w, DEV, sigma=0.0)
    config = dataclasses.replace(CHEAP, budget=3, favourites=0)
    _, rows, _ = run(w, space, fresh_db, config, backend)
    assert [name_of(r) for r in rows] == order
    assert pred(w, space, order[0]) < pred(w, space, order[1]) < pred(w, space, order[2])
    slow = [r for r in rows[1:] if r.status == "ok" and r.measured_s > 1.2 * rows[0].measured_s]
    assert slow and all(len(r.times) == 1 for r in slow)


@pytest.mark.parametrize("favourites", [4, 0])
def test_a_model_favourites_slow_first_run_is_repeated(w, space, fresh_db, favourites):
    """The named plan measured second runs first at 5x the best so far: as one of the model's
    favourites (its second-best prediction) it is measured again and its true
    time is seen; when the model's ranking is not consulted (favourites=0) that one run ends it."""
    first, second, _ = named_in_order(w, space)
    best = pred(w, space, first)
    backend = SlowFirst(w, DEV, sigma=0.0, slow=named_plan(space, second).key,
                        seconds=5 * best)
    config = dataclasses.replace(CHEAP, budget=2, favourites=favourites)
    _, rows, _ = run(w, space, fresh_db, config, backend)
    h = rows[1]
    assert name_of(h) == second and backend.calls[1][2] == best
    assert backend.leniencies[1].favourite == bool(favourites)
    if favourites:
        # repeated: its true time seen (two runs out of contention end it, as for any)
        assert len(h.times) >= 2 and h.times[0] == 5 * best
        assert min(h.times) == pytest.approx(pred(w, space, second))
    else:
        assert h.times == (5 * best,) and h.measured_s == 5 * best


# ---- the machine's load ----------------------------------------------------------------------------

def test_a_run_under_load_is_repeated_not_trusted(w, space, fresh_db):
    """The second named plan's first run is taken while the machine is busy (10x slower): it
    decides nothing and is made again; the progress says the machine was busy."""
    second = named_in_order(w, space)[1]
    backend = FakeBackend(w, DEV, sigma=0.0, busy_factor=10.0,
                          busy=lambda cand, run: cand.name == second and run == 0)
    seen = []
    config = dataclasses.replace(CHEAP, budget=3, favourites=0)
    result, rows, _ = run(w, space, fresh_db, config, backend,
                          on_trial=lambda p: seen.append((p.busy, p.loaded_runs)))
    h = rows[1]
    assert name_of(h) == second
    true = pred(w, space, second)
    assert 10 * true > 1.15 * backend.calls[1][2]     # the busy run alone would have ended it
    # only trusted runs, the busy one dropped (how many: the usual early stop on true times)
    assert h.times and h.times == pytest.approx((true,) * len(h.times))
    assert backend.results[1].loaded_runs == 1
    assert [m.loaded_runs for i, m in enumerate(backend.results) if i != 1] == \
        [0] * (len(backend.results) - 1)
    assert seen[:3] == [(False, 0), (True, 1), (False, 1)]
    assert result.progress.loaded_runs == 1


def test_a_confirmation_repeats_its_runs_under_load(w, space, fresh_db):
    """The fake's confirmation: a busy round is made again, not counted."""
    cand = named_plan(space, "heuristic")
    from autotune.backends.fake import CONFIRM_RUNS
    backend = FakeBackend(w, DEV, sigma=0.0, busy_factor=10.0,
                          busy=lambda c, r: r == CONFIRM_RUNS + 1)
    (m,) = backend.confirm([cand], 3, 1e9)
    assert m.status == "ok" and m.loaded_runs == 1
    assert m.times == pytest.approx((pred(w, space, "heuristic"),) * 3)
