"""The test backends themselves: the fake's times (model x seeded noise) and early stops (the
plans', through autotune.backends.base.timed_runs), its scripted failures, and the replay's reading
of a recorded plan database."""
from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

from autotune.backends.base import Measurement, MeasureSettings, timed_runs
from autotune.backends.factory import backend_kind
from autotune.backends.fake import FakeBackend
from autotune.backends.worker import timeout_message
from autotune.backends.replay import NOT_RECORDED, ReplayBackend, recorded_measurements
from costmodel import estimate
from costmodel.devices import CPU_DEFAULT
from db.keys import PlanKey
from db.records import StoredTrial
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace


@pytest.fixture
def w(small):
    return small("gated_mlp")


@pytest.fixture
def plans(w):
    space = SearchSpace(w, backend_kind("cpu").tile_bounds)
    return {n: named_plan(space, n) for n in ("unfused", "heuristic", "greedy")}


# ---- the early stop every backend shares -----------------------------------------------------

def counting(times):
    """A ``run`` callback handing out ``times`` in order; ``calls`` counts the runs made."""
    it = iter(times)

    def run():
        run.calls += 1
        return next(it)
    run.calls = 0
    return run


def runs(s: MeasureSettings, first: float, run, best_s: float | None) -> tuple[float, ...]:
    return tuple(timed_runs(lambda: first, run, s.warmup, s.repeats, s.cutoff(best_s)))


def test_timed_runs_without_a_best_takes_the_warmups_then_every_repeat():
    s = MeasureSettings(warmup=2, repeats=3)
    run = counting([9.0, 9.0, 1.5, 1.2])
    assert runs(s, 1.0, run, None) == (1.0, 1.5, 1.2)     # warm-ups not counted
    assert run.calls == 4


def test_timed_runs_gives_up_after_a_first_run_far_off_the_best():
    s = MeasureSettings(warmup=1, repeats=3, give_up_factor=1.15)
    run = counting([])
    assert runs(s, 1.16, run, best_s=1.0) == (1.16,) and run.calls == 0
    assert len(runs(s, 1.14, counting([1.0, 1.0, 1.0]), best_s=1.0)) == 3


def test_timed_runs_stops_after_two_runs_both_out_of_contention():
    s = MeasureSettings(warmup=0, repeats=5, contend_factor=1.05)
    assert runs(s, 1.10, counting([1.06, 1.0, 1.0]), best_s=1.0) == (1.10, 1.06)
    # one of the two within reach of the best: every repeat
    assert runs(s, 1.10, counting([1.04, 1.0, 1.0, 1.0]), 1.0) == (1.10, 1.04, 1.0,
                                                                          1.0, 1.0)


# ---- the fake --------------------------------------------------------------------------------

def test_fake_times_are_the_model_times_seeded_noise(w, plans):
    cand = plans["heuristic"]
    pred = estimate(w, cand, CPU_DEFAULT).total_s
    fake = FakeBackend(w, CPU_DEFAULT, seed=1, sigma=0.1)
    times = [fake.run_time(cand, i) for i in range(4)]
    assert len(set(times)) == 4 and all(0.5 * pred < t < 2 * pred for t in times)
    again = FakeBackend(w, CPU_DEFAULT, seed=1, sigma=0.1)
    assert [again.run_time(cand, i) for i in (3, 2, 1, 0)] == times[::-1]   # any order
    assert FakeBackend(w, CPU_DEFAULT, seed=2, sigma=0.1).run_time(cand, 0) != times[0]
    exact = FakeBackend(w, CPU_DEFAULT, sigma=0.0)
    m = exact.measure(cand, 60, None)
    est = estimate(w, cand, CPU_DEFAULT)
    groups = tuple((g.anchor, g.predicted_s) for g in est.groups)    # the model's shares
    assert [a for a, _ in m.groups] == [a for a, _ in groups]
    assert [s for _, s in m.groups] == pytest.approx([s for _, s in groups])
    assert dataclasses.replace(m, groups=()) == Measurement("ok", pred, (pred,) * 3, 0.0)
    assert exact.calls == [(cand, 60, None)]


def test_fake_measure_stops_early_as_the_worker_does(w, plans):
    cand = plans["heuristic"]
    pred = estimate(w, cand, CPU_DEFAULT).total_s
    fake = FakeBackend(w, CPU_DEFAULT, sigma=0.0, settings=MeasureSettings(repeats=4))
    assert len(fake.measure(cand, 60, None).times) == 4
    assert fake.measure(cand, 60, best_s=pred / 2).times == (pred,)          # gave up
    m = fake.measure(cand, 60, best_s=pred / 1.1)                           # out of contention
    assert m.times == (pred, pred) and m.median_s == statistics.median(m.times)


def test_fake_times_out_past_the_limit_warmups_included(w, plans):
    cand = plans["unfused"]
    pred = estimate(w, cand, CPU_DEFAULT).total_s
    fake = FakeBackend(w, CPU_DEFAULT, sigma=0.0, settings=MeasureSettings(warmup=2, repeats=3))
    assert fake.measure(cand, 5.5 * pred, None).status == "ok"        # 5 runs in all
    assert fake.measure(cand, 4.5 * pred, None) == Measurement(
        "failed", error=timeout_message(4.5 * pred))


def test_fake_scripted_failures_and_hangs(w, plans):
    fake = FakeBackend(w, CPU_DEFAULT, fails=lambda c: "boom" if c.name == "greedy" else None,
                       hangs=lambda c: c.name == "unfused")
    assert fake.measure(plans["greedy"], 60, None) == Measurement("failed", error="boom")
    hang = fake.measure(plans["unfused"], 42, None)
    assert hang == Measurement("failed", error="timeout: no result within 42 s")
    assert fake.measure(plans["heuristic"], 60, None).status == "ok"
    assert fake.reclaimable_bytes() == 0 and not fake.closed
    fake.close()
    assert fake.closed


# ---- the replay ------------------------------------------------------------------------------

def row(cand, status, measured=None, times=None, error=None, rel_err=None) -> StoredTrial:
    """A stored trial as the plan database gives it back."""
    key = PlanKey("w0", "1", "{}", "{}", 2)
    return StoredTrial.from_row({
        **key.columns(), "id": 0, "study": "s", "number": 0, "candidate_json": cand.to_json(),
        "status": status, "predicted_s": None, "measured_s": measured, "error": error,
        "params_json": None, "options_json": None, "rel_err": rel_err, "created": "",
        "times_json": json.dumps(times) if times is not None else None})


def test_recorded_measurements_keep_each_candidates_first_measurement(plans):
    un, heur, greedy = plans["unfused"], plans["heuristic"], plans["greedy"]
    rows = [row(un, "pruned", error="predicted ..."),
            row(un, "ok", 2.0, [2.0, 2.1, 1.9], rel_err=1e-7),
            row(un, "ok", 2.0, error="same candidate as an earlier trial"),
            row(heur, "failed", error="worker crashed (exit code 3)", rel_err=None),
            row(greedy, "pruned", error="predicted ...")]
    rec = recorded_measurements(rows)
    assert rec == {un.key: Measurement("ok", 2.0, (2.0, 2.1, 1.9), 1e-7),
                   heur.key: Measurement("failed", error="worker crashed (exit code 3)")}
    assert recorded_measurements([row(un, "ok", 3.0)])[un.key].times == (3.0,)


def test_replay_answers_as_recorded_and_says_what_it_never_saw(w, plans):
    un, greedy = plans["unfused"], plans["greedy"]
    replay = ReplayBackend(recorded_measurements([row(un, "ok", 2.0, [2.0])]))
    assert replay.measure(un, 1e-9, best_s=1e-9) == Measurement("ok", 2.0, (2.0,), None)
    assert replay.measure(greedy, 60, None) == Measurement("failed", error=NOT_RECORDED)
    fake = FakeBackend(w, CPU_DEFAULT)
    backed = ReplayBackend(replay.recorded, fallback=fake)
    assert backed.measure(greedy, 60, None) == FakeBackend(w, CPU_DEFAULT).measure(greedy, 60,
                                                                                   None)
    assert [c for c, _, _ in fake.calls] == [greedy] and replay.calls == [un, greedy]
    backed.close()
    assert fake.closed
