"""The records across the search <-> database boundary: one Status vocabulary stored as the same
text, a TrialOutcome in, a StoredTrial and a BestPlan out with every JSON column parsed."""
from __future__ import annotations

import json
import sqlite3

import pytest

from autotune.environment import Environment
from db.keys import PlanKey
from db.records import TRIAL_STATUSES, BestPlan, Status, StoredTrial, TrialOutcome
from db.store import PlanDB
from search_spaces.candidate import Candidate, GroupSchedule

ENV = Environment(kind="cpu", name="Test CPU 9000", cores=2,
                  libraries=(("autotune", "0.1.0"), ("numpy", "2.0")))
CAND = Candidate(("a->b",), (("a", (1, 0)),), (GroupSchedule("b", (8, 4)),), name="greedy")


def test_status_is_its_text():
    assert Status.OK == "ok" and Status("pruned") is Status.PRUNED
    assert f"{Status.TIMED_OUT}" == "timed_out" and json.dumps([Status.WRONG]) == '["wrong"]'
    assert {Status.FAILED: 1}["failed"] == 1           # the same hash as the text
    assert [str(s) for s in TRIAL_STATUSES] == ["ok", "failed", "pruned"]   # the CHECK's
    with pytest.raises(ValueError):
        Status("broken")


def test_outcome_coerces_and_refuses():
    o = TrialOutcome(CAND, "ok", 1.0, 2.0, times=[2, 2.5])
    assert o.status is Status.OK and o.times == (2.0, 2.5)
    assert json.loads(json.dumps(o.to_dict()))["candidate"] == CAND.to_dict()
    with pytest.raises(ValueError):
        TrialOutcome(CAND, "fine")


def test_round_trip_through_the_database(tmp_path):
    k = PlanKey.for_env("w0", ENV)
    with PlanDB(tmp_path / "p.sqlite") as pdb:
        pdb.add_workload("w0", "demo", "{}")
        pdb.add_trial(k, "s", 0, TrialOutcome(
            CAND, Status.OK, 0.5, 2.0, params={"f": 1}, options={"f": [0, 1]},
            times=(2.1, 2.0), rel_err=1e-7))
        pdb.append_trial(k, "s", TrialOutcome(CAND, Status.FAILED, 0.4, 9.0, "boom"))
        with pytest.raises(ValueError, match="expected one of ok, failed, pruned"):
            pdb.append_trial(k, "s", TrialOutcome(CAND, Status.WRONG, 0.4))   # bench only
        ok, failed = pdb.trials(k.key, "s")
        best = pdb.best(k.key)
        raw = pdb.db.execute("SELECT status, params_json, options_json FROM trials "
                             "ORDER BY number").fetchall()
    assert isinstance(ok, StoredTrial) and isinstance(best, BestPlan)
    assert (ok.key, ok.plan_key, ok.study, ok.number) == (k, k.key, "s", 0)
    assert ok.status is Status.OK and ok.to_candidate() == CAND and ok.name == "greedy"
    assert (ok.predicted_s, ok.measured_s, ok.error) == (0.5, 2.0, None)
    assert (ok.params, ok.options, ok.times, ok.rel_err) == ({"f": 1}, {"f": [0, 1]},
                                                             (2.1, 2.0), 1e-7)
    assert ok.created and ok.id
    # a failed trial keeps no time; params and options not given are stored NULL, read as {}
    assert (failed.status, failed.measured_s, failed.error) == (Status.FAILED, None, "boom")
    assert (failed.params, failed.options, failed.times) == ({}, {}, ())
    assert raw == [("ok", '{"f": 1}', '{"f": [0, 1]}'), ("failed", None, None)]
    assert (best.key, best.workload_name, best.measured_s, best.predicted_s) == \
        (k, "demo", 2.0, 0.5)
    assert (best.study, best.trial_number, best.to_candidate()) == ("s", 0, CAND)


def test_from_row_reads_an_old_encoding(tmp_path):
    """A row of another space version may hold a candidate today's code cannot rebuild:
    reading it still works (only to_candidate fails)."""
    p = tmp_path / "p.sqlite"
    k = PlanKey.for_env("w0", ENV, space_version="0-old")
    with PlanDB(p) as pdb:
        pdb.add_trial(k, "s", 0, TrialOutcome(CAND, Status.OK, 1.0, 1.0))
    c = sqlite3.connect(p)
    c.execute("""UPDATE trials SET candidate_json = '{"groups": [], "name": "unfused"}'""")
    c.commit()
    c.close()
    with PlanDB(p) as pdb:
        (t,) = pdb.trials(k.key)
    assert t.name == "unfused" and t.candidate == {"groups": [], "name": "unfused"}
    with pytest.raises(KeyError):
        t.to_candidate()
