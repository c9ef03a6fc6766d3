"""The search end to end on the CPU: through the library (and its recording replayed), through
the CLI, killed and resumed, and the load_best round trip.  The search's own logic (pruning,
local search, proposals, failures, resume, the shared study) is tested on the fake backend in
test_search_logic.py and test_search_replay.py.

Small dims throughout (trimul_outgoing at N=16, C=8) so that every search takes seconds.
"""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

import autotune
from autotune.api import NoCachedPlanWarning, make_executable, run_search
from autotune.backends.factory import backend_kind
from autotune.backends.replay import ReplayBackend
from autotune.cli.app import app
from autotune.environment import NoGPUError, detect
from autotune.backends.base import relative_error
from autotune.search.config import SearchConfig
from autotune.search.loop import search
from db.keys import PlanKey
from db.records import BestPlan, Status, TrialOutcome
from db.store import PlanDB
from search_spaces import load_workload
from search_spaces.candidate import Candidate
from search_spaces.plans import named_plan, seed_plans
from search_spaces.space import SearchSpace

from tests.support.caches import link_caches
from tests.support.skips import GPU_PRESENT_SKIP

DIMS = {"N": 16, "C": 8}
DIMS_CLI = "N=16,C=8"
NAMED = ("unfused", "heuristic", "greedy")
# the seed plans of trimul at these dims: the named plans, the chained plan (its triangle
# einsum walking k over the gated projection a, a plain chain of 16 accumulators a row) and
# the inlined plan (its layer norms' centred tensors inlined), measured first
SEEDS = NAMED + ("chained", "inlined")
# the search's own trials; its confirmation at the end: test_confirm_end_to_end.py
LIB_CONFIG = SearchConfig(budget=12, model_pool=50, model_seeds=3, confirm_rounds=0)
runner = CliRunner()


@pytest.fixture(scope="module")
def w():
    return load_workload("trimul_outgoing", DIMS)


def cpu_key(w) -> PlanKey:
    return PlanKey.for_env(w.hash, detect("cpu"))


def assert_matches_reference(w, fn, seed: int) -> None:
    """``fn`` on fresh random inputs agrees with the float64 reference under w.rtol."""
    inputs = w.random_inputs(seed)
    assert all(np.any(a != 0) for a in inputs.values())
    ref = autotune.reference(w, inputs)
    out = fn(**inputs)
    assert set(out) == set(w.outputs)
    for name in w.outputs:
        assert out[name].shape == ref[name].shape
        assert out[name].dtype == np.dtype(w.dtype)
        err = relative_error(out[name], ref[name])
        assert err <= w.rtol, f"{name}: relative error {err:.3g} > rtol {w.rtol:g}"


def assert_best_is_min_ok(db: PlanDB, key: PlanKey) -> BestPlan:
    rows = db.trials(key.key)
    ok = [r for r in rows if r.status == "ok"]
    assert ok
    best = db.best(key.key)
    assert best is not None
    fastest = min(r.measured_s for r in ok)
    assert best.measured_s == fastest
    winner = next(r for r in ok if r.number == best.trial_number and r.study == best.study)
    assert winner.measured_s == fastest
    assert winner.candidate == best.candidate
    return best


# ---- 1. a search through the library ----------------------------------------------------------

@pytest.fixture(scope="module")
def lib_search(w, tmp_path_factory, shared_caches):
    path = link_caches(tmp_path_factory.mktemp("lib"), shared_caches) / "p.sqlite"
    seen = []
    result = run_search(w, "cpu", db=path, config=LIB_CONFIG,
                        on_trial=lambda p: seen.append(p.done))
    return path, result, seen


def test_search_runs_the_budget_and_records_every_trial(w, lib_search):
    path, result, seen = lib_search
    assert result.key == cpu_key(w)
    p = result.progress
    assert p.done == 12 and p.measured + p.pruned + p.failed == 12
    assert seen == list(range(1, 13))                   # the callback saw every trial
    with PlanDB(path) as db:
        rows = db.trials(result.key.key)
        assert len(rows) == 12
        assert [r.number for r in rows] == list(range(12))
        assert {r.study for r in rows} == {result.study}
        counts = db.trial_counts(result.key.key)
        assert counts == {"ok": p.measured, "failed": p.failed, "pruned": p.pruned}
        # the seed plans come first, fastest predicted first; none fails on the CPU (the cost
        # model may prune a named plan against a faster measured plan, never the first trial)
        assert sorted(c.name for c in seed_plans(SearchSpace(w))) == sorted(SEEDS)
        seeds = rows[:len(SEEDS)]
        assert sorted(r.name for r in seeds) == sorted(SEEDS)
        assert [r.predicted_s for r in seeds] == sorted(r.predicted_s for r in seeds)
        assert rows[0].status == "ok", rows[0].error
        assert all(r.status in ("ok", "pruned") for r in seeds), [r.error for r in seeds]
        for r in rows:
            if r.status == "pruned" and r.corrected_s not in (None, r.predicted_s):
                # pruned while a learned correction was active: corrected against corrected
                assert r.error.startswith(f"corrected prediction {r.corrected_s:.3g} s "
                                          f"(analytic {r.predicted_s:.3g} s) > 2 x ")
            elif r.status == "pruned":
                assert r.error.startswith(f"predicted {r.predicted_s:.3g} s > 2 x ")
        for r in rows:
            assert r.predicted_s is not None and r.predicted_s > 0
            if r.status == "ok":
                assert r.measured_s > 0 and r.error is None
            else:
                assert r.measured_s is None and r.error
        assert db.workload(w.hash)["name"] == "trimul_outgoing"
        best = assert_best_is_min_ok(db, result.key)
        assert result.best == best
        assert p.best_s == best.measured_s
        assert db.check() == []


def test_best_plan_verifies_on_fresh_inputs(w, lib_search, tmp_path):
    path, result, _ = lib_search
    cand = result.best.to_candidate()
    fn = make_executable(w, cand, "cpu", tmp_path)
    assert_matches_reference(w, fn, seed=12345)         # the search measured with seed 0
    # outputs are fresh arrays: a second call does not overwrite the first one's results
    a_in, b_in = w.random_inputs(7), w.random_inputs(8)
    a = fn(**a_in)
    a_copy = {k: v.copy() for k, v in a.items()}
    fn(**b_in)
    for k in a:
        np.testing.assert_array_equal(a[k], a_copy[k])


def test_the_recorded_search_replays_trial_for_trial(w, lib_search, tmp_path):
    """The replay backend on a real recording: the same search answered from the recorded
    measurements takes the same decisions, so it writes the same trials."""
    path, result, _ = lib_search
    with PlanDB(path) as db:
        recorded = db.trials(result.key.key)
        replay = ReplayBackend.from_db(db, result.key.key)
    env = detect("cpu")
    with PlanDB(tmp_path / "replayed.sqlite") as db:
        again = search(w, SearchSpace(w, backend_kind("cpu").tile_bounds), replay, db,
                       result.key, backend_kind("cpu").device_spec(env), LIB_CONFIG)
        replayed = db.trials(result.key.key)
    fields = ("number", "candidate", "status", "predicted_s", "measured_s", "error", "params",
              "times", "rel_err")
    assert [[getattr(r, f) for f in fields] for r in replayed] == \
        [[getattr(r, f) for f in fields] for r in recorded]
    assert again.best.candidate == result.best.candidate
    assert all(c.key in replay.recorded for c in replay.calls)


# ---- 5. load_best ------------------------------------------------------------------------------

def test_load_best_returns_the_cached_best(w, lib_search):
    path, result, _ = lib_search
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoCachedPlanWarning)
        fn = autotune.load_best(w, device="cpu", db=path)
    assert fn.cand.key == result.best.to_candidate().key
    assert_matches_reference(w, fn, seed=99)


def test_load_best_reads_autotune_db_by_default(w, lib_search, monkeypatch):
    path, result, _ = lib_search
    monkeypatch.setenv("AUTOTUNE_DB", str(path))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoCachedPlanWarning)
        fn = autotune.load_best(w)
    assert fn.cand.key == result.best.to_candidate().key


def test_load_best_with_empty_db_warns_and_runs_the_heuristic_plan(w, tmp_path):
    with pytest.warns(NoCachedPlanWarning, match="heuristic"):
        fn = autotune.load_best(w, device="cpu", db=tmp_path / "empty.sqlite")
    assert fn.cand.name == "heuristic"
    assert_matches_reference(w, fn, seed=5)


@pytest.mark.parametrize("part", ["libraries_json", "codegen", "device_json", "space_version"])
def test_load_best_ignores_a_plan_cached_for_other_versions(w, tmp_path, part):
    """``codegen``: the plan was measured with other generated code (autotune.code_version)."""
    path = tmp_path / "p.sqlite"
    current = cpu_key(w)
    parts = current.parts()
    if part == "space_version":
        parts[part] = parts[part] + "-old"
    else:
        col = "device_json" if part == "device_json" else "libraries_json"
        d = json.loads(parts[col])
        d[{"libraries_json": "numpy", "codegen": "codegen"}.get(part, "name")] = "0.0.1-other"
        parts[col] = json.dumps(d, sort_keys=True)
    other = PlanKey(**parts)
    assert other.key != current.key
    foreign = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "unfused")
    foreign = Candidate(foreign.fused, foreign.layouts, foreign.schedules, "foreign")
    with PlanDB(path) as db:
        db.add_workload(w.hash, w.name, json.dumps(w.canonical(), sort_keys=True))
        assert db.add_trial(other, "tpe-seed0", 0, TrialOutcome(foreign, Status.OK, 1e-3, 1e-9))
        assert db.best(other.key) is not None          # it is cached ... under the other key
        assert db.best(current.key) is None
    label = {"libraries_json": r"library versions \(numpy\)",
             "codegen": r"library versions \(codegen\)", "device_json": "device",
             "space_version": "search space"}[part]
    with pytest.warns(NoCachedPlanWarning,
                      match=rf"plans cached for trimul_outgoing do not apply here \({label} "
                            r"changed\).*using the heuristic plan"):
        fn = autotune.load_best(w, device="cpu", db=path)
    assert fn.cand.name == "heuristic"
    assert_matches_reference(w, fn, seed=6)


def test_bumping_the_space_version_makes_cached_plans_stale(w, tmp_path, monkeypatch):
    """The one SPACE_VERSION (search_spaces.space) is part of every plan key: bumping it, as a
    change of the candidate encoding must, turns a cached plan into a stale one."""
    import search_spaces.space
    path = tmp_path / "p.sqlite"
    before = cpu_key(w)
    assert before.space_version == search_spaces.space.SPACE_VERSION
    cached = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "unfused")
    cached = Candidate(cached.fused, cached.layouts, cached.schedules, "cached")
    with PlanDB(path) as db:
        db.add_workload(w.hash, w.name, json.dumps(w.canonical(), sort_keys=True))
        assert db.add_trial(before, "tpe-seed0", 0, TrialOutcome(cached, Status.OK, 1e-3, 1e-9))
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoCachedPlanWarning)
        assert autotune.load_best(w, device="cpu", db=path).cand.name == "cached"
    monkeypatch.setattr(search_spaces.space, "SPACE_VERSION",
                        search_spaces.space.SPACE_VERSION + "-bumped")
    after = cpu_key(w)
    assert after.key != before.key and after.space_version.endswith("-bumped")
    with pytest.warns(NoCachedPlanWarning, match=r"\(search space changed\)"):
        fn = autotune.load_best(w, device="cpu", db=path)
    assert fn.cand.name == "heuristic"


def test_load_best_uses_a_plan_cached_under_schema_1_after_migration(w, tmp_path):
    """A plan cached by the schema-1 code (key with schema_version 1) is still this
    machine's plan: opening migrates the file and re-keys it, so load_best uses it."""
    import sqlite3
    from sqlite_utils import Database
    from db.schema import MIGRATIONS
    path = tmp_path / "old.sqlite"
    old = PlanKey(**{**cpu_key(w).parts(), "schema_version": 1})
    plan = named_plan(SearchSpace(w, backend_kind("cpu").tile_bounds), "greedy")
    plan = Candidate(plan.fused, plan.layouts, plan.schedules, "cached-under-v1")
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    MIGRATIONS[1](Database(conn))
    conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    conn.execute("INSERT INTO best_plans VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (*old.columns().values(), w.name, plan.to_json(), 0.01, 0.01, "tpe-seed0", 0,
                  "2026-01-01"))
    conn.execute("INSERT INTO trials (plan_key, workload_hash, space_version, device_json, "
                 "libraries_json, schema_version, study, number, candidate_json, status, "
                 "measured_s, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 (*old.columns().values(), "tpe-seed0", 0, plan.to_json(), "ok", 0.01,
                  "2026-01-01"))
    conn.execute("COMMIT")
    conn.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoCachedPlanWarning)
        fn = autotune.load_best(w, device="cpu", db=path)
    assert fn.cand.name == "cached-under-v1" and fn.cand.key == plan.key
    assert_matches_reference(w, fn, seed=8)


# ---- 2. the CLI --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cli_search(tmp_path_factory, shared_caches):
    path = link_caches(tmp_path_factory.mktemp("cli"), shared_caches) / "p.sqlite"
    r = runner.invoke(app, ["search", "trimul_outgoing", "--dims", DIMS_CLI, "--budget", "6",
                            "--db", str(path), "--confirm-rounds", "0"])
    return path, r


def test_cli_search_prints_the_best(w, cli_search):
    path, r = cli_search
    assert r.exit_code == 0, r.output
    key = cpu_key(w)
    with PlanDB(path) as db:
        assert len(db.trials(key.key)) == 6
        best = assert_best_is_min_ok(db, key)
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("trimul_outgoing: 6 trials")
    assert f"best {best.measured_s:.4g} s" in last
    assert key.key[:16] in last
    assert "Traceback" not in r.output


def test_cli_show_best_json(w, cli_search):
    path, _ = cli_search
    r = runner.invoke(app, ["show-best", "trimul_outgoing", "--dims", DIMS_CLI, "--db",
                            str(path), "--format", "json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert len(rows) == 1
    row = rows[0]
    key = cpu_key(w)
    with PlanDB(path) as db:
        best = db.best(key.key)
        trials = db.trials(key.key)
    assert row["plan_key"] == key.key
    assert row["workload"] == "trimul_outgoing" and row["dims"] == DIMS
    assert row["measured_s"] == best.measured_s
    assert row["candidate"] == best.candidate
    measured = {t.name for t in trials if t.status == "ok"} & set(SEEDS)
    assert "unfused" in measured                        # the first trial: never pruned
    assert set(row["speedup"]) == measured
    for n in measured:
        t = min(t.measured_s for t in trials if t.name == n and t.status == "ok")
        assert row["named_s"][n] == t
        assert row["speedup"][n] == pytest.approx(t / best.measured_s)
        assert row["speedup"][n] >= 1.0                # the best is at least as fast as each
    for n in set(SEEDS) - measured:                     # pruned by the cost model, not failed
        assert [t.status for t in trials if t.name == n] == ["pruned"]
    assert sum(row["trials"].values()) == 6
    assert row["stale"] == ""


def test_cli_show_best_table_and_rerun_continues_nothing(w, cli_search):
    path, _ = cli_search
    r = runner.invoke(app, ["show-best", "trimul_outgoing", "--dims", DIMS_CLI, "--db",
                            str(path)])
    assert r.exit_code == 0, r.output
    assert cpu_key(w).key[:16] in r.stdout and "vs unfused" in r.stdout
    # the same search again: its 6 trials are replayed, none is added
    r = runner.invoke(app, ["search", "trimul_outgoing", "--dims", DIMS_CLI, "--budget", "6",
                            "--db", str(path), "--confirm-rounds", "0"])
    assert r.exit_code == 0, r.output
    with PlanDB(path) as db:
        assert len(db.trials(cpu_key(w).key)) == 6


def test_cli_show_best_empty_db_is_one_line_error(tmp_path):
    PlanDB(tmp_path / "none.sqlite").close()    # empty (a missing one: test_missing_db)
    r = runner.invoke(app, ["show-best", "trimul_outgoing", "--dims", DIMS_CLI, "--db",
                            str(tmp_path / "none.sqlite")])
    assert r.exit_code == 1
    assert len(r.stderr.strip().splitlines()) == 1 and "no cached plan" in r.stderr
    assert "Traceback" not in r.output


def test_cli_search_device_cuda_without_gpu_is_one_line_error(tmp_path):
    try:
        detect("cuda")
        pytest.skip(GPU_PRESENT_SKIP)
    except NoGPUError:
        pass
    r = runner.invoke(app, ["search", "trimul_outgoing", "--dims", DIMS_CLI, "--budget", "2",
                            "--device", "cuda", "--db", str(tmp_path / "p.sqlite")])
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("autotune: --device cuda") and "--device cpu" in lines[0]
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)


def test_cli_search_unknown_sampler(tmp_path):
    path = tmp_path / "p.sqlite"
    r = runner.invoke(app, ["search", "trimul_outgoing", "--dims", DIMS_CLI, "--budget", "2",
                            "--sampler", "nope", "--db", str(path)])
    assert r.exit_code == 1
    assert "--sampler" in r.stderr and "tpe" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.output
    assert not path.exists()                            # refused before anything ran


# ---- 3. killed mid-run, then resumed -----------------------------------------------------------

def _count(path: Path) -> int:
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            return con.execute("SELECT COUNT(*) FROM trials").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_killed_search_resumes(w, tmp_path, shared_caches):
    path = link_caches(tmp_path, shared_caches) / "p.sqlite"
    cmd = [sys.executable, "-m", "autotune.cli", "search", "trimul_outgoing", "--dims",
           DIMS_CLI, "--db", str(path), "--confirm-rounds", "0", "--budget"]
    errlog = open(tmp_path / "stderr.txt", "w+")
    proc = subprocess.Popen(cmd + ["40"], stdout=subprocess.DEVNULL, stderr=errlog,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 150
        while _count(path) < 5:
            assert proc.poll() is None, f"search exited early ({proc.returncode}): " + \
                (tmp_path / "stderr.txt").read_text()
            assert time.monotonic() < deadline, "no 5 trials within 150 s"
            time.sleep(0.1)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)             # the CLI and its measuring worker
        proc.wait(30)
        errlog.close()
    assert proc.returncode == -signal.SIGKILL
    key = cpu_key(w)
    with PlanDB(path) as db:
        assert db.check() == []
        before = db.trials(key.key)
    n = len(before)
    assert 5 <= n < 40, "the kill came too late to test anything"
    assert [r.number for r in before] == list(range(n))
    assert sorted(r.name for r in before[:len(SEEDS)]) == sorted(SEEDS)

    r = subprocess.run(cmd + [str(n + 3)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=150)
    assert r.returncode == 0, r.stderr
    assert f"{n + 3} trials" in r.stdout
    with PlanDB(path) as db:
        after = db.trials(key.key)
        assert len(after) == n + 3
        assert after[:n] == before                      # earlier rows untouched
        assert [r.number for r in after] == list(range(n + 3))
        assert {r.study for r in after} == {"tpe-seed0"}
        # the named plans were not enqueued (and run) a second time
        assert [r.name for r in after[n:]] == ["", "", ""]
        assert_best_is_min_ok(db, key)
        assert db.check() == []
