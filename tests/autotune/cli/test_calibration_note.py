"""`autotune search` says, in one line on stderr, when the cost model runs on default terms
because this machine has no calibration (read from $AUTOTUNE_DB's folder)."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from autotune.backends.cpu.calibrate import CALIBRATION_VERSION
from autotune.cli.app import app

runner = CliRunner()
ARGS = ["search", "trimul_outgoing", "--dims", "N=8,C=4", "--budget", "1", "--confirm-rounds", "0"]


def test_a_search_without_a_calibration_says_so_and_with_one_does_not(cached_tmp, monkeypatch):
    db = cached_tmp / "plans.sqlite"
    monkeypatch.setenv("AUTOTUNE_DB", str(db))
    r = runner.invoke(app, ARGS)
    assert r.exit_code == 0, r.output
    notes = [l for l in r.stderr.splitlines() if l.startswith("note: no calibration")]
    assert len(notes) == 1 and str(cached_tmp / "calibration-cpu.json") in notes[0]
    assert "autotune calibrate --device cpu" in notes[0]
    assert "trimul_outgoing: 1 trials" in r.stdout

    (cached_tmp / "calibration-cpu.json").write_text(json.dumps(
        {"version": CALIBRATION_VERSION, "gemm_flops": 100e9, "bandwidth": 20e9}))
    r = runner.invoke(app, ARGS)
    assert r.exit_code == 0, r.output
    assert "note: no calibration" not in r.stderr


def test_without_a_calibration_a_refusal_is_still_one_line(cached_tmp, monkeypatch):
    # the note waits for the search to start: a damaged database's error stays alone
    monkeypatch.setenv("AUTOTUNE_DB", str(cached_tmp / "plans.sqlite"))
    bad = cached_tmp / "bad.sqlite"
    bad.write_text("not a database\n")
    r = runner.invoke(app, [*ARGS, "--db", str(bad)])
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "not an SQLite database" in lines[0], r.stderr
