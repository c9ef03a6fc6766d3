"""Schema 3: the corrected prediction of every trial; a schema-2 file migrates to it (the
binary fixture that schema-2 code wrote, and the same content scripted with raw SQL)."""
from __future__ import annotations

import shutil
import sqlite3

import pytest


from db import SCHEMA_VERSION, PlanDB, PlanKey, check_file
from db.records import Status, TrialOutcome as T
from search_spaces.candidate import Candidate
from tests.support.schema1 import ENV, FIXTURE_SPACE_VERSION, OLD_ENV
from tests.support.schema2 import FIXTURE, TRIALS, key_v2, make_schema2_db


def C(label: str) -> Candidate:
    return Candidate((), (), (), name=label)


def _rows(path) -> list[tuple]:
    """Every trial column but the key columns and the timestamp, sorted."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(c.execute(
            "SELECT workload_hash, study, number, candidate_json, status, predicted_s, "
            "measured_s, error, params_json, options_json, times_json, rel_err "
            "FROM trials").fetchall())
    finally:
        c.close()


def _version(path) -> str:
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return c.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0]
    finally:
        c.close()


def test_corrected_predictions_are_stored_and_read_back(tmp_path):
    k = PlanKey.for_env("w0", ENV)
    with PlanDB(tmp_path / "p.sqlite") as pdb:
        pdb.add_trial(k, "s", 0, T(C("a"), Status.OK, 1.0, 2.0, corrected_s=1.8))
        pdb.append_trial(k, "s", T(C("b"), Status.PRUNED, 9.0, corrected_s=float("inf")))
        pdb.append_trial(k, "s", T(C("c"), Status.OK, 1.0, 3.0))
        rows = pdb.trials(k.key, "s")
        assert [r.corrected_s for r in rows] == [1.8, float("inf"), None]
        assert [r.predicted_s for r in rows] == [1.0, 9.0, 1.0]
        # measured_trials: ok trials of the device, newest first, any workload
        pdb.add_trial(PlanKey.for_env("w1", ENV), "s", 0, T(C("d"), Status.OK, 1.0, 4.0))
        pdb.add_trial(PlanKey.for_env("w1", OLD_ENV), "s", 0, T(C("e"), Status.OK, 1.0, 5.0))
        got = pdb.measured_trials(k.device_json)
        assert [t.name for t in got] == ["e", "d", "c", "a"]      # OLD_ENV: same device
        assert [t.name for t in pdb.measured_trials(k.device_json, limit=2)] == ["e", "d"]
        assert pdb.measured_trials('{"other": 1}') == []


@pytest.mark.parametrize("source", ["binary", "scripted"])
def test_schema2_database_is_migrated(tmp_path, source):
    p = tmp_path / "old.sqlite"
    if source == "binary":
        shutil.copyfile(FIXTURE, p)
    else:
        make_schema2_db(p)
    assert _version(p) == "2" and check_file(p) == []
    before = _rows(p)
    assert len(before) == len(TRIALS)
    with PlanDB(p) as pdb:
        assert pdb.migrated_from == 2
        assert pdb.db["trials"].columns_dict["corrected_s"] is float
        # today's schema, the plans' own search-space version (the fixture predates SPACE_VERSION 2)
        cur, old = (PlanKey.for_env("w0", e, space_version=FIXTURE_SPACE_VERSION)
                    for e in (ENV, OLD_ENV))
        assert cur.schema_version == SCHEMA_VERSION >= 3
        best = pdb.best(cur.key)                     # found under today's key
        assert (best.name, best.measured_s, best.trial_number) == ("", 1.5, 3)
        assert pdb.best(old.key).measured_s == 1.0
        assert pdb.best(key_v2(ENV).key) is None     # nothing left under the old keys
        rows = pdb.trials(cur.key, "tpe-seed0")
        assert [r.status for r in rows] == ["ok", "failed", "pruned", "ok"]
        assert [r.times for r in rows] == [(2.0, 2.1, 1.9), (), (), (1.5,)]
        assert [r.rel_err for r in rows] == [1e-7, 0.01, None, 0.0]
        assert all(r.corrected_s is None for r in rows)
        assert pdb.check() == []
        pdb.add_trial(cur, "tpe-seed0", 4, T(C("f"), Status.OK, 0.2, 1.2, corrected_s=1.1))
        assert pdb.best(cur.key).measured_s == 1.2
        assert pdb.trials(cur.key, "tpe-seed0")[-1].corrected_s == 1.1
    after = [r for r in _rows(p) if r[3] != C("f").to_json()]
    assert after == before and _version(p) == str(SCHEMA_VERSION) and check_file(p) == []
    with PlanDB(p) as pdb:
        assert pdb.migrated_from == SCHEMA_VERSION


def test_the_schema2_binary_fixture_is_the_scripted_one(tmp_path):
    fixture = tmp_path / "fixture.sqlite"     # a copy: opening a WAL file writes beside it
    shutil.copyfile(FIXTURE, fixture)
    make_schema2_db(tmp_path / "s.sqlite")
    assert _rows(fixture) == _rows(tmp_path / "s.sqlite")
    c = sqlite3.connect(f"file:{fixture}?mode=ro", uri=True)
    try:
        cols = [r[1] for r in c.execute("PRAGMA table_info(trials)")]
        assert "times_json" in cols and "corrected_s" not in cols
    finally:
        c.close()
