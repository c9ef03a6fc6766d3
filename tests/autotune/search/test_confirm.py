"""Finalists confirmed at the end of a search, on the fake backend: which candidates are picked,
how the confirmation is stored, that its winner replaces a lucky single run as the cached best,
and when a search (resumed, rerun, shared) confirms.  The same on the CPU end to end:
test_confirm_end_to_end.py."""
from __future__ import annotations

import dataclasses
import statistics

import pytest

from autotune.backends.base import Measurement
from autotune.backends.factory import backend_kind
from autotune.backends.fake import CONFIRM_RUNS, FakeBackend
from autotune.report.best import best_report
from autotune.search.confirm import (FASTEST, MODEL, NAMED as NAMED_WHY, OUT_OF_REACH, STORED,
                                     confirm_rounds, pick_finalists)
from costmodel import estimate
from db.records import Status, TrialOutcome, confirmation_study, is_confirmation
from db.store import PlanDB
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace

from tests.support.fake_search import (CHEAP, DEV, NAMED, cand_of, fake_key, run, unchained)

CONFIRMED = dataclasses.replace(CHEAP, budget=12, confirm_rounds=3, confirm_s=0.0)
STUDY = "random-seed0"


@pytest.fixture
def w(small):
    return unchained(small("gated_mlp"))


@pytest.fixture
def space(w):
    return SearchSpace(w, backend_kind("cpu").tile_bounds)


def search_rows(db, w):
    return [r for r in db.trials(fake_key(w).key) if not is_confirmation(r.study)]


def confirm_rows(db, w):
    return db.trials(fake_key(w).key, confirmation_study(STUDY))


class Lucky(FakeBackend):
    """The fake, but ``lucky``'s runs in the search take ``factor`` of their time (a quiet
    moment, a lucky cache state); its confirmation runs are honest."""

    def __init__(self, *a, lucky: str = "", factor: float = 0.01, **kw):
        super().__init__(*a, **kw)
        self.lucky, self.factor = lucky, factor

    def run_time(self, cand, run):
        t = super().run_time(cand, run)
        return t * self.factor if cand.key == self.lucky and run < CONFIRM_RUNS else t


# ---- which finalists -------------------------------------------------------------------------

def test_finalists_are_the_fastest_the_named_plans_the_models_single_runs_and_the_stored_best(
        w, space, fresh_db):
    rng = __import__("numpy").random.default_rng(0)
    cands = []
    while len(cands) < 9:
        c = space.random(rng)
        if c.key not in {x.key for x in cands}:
            cands.append(c)
    k = fake_key(w)
    heuristic, unfused = named_plan(space, "heuristic"), named_plan(space, "unfused")
    rows = [  # (candidate, status, predicted, times)
        (cands[0], Status.OK, 5.0, (3.0, 3.1, 2.9)),
        (cands[1], Status.OK, 5.0, (1.0, 1.0, 1.0)),     # fastest
        (cands[2], Status.OK, 5.0, (2.0, 2.0)),
        (cands[3], Status.OK, 5.0, (4.0, 4.0, 4.0)),
        (cands[4], Status.OK, 5.0, (5.0, 5.0, 5.0)),     # 5th fastest: not by time
        (cands[5], Status.OK, 0.1, (9.0,)),              # the model's top pick, given up
        (cands[6], Status.OK, 0.2, (8.0, 8.0, 8.0)),     # a model pick measured thrice
        (cands[7], Status.OK, 0.3, (8.5, 8.5, 8.5)),     # ... and one measured under load
        (heuristic, Status.OK, 7.0, (7.0, 7.0, 7.0)),    # named, 7x the fastest thrice
        (unfused, Status.OK, 7.0, (7.0,)),               # named, 7x the fastest once
        (cands[8], Status.FAILED, 0.05, ()),             # failed: never a finalist
    ]
    for i, (c, status, pred, times) in enumerate(rows):
        fresh_db.append_trial(k, STUDY, TrialOutcome(
            c, status, pred, statistics.median(times) if times else None,
            None if times else "boom", times=times))
    fresh_db.append_trial(k, STUDY, TrialOutcome(cands[1], Status.OK, 5.0, 1.0,
                                                 "same candidate as an earlier trial"))
    # the stored best of another study of the key
    other = space.random(__import__("numpy").random.default_rng(99))
    fresh_db.append_trial(k, "tpe-seed1", TrialOutcome(other, Status.OK, 3.0, 0.5,
                                                       times=(0.5,)))
    pick = lambda reach: pick_finalists(  # noqa: E731
        fresh_db.trials(k.key, STUDY), fresh_db.best(k.key),
        dataclasses.replace(CHEAP, finalists=4, confirm_rounds=3), frozenset({cands[7].key}),
        reach)
    got = pick(10.0)
    assert [(f.candidate.key, f.why) for f in got] == [
        (cands[1].key, (FASTEST,)), (cands[2].key, (FASTEST,)), (cands[0].key, (FASTEST,)),
        (cands[3].key, (FASTEST,)), (heuristic.key, (NAMED_WHY,)), (unfused.key, (NAMED_WHY,)),
        (cands[5].key, (MODEL,)), (cands[7].key, (MODEL,)), (other.key, (STORED,))]
    assert got[0].measured_s == 1.0 and got[6].predicted_s == 0.1
    # within the default reach (1.5x the fastest), a named plan that ran 7x slower three times
    # is left out; one run of it is not enough to tell
    assert [f.candidate.key for f in pick(OUT_OF_REACH)] == [
        f.candidate.key for f in got if f.candidate.key != heuristic.key]


def test_a_search_confirms_its_finalists_once_at_the_end(w, space, fresh_db):
    result, rows, backend = run(w, space, fresh_db, CONFIRMED, FakeBackend(w, DEV, sigma=0.1))
    assert len(backend.confirms) == 1
    cands, rounds = backend.confirms[0]
    assert rounds == 3
    search = search_rows(fresh_db, w)
    ok = {}
    for r in search:
        if r.status == "ok":
            ok.setdefault(cand_of(r).key, r)
    fastest = sorted(ok.values(), key=lambda r: r.measured_s)[:4]
    keys = [c.key for c in cands]
    assert keys[:4] == [cand_of(r).key for r in fastest]
    best = fastest[0].measured_s
    assert {cand_of(r).key for r in ok.values() if r.name in NAMED and (
        len(r.times) < 2 or r.measured_s <= OUT_OF_REACH * best)} <= set(keys)
    by_model = sorted(ok.values(), key=lambda r: r.predicted_s)[:4]
    assert {cand_of(r).key for r in by_model if len(r.times) == 1} <= set(keys)
    assert set(keys) <= set(ok)                        # never a failed or pruned candidate
    assert len(keys) == len(set(keys))
    assert result.confirmation.rounds == 3 and len(result.confirmation.finalists) == len(keys)


def test_cheap_finalists_get_more_rounds_within_the_budget():
    config = dataclasses.replace(CHEAP, confirm_rounds=3, confirm_s=6.0, max_confirm_rounds=11)
    # a plan under MIN_ROUND_S runs for ~MIN_ROUND_S a round (calls_per_round): seven of 4 ms
    # are 0.7 s a round, eight rounds in 6 s
    assert confirm_rounds(config, [0.004] * 7) == 8
    assert confirm_rounds(config, [1e-5] * 3) == 11                 # capped
    assert confirm_rounds(config, [1.0] * 8) == 3                   # never fewer than asked
    assert confirm_rounds(config, [0.4, None, 0.6]) == 6            # 6 s / 1 s a round
    assert confirm_rounds(dataclasses.replace(config, confirm_s=0.0), [1e-5] * 3) == 3
    assert confirm_rounds(dataclasses.replace(config, confirm_rounds=0), [1e-5]) == 0


def test_a_search_of_cheap_plans_confirms_in_more_rounds(w, space, fresh_db):
    config = dataclasses.replace(CONFIRMED, confirm_s=6.0, max_confirm_rounds=7)
    result, _, backend = run(w, space, fresh_db, config, FakeBackend(w, DEV, sigma=0.1))
    (cands, rounds), = backend.confirms
    # the fake's candidates take their predicted time: gated_mlp's small dims, well under
    # a millisecond, so the budget allows more than the cap
    assert rounds == 7 and result.confirmation.rounds == 7


# ---- what is stored, and the lucky best replaced ----------------------------------------------

def test_the_confirmation_is_stored_and_its_winner_replaces_a_lucky_best(w, space, fast_tmp):
    unfused = named_plan(space, "unfused")
    backend = Lucky(w, DEV, sigma=0.0, lucky=unfused.key)
    path = fast_tmp / "plans.sqlite"
    with PlanDB(path) as db:
        # unfused predicts 2.7x the model's favourite (greedy, at these dims): no pruning
        result, _, _ = run(w, space, db, dataclasses.replace(CONFIRMED, prune_factor=10.0),
                           backend)
        search, confirm = search_rows(db, w), confirm_rows(db, w)
        best = db.best(fake_key(w).key)
        assert db.check() == []
    lucky = min((r for r in search if r.status == "ok"), key=lambda r: r.measured_s)
    assert lucky.name == "unfused"                     # the single runs crowned it ...
    cands, _ = backend.confirms[0]
    assert [cand_of(r).key for r in confirm] == [c.key for c in cands]
    assert all(r.status == "ok" and len(r.times) == 3 for r in confirm)
    assert all(r.measured_s == statistics.median(r.times) for r in confirm)
    assert len({r.created for r in confirm}) == 1      # one confirmation, one transaction
    preds = {cand_of(r).key: r.predicted_s for r in search}
    assert all(r.predicted_s == preds[cand_of(r).key] for r in confirm)
    # ... the confirmation did not: its honest runs put another first, and that is cached
    winner = min(confirm, key=lambda r: r.measured_s)
    assert winner.name != "unfused"
    assert winner.measured_s == pytest.approx(estimate(w, cand_of(winner), DEV).total_s)
    assert best.study == confirmation_study(STUDY) and best.trial_number == winner.number
    assert best.candidate == winner.candidate and best.measured_s == winner.measured_s
    assert best.measured_s > lucky.measured_s          # replaced, though slower than the luck
    assert result.best == best and result.progress.best_s == best.measured_s
    assert result.confirmation.winner == (winner.name or cand_of(winner).key[:12])
    (row,) = best_report(PlanDB(path))
    assert row["confirmed"] == {"rounds": 3, "finalists": len(confirm)}
    # named plans compared side by side with the winner: by their confirmation medians
    assert row["named_s"]["unfused"] == next(r.measured_s for r in confirm
                                             if r.name == "unfused")
    assert all(v >= 1.0 for v in row["speedup"].values())


def test_a_confirmation_where_nothing_passes_leaves_the_best_alone(w, space, fresh_db,
                                                                   monkeypatch):
    backend = FakeBackend(w, DEV)
    monkeypatch.setattr(backend, "confirm", lambda cands, rounds, timeout_s: [
        Measurement(Status.FAILED, error="worker crashed (exit code 3)")] * len(cands))
    result, rows, _ = run(w, space, fresh_db, CONFIRMED, backend)
    assert result.confirmation is None and confirm_rows(fresh_db, w) == []
    assert not is_confirmation(result.best.study)
    assert result.progress.last.startswith("confirmation failed: worker crashed")
    assert fresh_db.check() == []


# ---- when a search confirms ------------------------------------------------------------------

def test_a_rerun_confirms_only_what_is_new(w, space, fresh_db):
    config = dataclasses.replace(CONFIRMED, budget=8)
    run(w, space, fresh_db, config)
    first = confirm_rows(fresh_db, w)
    # the same search again: nothing new measured, the best already confirmed: nothing to do
    again, _, b = run(w, space, fresh_db, config)
    assert b.confirms == [] and again.confirmation is None
    assert confirm_rows(fresh_db, w) == first
    # a larger budget: the resumed search confirms again, and the newer winner is the best
    _, _, c = run(w, space, fresh_db, dataclasses.replace(config, budget=12))
    assert len(c.confirms) == 1
    rows = confirm_rows(fresh_db, w)
    newer = rows[len(first):]
    assert len(newer) == len(c.confirms[0][0]) and newer[0].created > first[0].created
    assert [r.number for r in rows] == list(range(len(rows)))
    best = fresh_db.best(fake_key(w).key)
    assert best.trial_number == min(newer, key=lambda r: r.measured_s).number
    assert fresh_db.check() == []
    # no confirmation asked for: none made
    _, _, d = run(w, space, fresh_db, dataclasses.replace(config, budget=14, confirm_rounds=0))
    assert d.confirms == [] and len(confirm_rows(fresh_db, w)) == len(rows)


def test_a_shared_study_is_confirmed_once_by_the_worker_that_finishes_it(w, space, fast_tmp,
                                                                         fresh_db):
    config = dataclasses.replace(CONFIRMED, budget=6, storage=f"journal:{fast_tmp / 'j.log'}")
    first, _, a = run(w, space, fresh_db, config)
    assert len(a.confirms) == 1 and first.confirmation is not None
    # another worker joining the finished study: nothing to run, nothing to confirm again
    second, _, b = run(w, space, fresh_db, config)
    assert b.calls == [] and b.confirms == [] and second.confirmation is None
    assert is_confirmation(fresh_db.best(fake_key(w).key).study)
    assert fresh_db.check() == []


def test_a_recorded_confirmation_replays(w, space, fast_tmp):
    """The replay backend answers a confirmation from the recorded one: the replayed search
    writes the same confirmation and caches the same winner."""
    from autotune.backends.replay import ReplayBackend
    fields = ("number", "study", "candidate", "status", "predicted_s", "measured_s", "error",
              "times")
    with PlanDB(fast_tmp / "a.sqlite") as db:
        run(w, space, db, CONFIRMED, FakeBackend(w, DEV, sigma=0.1))
        recorded, best = db.trials(fake_key(w).key), db.best(fake_key(w).key)
        replay = ReplayBackend.from_db(db, fake_key(w).key, STUDY)
    confirmed = {cand_of(r).key for r in recorded if is_confirmation(r.study)}
    assert confirmed and set(replay.confirmed) == confirmed
    with PlanDB(fast_tmp / "b.sqlite") as db:
        run(w, space, db, CONFIRMED, replay)
        replayed, again = db.trials(fake_key(w).key), db.best(fake_key(w).key)
    assert [[getattr(r, f) for f in fields] for r in replayed] == \
        [[getattr(r, f) for f in fields] for r in recorded]
    assert (again.candidate, again.measured_s, again.study) == \
        (best.candidate, best.measured_s, best.study)


def test_a_resumed_search_measures_against_the_confirmed_best(w, space, fresh_db):
    """Resumed after a confirmation that overruled a lucky run, the search's early stops
    compare with the confirmed median, not the luck."""
    unfused = named_plan(space, "unfused")
    config = dataclasses.replace(CONFIRMED, budget=6, prune_factor=1e9)
    run(w, space, fresh_db, config, Lucky(w, DEV, sigma=0.0, lucky=unfused.key))
    best = fresh_db.best(fake_key(w).key)
    lucky = min(r.measured_s for r in search_rows(fresh_db, w) if r.status == "ok")
    assert lucky < best.measured_s
    _, _, b = run(w, space, fresh_db, dataclasses.replace(config, budget=10),
                     Lucky(w, DEV, sigma=0.0, lucky=unfused.key))
    assert b.calls and b.calls[0][2] == best.measured_s


def test_a_cheap_named_plan_is_confirmed_however_slow_its_runs(w, space, fresh_db):
    """A named plan whose repeated runs were far slower than the fastest is still confirmed
    where its rounds cost next to nothing (a first trial of milliseconds that caught a busy
    machine); one whose rounds would take seconds is left out."""
    k = fake_key(w)
    heuristic, unfused = named_plan(space, "heuristic"), named_plan(space, "unfused")
    fast = space.random(__import__("numpy").random.default_rng(3))
    for c, times in ((fast, (0.0018,) * 3), (heuristic, (0.0038,) * 3), (unfused, (4.0,) * 3)):
        fresh_db.append_trial(k, STUDY, TrialOutcome(c, Status.OK, 0.002, times[0],
                                                     times=times))
    got = pick_finalists(fresh_db.trials(k.key, STUDY), None,
                         dataclasses.replace(CHEAP, finalists=1, confirm_rounds=3), frozenset())
    assert [f.candidate.key for f in got] == [fast.key, heuristic.key]
