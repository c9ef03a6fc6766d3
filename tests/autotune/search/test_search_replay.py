"""A search continued, replayed and shared, on the fake backend, in milliseconds: resume from the
plan database, a recorded search replayed trial for trial, and two workers on one shared
Optuna study (journal file) running exactly the budget."""
from __future__ import annotations

import dataclasses
import threading

import optuna
import pytest
from optuna.trial import TrialState

from autotune.backends.factory import backend_kind
from autotune.backends.fake import FakeBackend
from autotune.backends.replay import NOT_RECORDED, ReplayBackend
from autotune.search.storage import open_storage, shared_study_name
from db.records import StoredTrial
from db.store import PlanDB
from search_spaces.space import SearchSpace, TileBounds

from tests.support.fake_search import (CHEAP, DEV, NAMED, assert_best_is_min_ok, best_before,
                                       cand_of, fake_key, measured_keys, name_of, params_of_row,
                                       ran, run, unchained)

FIELDS = ("number", "study", "candidate", "status", "predicted_s", "measured_s", "error", "params",
          "options", "times", "rel_err")


@pytest.fixture
def w(small):
    return unchained(small("gated_mlp"))


@pytest.fixture
def space(w):
    # without the generated kernel: these tests rely on a recorded run that prunes some draws,
    # and which draws come depends on every choice the space offers (see test_search_logic.py)
    return SearchSpace(w, TileBounds(1, backend_kind("cpu").tile_bounds.hi))


def same_trials(a: list[StoredTrial], b: list[StoredTrial]) -> bool:
    return [[getattr(r, f) for f in FIELDS] for r in a] == \
        [[getattr(r, f) for f in FIELDS] for r in b]


# ---- resume ----------------------------------------------------------------------------------

STATES = {"ok": TrialState.COMPLETE, "failed": TrialState.FAIL, "pruned": TrialState.PRUNED}


def test_a_larger_budget_runs_only_the_missing_trials(w, space, fresh_db, monkeypatch):
    studies = []
    create_study = optuna.create_study
    monkeypatch.setattr(optuna, "create_study",
                        lambda **kw: studies.append(create_study(**kw)) or studies[-1])
    config = dataclasses.replace(CHEAP, budget=8, local_every=3)
    first, before, a = run(w, space, fresh_db, config)
    assert first.progress.new == 8
    # the same budget again: everything replayed, nothing measured, nothing added
    again, rows, b = run(w, space, fresh_db, config)
    assert b.calls == [] and same_trials(rows, before)
    assert again.progress.done == 8 and again.progress.new == 0
    assert again.best == first.best and again.progress.best_s == first.progress.best_s
    # a larger budget: the replayed trials stay, five more run
    more, after, c = run(w, space, fresh_db, dataclasses.replace(config, budget=13))
    assert more.progress.done == 13 and more.progress.new == 5
    # the sampler was told every replayed trial, with its outcome, before the new ones
    told = studies[-1].get_trials(deepcopy=False)
    # 13 trials, plus the sampler's repeats of earlier candidates (told, never written)
    assert len(told) >= 13
    for t, r in zip(told, before):
        assert t.state == STATES[r.status] and t.params == params_of_row(r)
        assert t.value == (r.measured_s if r.status == "ok" else None)
    assert same_trials(after[:8], before) and [r.number for r in after] == list(range(13))
    assert [name_of(r) for r in after[8:]] == [""] * 5     # the queue was not run again
    measured_before = {cand_of(r).key for r in before if r.status != "pruned"}
    assert not set(measured_keys(c)) & measured_before      # replayed: not measured again
    assert measured_keys(c) == [cand_of(r).key for r in after[8:] if ran(r)]
    for r in after[8:]:
        if r.status == "pruned":   # against the best so far, replayed trials included
            _, pred = best_before(after[:r.number])
            assert r.error.endswith(f"> 2 x {pred:.3g} s")
    assert more.progress.measured == sum(r.status == "ok" for r in after)
    best = assert_best_is_min_ok(fresh_db, fake_key(w), after)
    assert best.measured_s <= first.best.measured_s
    assert more.progress.best_s == best.measured_s


# ---- replay ----------------------------------------------------------------------------------

def test_a_replayed_search_takes_the_same_trials(w, space, fast_tmp):
    """With TPE and local search: the same measurements give the same decisions."""
    config = dataclasses.replace(CHEAP, budget=12, sampler="tpe", local_every=3)
    with PlanDB(fast_tmp / "recorded.sqlite") as db:
        _, recorded, fake = run(w, space, db, config)
        replay = ReplayBackend.from_db(db, fake_key(w).key)
    with PlanDB(fast_tmp / "replayed.sqlite") as db:
        result, replayed, _ = run(w, space, db, config, replay)
    assert same_trials(replayed, recorded)
    assert [c.key for c in replay.calls] == measured_keys(fake)
    assert result.progress.new == 12


def test_a_changed_search_on_a_replay_asks_for_unrecorded_candidates(w, space, fast_tmp):
    config = dataclasses.replace(CHEAP, budget=10)
    with PlanDB(fast_tmp / "recorded.sqlite") as db:
        _, recorded, _ = run(w, space, db, config)
        replay = ReplayBackend.from_db(db, fake_key(w).key)
        with_fallback = ReplayBackend.from_db(db, fake_key(w).key,
                                              fallback=FakeBackend(w, DEV, seed=5))
    pruned = {cand_of(r).key for r in recorded if r.status == "pruned"} - \
        {cand_of(r).key for r in recorded if r.status != "pruned"}
    assert pruned
    unpruned = dataclasses.replace(config, prune_factor=1e9)
    with PlanDB(fast_tmp / "replayed.sqlite") as db:
        _, rows, _ = run(w, space, db, unpruned, replay)
    missing = {cand_of(r).key for r in rows if r.error == NOT_RECORDED}
    assert missing and missing <= {c.key for c in replay.calls}
    for r in rows:
        key = cand_of(r).key
        if key in missing:
            assert r.status == "failed" and key not in replay.recorded
        elif ran(r):
            assert replay.recorded[key].median_s == r.measured_s
    with PlanDB(fast_tmp / "fallback.sqlite") as db:
        _, rows, _ = run(w, space, db, unpruned, with_fallback)
    assert all(r.status == "ok" for r in rows)
    fallen = [c for c in with_fallback.calls if c.key not in with_fallback.recorded]
    assert fallen and [c for c, _, _ in with_fallback.fallback.calls] == fallen


# ---- the shared study -------------------------------------------------------------------------

def shared(folder, budget: int):
    """A search whose workers share an Optuna study through a journal file in ``folder``."""
    return dataclasses.replace(CHEAP, budget=budget, local_every=3,
                               storage=f"journal:{folder / 'study.log'}")


def assert_exactly_the_budget(w, config, db, backends) -> list[StoredTrial]:
    """The shared study and the plan DB hold exactly ``budget`` finished trials, numbered
    0..budget-1; a worker measured a candidate for each trial that ran one, and only then."""
    name = shared_study_name(fake_key(w), config)
    study = optuna.load_study(study_name=name, storage=open_storage(config.storage))
    trials = study.get_trials(deepcopy=False)
    assert [t.number for t in trials] == list(range(config.budget))
    assert all(t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
               for t in trials)
    rows = db.trials(fake_key(w).key)
    assert [r.number for r in rows] == list(range(config.budget))
    assert {r.study for r in rows} == {name}
    assert sorted(name_of(r) for r in rows[:3]) == sorted(NAMED)
    keys = [k for b in backends for k in measured_keys(b)]
    assert sorted(keys) == sorted(cand_of(r).key for r in rows if ran(r))
    return rows


def test_two_workers_in_turn_run_exactly_the_budget(w, space, fast_tmp, fresh_db):
    first, _, a = run(w, space, fresh_db, shared(fast_tmp, 6))
    assert first.progress.new == 6 and first.progress.done == 6
    # a second worker with a larger budget queues what is missing and runs only that
    second, _, b = run(w, space, fresh_db, shared(fast_tmp, 10))
    assert second.progress.new == 4 and second.progress.done == 10
    # a third with the same budget finds nothing left to run
    third, _, c = run(w, space, fresh_db, shared(fast_tmp, 10))
    assert third.progress.new == 0 and c.calls == []
    rows = assert_exactly_the_budget(w, shared(fast_tmp, 10), fresh_db, [a, b, c])
    keys = measured_keys(a) + measured_keys(b)
    assert len(keys) == len(set(keys))      # the second saw the first's trials in the plan DB
    best = assert_best_is_min_ok(fresh_db, fake_key(w), rows)
    assert third.progress.best_s == best.measured_s


def test_two_workers_at_once_run_exactly_the_budget(w, space, fast_tmp):
    config = shared(fast_tmp, 12)
    backends = [FakeBackend(w, DEV), FakeBackend(w, DEV)]
    results, errors = [], []

    def worker(backend):
        try:
            with PlanDB(fast_tmp / "plans.sqlite") as db:     # a connection per thread
                results.append(run(w, space, db, config, backend)[0])
        except Exception as e:      # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=worker, args=(b,)) for b in backends]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and len(results) == 2
    assert sum(r.progress.new for r in results) == 12        # no trial ran twice
    # (both threads share a pid, so a seed: two may pick the same candidate at once)
    with PlanDB(fast_tmp / "plans.sqlite") as db:
        assert_exactly_the_budget(w, config, db, backends)
