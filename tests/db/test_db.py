"""The plan database: keys, keep-best, refusal of bad files, migrations, concurrency."""
from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import random
import sqlite3
import subprocess
import sys

import pytest

import db.schema
import db.opening
from autotune.environment import Environment, NoGPUError, detect, detect_cpu
from search_spaces.space import SPACE_VERSION
from db import (MIGRATIONS, SCHEMA_VERSION, DBError, PlanDB, PlanKey,
                check_file, default_db_path)
from db.records import Status, TrialOutcome as T
from search_spaces.candidate import Candidate

ENV = Environment(kind="cpu", name="Test CPU 9000", cores=2,
                  libraries=(("autotune", "0.1.0"), ("cc", "cc 12"), ("numpy", "2.0"),
                             ("optuna", "5.0"), ("python", "3.11.7")))


def C(label: str) -> Candidate:
    """A stand-in candidate told apart by its label: the database stores any candidate."""
    return Candidate((), (), (), name=label)


OK, FAILED, PRUNED = Status.OK, Status.FAILED, Status.PRUNED


def key(workload="w0", env=ENV) -> PlanKey:
    return PlanKey.for_env(workload, env)


def sha(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def make_db(path, n=0) -> PlanKey:
    k = key()
    with PlanDB(path) as pdb:
        pdb.add_workload("w0", "demo", "{}")
        for i in range(n):
            pdb.add_trial(k, "s", i, T(C("x" * 400), OK, 1.0, 1.0 + i))
    return k


# -- keys -----------------------------------------------------------------------
def test_key_is_deterministic_across_processes():
    k = key()
    assert k.key == key().key and len(k.key) == 64
    code = ("from autotune.environment import Environment; from db import PlanKey;"
            f"print(PlanKey.for_env('w0', Environment.from_dict({ENV.to_dict()!r})).key)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONHASHSEED": "12345"})
    assert out.stdout.strip() == k.key


def test_key_changes_with_every_part():
    base = key()
    newer_numpy = Environment.from_dict({**ENV.to_dict(), "libraries": {
        **ENV.library_dict(), "numpy": "2.1"}})
    other_cpu = Environment.from_dict({**ENV.to_dict(), "name": "Other CPU"})
    variants = [key("w1"), PlanKey.for_env("w0", ENV, space_version=SPACE_VERSION + "x"),
                key(env=other_cpu), key(env=newer_numpy),
                PlanKey(**{**base.parts(), "schema_version": SCHEMA_VERSION + 1})]
    assert len({base.key, *(v.key for v in variants)}) == 1 + len(variants)
    # Core count is not part of the device: a taskset run reuses the same plans.
    assert key(env=Environment.from_dict({**ENV.to_dict(), "cores": 1})).key == base.key


def test_environment_round_trip_and_detect():
    cpu = detect_cpu()
    assert cpu.kind == "cpu" and cpu.compute_capability == "" and cpu.cores >= 1
    assert dict(cpu.libraries).keys() >= {"autotune", "numpy", "optuna", "python", "cc"}
    assert Environment.from_dict(cpu.to_dict()) == cpu
    assert detect("auto").kind in ("cpu", "cuda")
    with pytest.raises(ValueError, match="unknown device"):
        detect("tpu")
    try:
        import cupy  # noqa: F401
    except ImportError:
        with pytest.raises(NoGPUError, match="use --device cpu"):
            detect("cuda")


# -- trials and best plans --------------------------------------------------------
def test_keep_best(tmp_path):
    k = key()
    with PlanDB(tmp_path / "p.sqlite") as pdb:
        pdb.add_workload("w0", "demo", "{}")
        assert pdb.best(k.key) is None
        pdb.add_trial(k, "s", 0, T(C("a"), FAILED, 1.0, 0.001, "wrong output"))
        pdb.add_trial(k, "s", 1, T(C("b"), PRUNED, 9.0))
        assert pdb.best(k.key) is None  # failed/pruned never become best
        pdb.add_trial(k, "s", 2, T(C("c"), OK, 1.0, 2.0))
        pdb.add_trial(k, "s", 3, T(C("d"), OK, 1.0, 3.0))   # slower: kept out
        pdb.add_trial(k, "s", 4, T(C("e"), OK, 1.0, 2.0))   # a tie does not replace
        assert pdb.best(k.key).to_candidate() == C("c")
        pdb.add_trial(k, "t", 0, T(C("f"), OK, 0.5, 1.5))   # faster, other study: replaces
        best = pdb.best(k.key)
        assert (best.to_candidate(), best.study, best.trial_number) == (C("f"), "t", 0)
        assert best.workload_name == "demo" and best.measured_s == 1.5
        assert pdb.trials(k.key, "s")[0].measured_s is None  # failed: no time kept
        assert pdb.trial_counts(k.key) == {"ok": 4, "failed": 1, "pruned": 1}
        assert [r.plan_key for r in pdb.best_rows("w0")] == [k.key]
        with pytest.raises(ValueError):
            pdb.add_trial(k, "s", 9, T(C("g"), OK, 1.0, float("nan")))
        assert pdb.check() == []


def test_add_trial_is_idempotent_and_next_number(tmp_path):
    k = key()
    with PlanDB(tmp_path / "p.sqlite") as pdb:
        assert pdb.next_number(k.key, "s") == 0
        assert pdb.add_trial(k, "s", 0, T(C("a"), OK, 1.0, 2.0)) is True
        assert pdb.add_trial(k, "s", 0, T(C("other"), OK, 1.0, 0.1)) is False
        assert [t.to_candidate() for t in pdb.trials(k.key)] == [C("a")]
        assert pdb.best(k.key).measured_s == 2.0
        pdb.add_trial(k, "s", 5, T(C("b"), FAILED, error="boom"))
        assert pdb.next_number(k.key, "s") == 6 and pdb.next_number(k.key, "new") == 0
        assert pdb.append_trial(k, "s", T(C("c"), PRUNED, 3.0)) == 6
        assert [t.number for t in pdb.trials(k.key, "s")] == [0, 5, 6]


def test_check_finds_an_inconsistent_best(tmp_path):
    k = make_db(tmp_path / "p.sqlite", n=3)
    with PlanDB(tmp_path / "p.sqlite") as pdb:
        pdb.db.conn.execute("UPDATE best_plans SET measured_s = 9.0")
        assert any("fastest ok trial" in p for p in pdb.check())
    assert any(k.key[:12] in p for p in check_file(tmp_path / "p.sqlite"))


def test_stale_rows_and_prune(tmp_path):
    old_env = Environment.from_dict({**ENV.to_dict(), "libraries": {
        **ENV.library_dict(), "optuna": "4.0"}})
    old, cur = key(env=old_env), key()
    with PlanDB(tmp_path / "p.sqlite") as pdb:
        pdb.add_trial(old, "s", 0, T(C("a"), OK, 1.0, 1.0))
        pdb.add_trial(old, "s", 1, T(C("b"), FAILED, error="x"))
        pdb.add_trial(cur, "s", 0, T(C("a"), OK, 1.0, 2.0))
        stale = pdb.stale_rows(cur)
        assert [(r["plan_key"], r["reasons"], r["trials"], r["has_best"]) for r in stale] \
            == [(old.key, ["library versions (optuna)"], 2, True)]
        assert pdb.prune(pdb.all_keys() - {r["plan_key"] for r in stale}) == 3
        assert pdb.all_keys() == {cur.key} and pdb.best(old.key) is None


# -- files we must refuse, untouched ----------------------------------------------
def _assert_refused(path, *words):
    before = sha(path)
    with pytest.raises(DBError) as e:
        PlanDB(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg, msg
    for w in words:
        assert w in msg, msg
    assert sha(path) == before
    assert check_file(path) and sha(path) == before
    return msg


def test_random_bytes_refused(tmp_path):
    p = tmp_path / "p.sqlite"
    p.write_bytes(random.Random(1).randbytes(8192))
    _assert_refused(p, "not an SQLite database", "--db")


def test_text_file_refused(tmp_path):
    p = tmp_path / "p.sqlite"
    p.write_text("these are my notes, not a database\n" * 20)
    _assert_refused(p, "text file")


def test_truncated_db_refused(tmp_path):
    p = tmp_path / "p.sqlite"
    make_db(p, n=300)
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    _assert_refused(p, "truncated")
    assert "truncated" in check_file(p)[0]


def test_foreign_sqlite_db_refused(tmp_path):
    p = tmp_path / "other.db"
    with sqlite3.connect(p) as c:
        c.execute("CREATE TABLE notes (x)")
    c.close()
    _assert_refused(p, "not an autotune plan database")


def test_newer_schema_refused(tmp_path):
    p = tmp_path / "p.sqlite"
    make_db(p, n=2)
    c = sqlite3.connect(p)
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(SCHEMA_VERSION + 98),))
    c.commit()
    c.close()
    msg = _assert_refused(p, f"schema {SCHEMA_VERSION + 98} > {SCHEMA_VERSION}", "upgrade autotune")
    assert "newer autotune" in msg and "newer autotune" in check_file(p)[0]


# -- migrations --------------------------------------------------------------------
def test_empty_file_is_migrated_and_good_db_checks_ok(tmp_path):
    assert sorted(MIGRATIONS) == list(range(1, SCHEMA_VERSION + 1))
    p = tmp_path / "p.sqlite"
    p.touch()
    with PlanDB(p) as pdb:
        assert pdb.migrated_from == 0 and pdb.check() == []
    with PlanDB(p) as pdb:
        assert pdb.migrated_from == SCHEMA_VERSION
    assert check_file(p) == []


def test_migration_mechanism(tmp_path, monkeypatch):
    p = tmp_path / "p.sqlite"
    k = make_db(p, n=2)
    v = SCHEMA_VERSION + 1
    monkeypatch.setattr(db.schema, "SCHEMA_VERSION", v)
    monkeypatch.setattr(db.opening, "SCHEMA_VERSION", v)

    def broken(d):
        d["trials"].add_column("note", str)
        raise RuntimeError("migration bug")
    monkeypatch.setitem(MIGRATIONS, v, broken)
    with pytest.raises(RuntimeError):
        PlanDB(p)
    c = sqlite3.connect(p)  # rolled back as a whole: no column, old version
    assert "note" not in [r[1] for r in c.execute("PRAGMA table_info(trials)")]
    assert c.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION)
    c.close()

    monkeypatch.setitem(MIGRATIONS, v, lambda d: d["trials"].add_column("note", str))
    with PlanDB(p) as pdb:
        assert pdb.migrated_from == SCHEMA_VERSION
        assert "note" in pdb.db["trials"].columns_dict and len(pdb.trials(k.key)) == 2


# -- concurrency and paths --------------------------------------------------------
def _writer(path: str, i: int, n: int, shared_study: bool) -> None:
    k = key()
    rng = random.Random(i)
    with PlanDB(path) as pdb:
        for j in range(n):
            status = OK if j % 5 else rng.choice([FAILED, PRUNED])
            t = rng.uniform(0.01, 10.0) if status == OK else None
            if shared_study:
                pdb.append_trial(k, "shared", T(C(f"{i}-{j}"), status, 1.0, t))
            else:
                pdb.add_trial(k, f"p{i}", j, T(C(f"{i}-{j}"), status, 1.0, t))


@pytest.mark.parametrize("shared_study", [False, True])
def test_concurrent_writers_lose_nothing(tmp_path, shared_study):
    path = str(tmp_path / "p.sqlite")  # not created yet: the writers race to create it
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, i, 50, shared_study)) for i in range(4)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [proc.exitcode for proc in procs] == [0] * 4
    k = key()
    with PlanDB(path) as pdb:
        trials = pdb.trials(k.key)
        assert len(trials) == 200
        assert len({t.name for t in trials}) == 200
        if shared_study:
            assert sorted(t.number for t in trials) == list(range(200))
        best_t = min(t.measured_s for t in trials if t.status == OK)
        assert pdb.best(k.key).measured_s == best_t
        assert pdb.check() == []


def test_default_db_path(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "a" / "b" / "plans.sqlite"))
    assert default_db_path() == tmp_path / "a" / "b" / "plans.sqlite"
    with PlanDB() as pdb:
        assert pdb.path == default_db_path() and pdb.path.exists()
    monkeypatch.delenv("AUTOTUNE_DB")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_db_path() == tmp_path / "xdg" / "autotune" / "plans.sqlite"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_db_path() == tmp_path / "home" / ".cache" / "autotune" / "plans.sqlite"


# -- schema 2: times and relative errors; migration of a schema-1 file ----------------------
def test_trials_keep_times_and_rel_err(tmp_path):
    k = key()
    with PlanDB(tmp_path / "p.sqlite") as pdb:
        pdb.add_trial(k, "s", 0, T(C("a"), OK, 1.0, 2.0, times=(2.1, 2.0, 1.9), rel_err=3e-7))
        pdb.add_trial(k, "s", 1, T(C("b"), FAILED, 1.0, error="wrong", rel_err=float("inf")))
        n = pdb.append_trial(k, "s", T(C("c"), OK, 1.0, 1.0, times=[1.0], rel_err=0.0))
        pdb.append_trial(k, "s", T(C("d"), PRUNED, 9.0))
        rows = pdb.trials(k.key, "s")
        stored = pdb.db.execute("SELECT times_json FROM trials ORDER BY number").fetchall()
    assert n == 2
    assert [r.times for r in rows] == [(2.1, 2.0, 1.9), (), (1.0,), ()]
    assert [json.loads(r[0]) if r[0] else None for r in stored] == \
        [[2.1, 2.0, 1.9], None, [1.0], None]
    assert [r.rel_err for r in rows] == [3e-7, float("inf"), 0.0, None]


def _content(path) -> dict:
    """Everything but timestamps and the key columns, per table, as sorted tuples."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        out = {}
        for table, cols in (("workloads", "hash, name, canonical_json"),
                            ("trials", "workload_hash, space_version, device_json, "
                                       "libraries_json, study, number, candidate_json, status, "
                                       "predicted_s, measured_s, error, params_json, options_json"),
                            ("best_plans", "workload_hash, device_json, libraries_json, "
                                           "workload_name, candidate_json, measured_s, "
                                           "predicted_s, study, trial_number")):
            out[table] = sorted(c.execute(f"SELECT {cols} FROM {table}").fetchall())
        return out
    finally:
        c.close()


def _meta_version(path) -> str:
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        c.close()


@pytest.mark.parametrize("source", ["binary", "scripted"])
def test_schema1_database_is_migrated(tmp_path, source):
    """A plan database of schema 1 (the binary fixture that schema-1 code wrote, and the same
    content scripted with raw SQL) opens: migrated to the current schema in one transaction,
    data intact, new columns present, plans re-keyed so that they are still found."""
    import shutil
    from tests.support.schema1 import (ENV as FENV, FIXTURE, FIXTURE_SPACE_VERSION, OLD_ENV,
                                       TRIALS, key_v1, make_schema1_db)
    p = tmp_path / "old.sqlite"
    if source == "binary":
        shutil.copyfile(FIXTURE, p)
    else:
        make_schema1_db(p)
    assert _meta_version(p) == "1"
    assert check_file(p) == []             # an older schema is not a problem ...
    before = _content(p)
    assert len(before["trials"]) == len(TRIALS)
    with PlanDB(p) as pdb:                 # ... opening migrates it
        assert pdb.migrated_from == 1
        cols = pdb.db["trials"].columns_dict
        assert cols["times_json"] is str and cols["rel_err"] is float
        assert cols["corrected_s"] is float
        # today's schema, the plans' own search-space version (the fixture predates SPACE_VERSION 2)
        cur, old = (PlanKey.for_env("w0", e, space_version=FIXTURE_SPACE_VERSION)
                    for e in (FENV, OLD_ENV))
        assert cur.schema_version == SCHEMA_VERSION >= 3
        assert pdb.best(PlanKey.for_env("w0", FENV).key) is None   # another space: stale
        best = pdb.best(cur.key)           # found under today's key
        assert (best.candidate, best.measured_s, best.trial_number) == ({"name": ""}, 1.5, 3)
        assert pdb.best(old.key).measured_s == 1.0
        assert pdb.best(key_v1(FENV).key) is None          # nothing left under the old keys
        rows = pdb.trials(cur.key, "tpe-seed0")
        assert [r.status for r in rows] == ["ok", "failed", "pruned", "ok"]
        assert all(r.times == () and r.rel_err is None and r.corrected_s is None and r.groups == ()
                   for r in rows)
        assert {r.key.schema_version for r in rows} == {SCHEMA_VERSION}
        assert pdb.trial_counts(cur.key) == {"ok": 2, "failed": 1, "pruned": 1}
        assert pdb.stale_rows(cur)[0]["reasons"] == ["library versions (numpy)"]
        assert pdb.check() == []
        # the migrated database takes new trials with the new columns
        pdb.add_trial(cur, "tpe-seed0", 4, T(C("e"), OK, 0.2, 1.2, times=[1.2], rel_err=1e-6))
        assert pdb.best(cur.key).measured_s == 1.2
    after = _content(p)
    assert after["workloads"] == before["workloads"]
    assert [r for r in after["trials"] if r[6] != C("e").to_json()] == before["trials"]
    assert _meta_version(p) == str(SCHEMA_VERSION)
    assert check_file(p) == []
    with PlanDB(p) as pdb:
        assert pdb.migrated_from == SCHEMA_VERSION


def test_the_binary_fixture_is_the_scripted_one(tmp_path):
    import shutil
    from tests.support.schema1 import FIXTURE, make_schema1_db
    fixture = tmp_path / "fixture.sqlite"   # a copy: even a read-only open of a WAL database
    shutil.copyfile(FIXTURE, fixture)       # creates -shm/-wal files beside it
    make_schema1_db(tmp_path / "s.sqlite")
    assert _content(fixture) == _content(tmp_path / "s.sqlite")
    c = sqlite3.connect(f"file:{fixture}?mode=ro", uri=True)
    try:
        assert "times_json" not in [r[1] for r in c.execute("PRAGMA table_info(trials)")]
    finally:
        c.close()


def test_a_newer_schema_database_is_refused_untouched(tmp_path):
    """A database from a newer autotune (schema one above ours): one line, upgrade message, file as it was."""
    p = tmp_path / "p.sqlite"
    make_db(p, n=2)
    c = sqlite3.connect(p)
    newer = SCHEMA_VERSION + 1
    c.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(newer),))
    c.commit()
    c.close()
    msg = _assert_refused(p, f"schema {newer} > {SCHEMA_VERSION}", "upgrade autotune or use another --db")
    assert msg.startswith(f"{p} was written by a newer autotune")
    from typer.testing import CliRunner
    from autotune.cli.app import app
    before = sha(p)
    r = CliRunner().invoke(app, ["db", "check", "--db", str(p)])
    assert r.exit_code == 1 and f"newer autotune (schema {newer} > {SCHEMA_VERSION})" in r.stderr
    r = CliRunner().invoke(app, ["show-best", "--db", str(p)])
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1
    assert "upgrade autotune" in r.stderr and sha(p) == before


# -- corrupt files through the CLI ---------------------------------------------------------------
def _corrupt(p, how: str) -> None:
    if how == "random":
        p.write_bytes(random.Random(7).randbytes(20000))
    elif how == "text":
        p.write_text("name,time\nplan,1.0\n" * 100)
    elif how == "truncated":
        make_db(p, n=300)
        p.write_bytes(p.read_bytes()[:9000])
    elif how == "header-only":
        p.write_bytes(b"SQLite format")
    else:   # pages in the middle overwritten: a damaged b-tree
        make_db(p, n=300)
        data = bytearray(p.read_bytes())
        data[4096 * 3:4096 * 6] = random.Random(3).randbytes(4096 * 3)
        p.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["random", "text", "truncated", "header-only", "pages"])
def test_cli_on_a_damaged_database(tmp_path, how):
    """`db check` says what is wrong and how to recover; `search`, `show-best` and
    `cache prune` refuse in one line; the file is never modified."""
    from typer.testing import CliRunner
    from autotune.cli.app import app
    runner = CliRunner()
    p = tmp_path / "p.sqlite"
    _corrupt(p, how)
    before = sha(p)
    r = runner.invoke(app, ["db", "check", "--db", str(p)])
    assert r.exit_code == 1, r.output
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith(f"{p}: ") and "OK" not in lines[0], r.stderr
    what = {"random": "not an SQLite database", "text": "text file", "truncated": "truncated",
            "header-only": "truncated", "pages": ""}[how]
    assert what in lines[0], lines[0]
    assert lines[-1].startswith("recover: move the file aside") and "--db NEW_PATH" in lines[-1]
    assert "Traceback" not in r.output and sha(p) == before
    for cmd in (["search", "trimul_outgoing", "--dims", "N=8,C=4", "--budget", "1"],
                ["show-best"], ["cache", "prune"]):
        r = runner.invoke(app, cmd + ["--db", str(p)])
        assert r.exit_code == 1, (cmd, r.output)
        err = r.stderr.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"autotune: {p}: "), (cmd, r.stderr)
        assert "move it aside or pass --db NEW_PATH" in err[0]
        assert "Traceback" not in r.output and sha(p) == before, cmd


def test_cli_db_check_ok_and_older_schema(tmp_path):
    from typer.testing import CliRunner
    from autotune.cli.app import app
    from tests.support.schema1 import make_schema1_db
    p = tmp_path / "p.sqlite"
    make_db(p, n=3)
    r = CliRunner().invoke(app, ["db", "check", "--db", str(p)])
    assert r.exit_code == 0 and r.stdout.strip() == f"{p}: OK"
    old = tmp_path / "old.sqlite"
    make_schema1_db(old)
    before = sha(old)
    r = CliRunner().invoke(app, ["db", "check", "--db", str(old)])
    assert r.exit_code == 0 and "OK (schema 1: the next search or load migrates it" in r.stdout
    assert sha(old) == before


# -- stale keys: autotune cache prune ------------------------------------------------------------
def test_cli_cache_prune_deletes_stale_rows(tmp_path):
    """Rows under another libraries_json (and another device) are listed by --dry-run, which
    deletes nothing, then deleted; this machine's rows stay."""
    from typer.testing import CliRunner
    from autotune.cli.app import app
    runner = CliRunner()
    here = detect_cpu()
    cur = PlanKey.for_env("w0", here)
    libs = PlanKey.for_env("w0", Environment.from_dict({**here.to_dict(), "libraries": {
        **here.library_dict(), "numpy": "0.1"}}))
    dev = PlanKey.for_env("w1", Environment.from_dict({**here.to_dict(), "name": "Old CPU"}))
    p = tmp_path / "p.sqlite"
    with PlanDB(p) as pdb:
        for k in (cur, libs, dev):
            pdb.add_trial(k, "s", 0, T(C("a"), OK, 1.0, 1.0))
            pdb.add_trial(k, "s", 1, T(C("b"), FAILED, error="x"))

    def counts():
        with PlanDB(p) as pdb:
            return {k.key: (len(pdb.trials(k.key)), pdb.best(k.key) is not None)
                    for k in (cur, libs, dev)}
    full = counts()
    assert set(full.values()) == {(2, True)}
    r = runner.invoke(app, ["cache", "prune", "--db", str(p), "--dry-run"])
    assert r.exit_code == 0, r.output
    assert f"stale {libs.key[:16]}: library versions (numpy) changed (2 trials, best plan)" in r.stdout
    assert f"stale {dev.key[:16]}: device changed" in r.stdout
    assert cur.key[:16] not in r.stdout
    assert "2 stale key(s); nothing deleted (--dry-run)" in r.stdout
    assert counts() == full
    r = runner.invoke(app, ["cache", "prune", "--db", str(p)])
    assert r.exit_code == 0, r.output
    assert "deleted 6 row(s) under 2 stale key(s)" in r.stdout
    assert counts() == {cur.key: (2, True), libs.key: (0, False), dev.key: (0, False)}
    r = runner.invoke(app, ["cache", "prune", "--db", str(p)])
    assert "deleted 0 row(s) under 0 stale key(s)" in r.stdout
    with PlanDB(p) as pdb:
        assert pdb.check() == []
