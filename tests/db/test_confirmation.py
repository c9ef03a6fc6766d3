"""A confirmation in the plan database: stored as trials of ``<study>:confirm`` in one
transaction, its winner the best plan even where a single earlier run was faster, later faster
trials still taking over, and ``db check`` knowing the difference from a corrupt best."""
from __future__ import annotations

import sqlite3

from db import PlanDB, check_file
from db.records import TrialOutcome as T, confirmation_study, is_confirmation

from tests.db.test_db import C, OK, FAILED, key


def ok(label, times, pred=1.0):
    times = tuple(times)
    return T(C(label), OK, pred, sorted(times)[len(times) // 2], times=times)


def test_names():
    assert confirmation_study("tpe-seed0") == "tpe-seed0:confirm"
    assert is_confirmation("tpe-seed0:confirm") and not is_confirmation("tpe-seed0")


def test_the_winner_replaces_a_faster_single_run(tmp_path):
    path = tmp_path / "p.sqlite"
    k = key()
    with PlanDB(path) as pdb:
        pdb.add_workload("w0", "demo", "{}")
        pdb.append_trial(k, "s", ok("lucky", [0.5]))
        pdb.append_trial(k, "s", ok("steady", [1.0, 1.0, 1.0]))
        assert pdb.best(k.key).candidate["name"] == "lucky"
        won = pdb.add_confirmation(k, "s", [ok("lucky", [1.4, 1.5, 1.6]),
                                            ok("steady", [1.0, 1.1, 0.9]),
                                            T(C("broken"), FAILED, 1.0, None, "boom")])
        assert won == 1
        rows = pdb.trials(k.key, "s:confirm")
        assert [(r.number, r.status, r.measured_s) for r in rows] == [
            (0, OK, 1.5), (1, OK, 1.0), (2, FAILED, None)]
        assert rows[0].times == (1.4, 1.5, 1.6) and len({r.created for r in rows}) == 1
        best = pdb.best(k.key)
        assert (best.candidate["name"], best.measured_s, best.study, best.trial_number) == \
            ("steady", 1.0, "s:confirm", 1)
        assert best.updated == rows[1].created
        assert pdb.check() == []
        # a later trial faster than the confirmed best takes over, as any faster trial does
        pdb.append_trial(k, "s", ok("later", [0.8]))
        assert pdb.best(k.key).candidate["name"] == "later" and pdb.check() == []
        # ... and a later confirmation decides again
        assert pdb.add_confirmation(k, "s", [ok("later", [1.2, 1.2, 1.2]),
                                             ok("steady", [1.1, 1.1, 1.1])]) == 4
        assert pdb.best(k.key).trial_number == 4 and pdb.check() == []
        # nothing passed: nothing stored, the best unchanged
        assert pdb.add_confirmation(k, "s", [T(C("x"), FAILED, 1.0, None, "boom")]) is None
        assert len(pdb.trials(k.key, "s:confirm")) == 5
        assert pdb.best(k.key).trial_number == 4
    assert check_file(path) == []


def test_db_check_still_catches_a_best_no_rule_explains(tmp_path):
    path = tmp_path / "p.sqlite"
    k = key()
    with PlanDB(path) as pdb:
        pdb.add_workload("w0", "demo", "{}")
        pdb.append_trial(k, "s", ok("lucky", [0.5]))
        pdb.add_confirmation(k, "s", [ok("a", [1.0]), ok("b", [2.0])])
    con = sqlite3.connect(path)
    # the confirmation's loser as best: neither its winner nor the fastest trial
    con.execute("UPDATE best_plans SET measured_s = 2.0, trial_number = 1")
    con.commit()
    con.close()
    problems = check_file(path)
    assert len(problems) == 1 and "best plan 2 s but the fastest ok trial took 1 s" in \
        problems[0]
