"""`autotune explain --plan best --db D --device cpu` explains the cached best plan of a search
(its groups are the cached candidate's), and without a cached plan says so in one line, exit 1,
creating no database."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from autotune.api import best_candidate
from autotune.cli.app import app
from search_spaces import load_workload

runner = CliRunner()
DIMS = "N=8,C=4"


def test_explain_best_is_the_cached_plan(tmp_path):
    db = str(tmp_path / "p.sqlite")
    r = runner.invoke(app, ["search", "trimul_outgoing", "--dims", DIMS, "--budget", "4",
                            "--db", db])
    assert r.exit_code == 0, r.output
    cand, _ = best_candidate(load_workload("trimul_outgoing", dims={"N": 8, "C": 4}), "cpu", db)
    r = runner.invoke(app, ["explain", "trimul_outgoing", "--dims", DIMS, "--plan", "best",
                            "--db", db, "--device", "cpu", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["plan"] == "best"
    # explain lists the groups in the order they run; a candidate keeps its schedules sorted
    # by anchor (its canonical form), so the two are compared as maps
    assert len(d["groups"]) == len(cand.schedules)
    assert {g["anchor"]: g["impl"] for g in d["groups"]} == \
        {s.anchor: s.impl for s in cand.schedules}


def test_explain_best_without_a_cached_plan_is_one_line(tmp_path, monkeypatch):
    # no calibration of this machine's user cache (a stale one adds a warning line)
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "cache" / "plans.sqlite"))
    db = tmp_path / "none.sqlite"
    r = runner.invoke(app, ["explain", "trimul_outgoing", "--dims", DIMS, "--plan", "best",
                            "--db", str(db), "--device", "cpu"])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "no cached plan for trimul_outgoing" in r.output and "autotune search" in r.output
    assert not db.exists()


def test_explain_best_for_a_gpu_preset_without_a_gpu_names_the_way_out(tmp_path, monkeypatch):
    # the default --device is a GPU preset: its cached plan is keyed by the GPU that must be here
    from autotune.environment import NoGPUError

    def no_gpu():
        raise NoGPUError("--device cuda: no NVIDIA GPU usable here (CuPy found no device); "
                         "use --device cpu")
    monkeypatch.setattr("autotune.environment.detect_cuda", no_gpu)
    r = runner.invoke(app, ["explain", "trimul_outgoing", "--dims", DIMS, "--plan", "best",
                            "--db", str(tmp_path / "none.sqlite")])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "--plan best --device h200" in r.output and "CuPy found no device" in r.output
    assert "`--device cpu`" in r.output
