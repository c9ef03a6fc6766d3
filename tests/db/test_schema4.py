"""Schema 4: each measured trial's per-group seconds; a schema-3 file (the binary fixture
that schema-3 code wrote, tests/data/make_schema3_fixture.py) migrates to it."""
from __future__ import annotations

import shutil
import sqlite3

from db import SCHEMA_VERSION, PlanDB, PlanKey, check_file
from db.records import Status, TrialOutcome as T
from search_spaces.candidate import Candidate
from tests.support import DATA
from tests.support.schema1 import ENV, OLD_ENV

FIXTURE = DATA / "plans-schema3.sqlite"
FIXTURE_SPACE = "4"           # the search-space version of the code that wrote it


def C(label: str) -> Candidate:
    return Candidate((), (), (), name=label)


def _rows(path) -> list[tuple]:
    """Every trial column of schema 3 but the key columns and the timestamp, sorted."""
    c = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return sorted(c.execute(
            "SELECT workload_hash, study, number, candidate_json, status, predicted_s, "
            "measured_s, error, params_json, options_json, times_json, rel_err, corrected_s "
            "FROM trials").fetchall())
    finally:
        c.close()


def test_group_times_are_stored_and_read_back(tmp_path):
    k = PlanKey.for_env("w0", ENV)
    with PlanDB(tmp_path / "p.sqlite") as pdb:
        pdb.add_trial(k, "s", 0, T(C("a"), Status.OK, 1.0, 2.0, times=(2.0,),
                                   groups=(("t", 1.5), ("out", 0.25))))
        pdb.append_trial(k, "s", T(C("b"), Status.OK, 1.0, 3.0, groups={"x": 3.0}))
        pdb.append_trial(k, "s", T(C("c"), Status.PRUNED, 9.0))
        rows = pdb.trials(k.key, "s")
        assert [dict(r.groups) for r in rows] == [{"t": 1.5, "out": 0.25}, {"x": 3.0}, {}]
        assert T(C("a"), Status.OK, 1.0, 2.0, groups={"t": 1}).to_dict()["groups"] == {"t": 1.0}
        assert pdb.check() == []


def test_schema3_database_is_migrated(tmp_path):
    p = tmp_path / "old.sqlite"
    shutil.copyfile(FIXTURE, p)
    before = _rows(p)
    assert len(before) == 5 and check_file(p) == []
    with PlanDB(p) as pdb:
        assert pdb.migrated_from == 3
        assert pdb.db["trials"].columns_dict["group_times_json"] is str
        cur, old = (PlanKey.for_env("w0", e, space_version=FIXTURE_SPACE) for e in (ENV, OLD_ENV))
        assert cur.schema_version == SCHEMA_VERSION == 4
        best = pdb.best(cur.key)                     # found under today's key
        assert (best.name, best.measured_s, best.trial_number) == ("", 1.5, 3)
        assert pdb.best(old.key).measured_s == 1.0
        rows = pdb.trials(cur.key, "tpe-seed0")
        assert [r.corrected_s for r in rows] == [1.9, None, 8.0, None]
        assert all(r.groups == () for r in rows)
        pdb.add_trial(cur, "tpe-seed0", 4, T(C("f"), Status.OK, 0.2, 1.2, groups={"g": 1.1}))
        assert pdb.trials(cur.key, "tpe-seed0")[-1].groups == (("g", 1.1),)
        assert pdb.check() == []
    after = [r for r in _rows(p) if r[3] != C("f").to_json()]
    assert after == before and check_file(p) == []
