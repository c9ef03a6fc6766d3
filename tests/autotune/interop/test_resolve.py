"""Plans for many shapes: the plan cached for the exact dims, else the nearest tuned shape's
plan adapted (tiles clamped, layouts kept) and verified once, else the heuristic plan, each
but the first with a warning; resolved once per process."""
from __future__ import annotations

import json
import warnings
from dataclasses import replace

import numpy as np
import pytest

import autotune.interop.resolve as resolve_mod
from autotune.api import NoCachedPlanWarning, space_for
from autotune.backends.base import verify
from autotune.backends.factory import resolve
from autotune.interop.adapt import _clamp, adapt
from autotune.interop.function import DTypeError, PlanFunction
from autotune.interop.resolve import AdaptedPlanWarning, PlanSource
from autotune.reference import reference
from db.keys import PlanKey
from db.records import TrialOutcome
from db.store import PlanDB
from search_spaces import load_workload
from search_spaces.candidate import GroupSchedule
from search_spaces.plans import named_plan


def tuned(db_path, n: int, c: int = 8, tile: int | None = None, name: str = "tuned"):
    """Store a best plan for trimul_outgoing at N=n under this machine's key, as a search
    would: the greedy plan, its first tiles set to ``tile`` where given."""
    w = load_workload("trimul_outgoing", {"N": n, "C": c})
    cand = named_plan(space_for(w, "cpu"), "greedy")
    if tile is not None:
        cand = replace(cand, schedules=tuple(
            GroupSchedule(s.anchor, (tile,) + s.tiles[1:], s.impl) for s in cand.schedules))
    cand = replace(cand, name=name)
    with PlanDB(db_path) as db:
        db.add_workload(w.hash, w.name, json.dumps(w.canonical(), sort_keys=True))
        db.add_trial(PlanKey.for_env(w.hash, resolve("cpu")), "test", 0,
                     TrialOutcome(cand, "ok", measured_s=0.01, times=(0.01,)))
    return w, cand


def call(fn: PlanFunction, n: int, seed: int = 3):
    w = load_workload("trimul_outgoing", {"N": n, "C": 8})
    x = w.random_inputs(seed)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = fn(**x)
    err, why = verify(outs, reference(w, x), w.rtol)
    assert not why, why
    return x, caught


@pytest.fixture
def db(fast_tmp):
    return fast_tmp / "plans.sqlite"


def test_exact_dims_use_their_cached_plan_without_a_warning(db):
    w, cand = tuned(db, 12)
    fn = PlanFunction(w, "cpu", db)
    x, caught = call(fn, 12)
    assert not caught
    res = fn.resolution({n: a.shape for n, a in x.items()})
    assert res.source == PlanSource.EXACT and res.candidate == cand.to_dict()


def test_untuned_dims_run_the_nearest_plan_adapted_and_verified(db):
    tuned(db, 8, tile=4, name="at8")
    tuned(db, 32, tile=16, name="at32")
    w16, _ = tuned(db, 16)       # the function's own dims, not the ones it is called at
    fn = PlanFunction(w16, "cpu", db)
    x, caught = call(fn, 12)
    [warn] = [c for c in caught if c.category is AdaptedPlanWarning]
    msg = str(warn.message)
    # 16 is nearer 12 (|log 16/12| = 0.29) than 8 (0.41) and 32 (0.98)
    assert "running the plan tuned at N=16,C=8, adapted" in msg and "\n" not in msg
    assert "autotune search trimul_outgoing --dims N=12,C=8 --device cpu" in msg
    res = fn.resolution({n: a.shape for n, a in x.items()})
    assert res.source == PlanSource.NEAREST and dict(res.tuned_dims) == {"N": 16, "C": 8}
    assert res.rel_err is not None and res.rel_err <= 1e-4 and res.note == msg
    # called again: resolved already, no warning, no database
    _, again = call(fn, 12, seed=4)
    assert not again


def test_the_nearest_shape_wins_and_its_tiles_are_clamped(db):
    w8, c8 = tuned(db, 8, tile=4, name="at8")
    w32, c32 = tuned(db, 32, tile=16, name="at32")
    fn = PlanFunction(w8, "cpu", db)
    x, caught = call(fn, 12)      # 8 is nearer than 32
    res = fn.resolution({n: a.shape for n, a in x.items()})
    assert res.candidate["name"].startswith("at8@") and res.candidate["layouts"] == \
        c8.to_dict()["layouts"]
    x, caught = call(fn, 24)      # 32 is nearer (0.29) than 8 (1.10)
    res = fn.resolution({n: a.shape for n, a in x.items()})
    assert res.candidate["name"].startswith("at32@")
    assert all(s["tiles"][0] == 16 for s in res.candidate["schedules"])


def test_nothing_tuned_runs_the_heuristic_plan_with_a_warning(db):
    w = load_workload("trimul_outgoing", {"N": 12, "C": 8})
    fn = PlanFunction(w, "cpu", db)
    x, caught = call(fn, 12)
    [warn] = [c for c in caught if c.category is NoCachedPlanWarning]
    assert "no plan tuned for it at any dims; using the heuristic plan; tune it with " \
        "`autotune search trimul_outgoing --dims N=12,C=8 --device cpu`" in str(warn.message)
    assert fn.resolution({n: a.shape for n, a in x.items()}).source == PlanSource.HEURISTIC


def test_an_adapted_plan_that_fails_verification_is_not_used(db, monkeypatch):
    tuned(db, 16)
    monkeypatch.setattr(resolve_mod, "verified", lambda plan, w: (np.inf, "wrong result"))
    fn = PlanFunction(load_workload("trimul_outgoing", {"N": 16, "C": 8}), "cpu", db)
    _, caught = call(fn, 12)
    [warn] = [c for c in caught if c.category is NoCachedPlanWarning]
    assert "the plan tuned at N=16,C=8 failed verification at these dims (wrong result); " \
        "using the heuristic plan" in str(warn.message)


def test_lookups_are_cached_per_process(db, monkeypatch):
    tuned(db, 12)
    w = load_workload("trimul_outgoing", {"N": 12, "C": 8})
    call(PlanFunction(w, "cpu", db), 12)

    def no_db(*a, **k):
        raise AssertionError("a resolved shape opened the database")
    monkeypatch.setattr(resolve_mod, "open_db", no_db)
    call(PlanFunction(w, "cpu", db), 12, seed=5)     # a second function: the process cache
    resolve_mod.forget()
    with pytest.raises(AssertionError, match="opened the database"):
        call(PlanFunction(w, "cpu", db), 12)


def test_clamping():
    assert [_clamp(t, 16, 12) for t in (4, 8, 16)] == [4, 8, 12]
    assert _clamp(16, 16, 64) == 16            # a whole extent of 16 stays a tile of 16
    assert _clamp(702, 702, 1024) == 512       # no power of two: the largest one under it
    assert _clamp(702, 702, 384) == 384


def test_adapt_keeps_everything_but_tiles():
    w32 = load_workload("trimul_outgoing", {"N": 32, "C": 8})
    w12 = load_workload("trimul_outgoing", {"N": 12, "C": 8})
    cand = named_plan(space_for(w32, "cpu"), "greedy")
    got = adapt(cand, w32, w12)
    assert (got.fused, got.layouts, got.orders) == (cand.fused, cand.layouts, cand.orders)
    for s, t in zip(cand.schedules, got.schedules):
        ext = w12.op(s.anchor).out_shape
        assert t.impl == s.impl and all(a <= e for a, e in zip(t.tiles, ext))


def test_dtype_errors_and_binding(db):
    w = load_workload("gated_mlp", {"T": 8, "C": 16, "F": 32})
    fn = PlanFunction(w, "cpu", db)
    x = w.random_inputs(1)
    with pytest.raises(DTypeError, match=r"gated_mlp: input 'x' is float64, the workload takes "
                                         r"float32"):
        fn(**{**x, "x": x["x"].astype(np.float64)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bound = fn.bind(**{n: x[n] for n in w.params})
        assert bound.params["w_up"] is x["w_up"]      # contiguous already: not copied
        np.testing.assert_array_equal(bound(x=x["x"])["out"], fn(**x)["out"])
    with pytest.raises(ValueError, match=r"missing input\(s\) w_down"):
        fn.bind(**{n: x[n] for n in w.params if n != "w_down"})
    with pytest.raises(ValueError, match=r"unknown input\(s\) w_up \(it takes x\)"):
        bound(x=x["x"], w_up=x["w_up"])
