"""`autotune model-check` on a tiny workload: every figure in the JSON, the measurements in
the plan DB, the plot (and a one-line error without matplotlib); the draw of candidates."""
from __future__ import annotations

import json
import math
import sys

from typer.testing import CliRunner

from autotune.backends.factory import backend_kind
from autotune.cli.app import app
from autotune.report.model_check import FIGURES, choose
from costmodel import estimate
from costmodel.devices import CPU_DEFAULT
from db.store import PlanDB
from search_spaces.loader import load_workload
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace
from tests.support.skips import require

DIMS = "T=16,C=16,F=32"
KEYS = [f + s for f in FIGURES for s in ("", "_corrected")] + ["samples"]


def test_model_check_json_has_every_figure_and_stores_its_measurements(fast_tmp):
    require("matplotlib")
    db, png = fast_tmp / "p.sqlite", fast_tmp / "check.png"
    r = CliRunner().invoke(app, ["model-check", "gated_mlp", "--dims", DIMS, "--samples", "6",
                                 "--confirm-rounds", "2", "--db", str(db), "--format", "json",
                                 "--plot", str(png)])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert set(KEYS) <= set(d)
    for k in KEYS:
        assert d[k] is not None and math.isfinite(d[k]), (k, d[k])
    assert d["samples"] == 9 and d["candidates"] == 9 and d["rounds"] == 3    # 6 + 3 named
    assert d["confirm_rounds"] == 2
    assert -1 <= d["spearman_rho"] <= 1 and -1 <= d["kendall_tau"] <= 1
    assert d["top1_regret"] >= 0 and d["median_abs_log_error"] >= 0
    assert {p["name"] for p in d["points"]} >= {"unfused", "heuristic", "greedy"}
    pts = d["points"]
    assert all(p["status"] == "ok" for p in pts)
    # the confirmed (each pass measures all of them 2 more rounds) and the others
    assert all(len(p["times"]) in (5, 7, 9) for p in pts if p["confirmed"])
    assert all(len(p["times"]) == 3 for p in pts if not p["confirmed"])
    # what the regrets compare was confirmed: each model's pick and the fastest
    for by in ("predicted_s", "corrected_s", "measured_s"):
        assert min(pts, key=lambda p: p[by])["confirmed"], by
    assert 3 <= sum(p["confirmed"] for p in pts) <= 5
    assert png.stat().st_size > 0 and "wrote" in r.stderr and "confirm 1/2" in r.stderr
    with PlanDB(db) as pdb:
        rows = [t for k in pdb.all_keys() for t in pdb.trials(k, "model-check")]
    assert len(rows) == 9 and all(t.status == "ok" and len(t.times) >= 3 for t in rows)
    assert sorted(len(t.times) for t in rows) == sorted(len(p["times"]) for p in pts)
    assert all(t.corrected_s is not None and t.predicted_s > 0 for t in rows)
    assert sorted(t.measured_s for t in rows) == sorted(p["measured_s"] for p in d["points"])


def test_the_plot_without_matplotlib_is_one_line_before_any_measurement(fast_tmp, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    r = CliRunner().invoke(app, ["model-check", "gated_mlp", "--dims", DIMS, "--samples", "2",
                                 "--db", str(fast_tmp / "p.sqlite"), "--plot",
                                 str(fast_tmp / "x.png")])
    assert r.exit_code == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "plots need matplotlib" in lines[0], r.stderr
    assert not (fast_tmp / "p.sqlite").exists()                    # nothing was measured


def test_bad_options_are_one_line_errors(fast_tmp):
    for args, what in ((["--folds", "1"], "--folds"), (["--rounds", "0"], "--rounds"),
                       (["--confirm-rounds", "-1"], "--confirm-rounds"),
                       (["--within", "0"], "--within"), (["--samples", "-1"], "--samples")):
        r = CliRunner().invoke(app, ["model-check", "gated_mlp", "--dims", DIMS, *args,
                                     "--db", str(fast_tmp / "p.sqlite")])
        assert r.exit_code == 1 and what in r.stderr and len(r.stderr.splitlines()) == 1


def test_the_draw_is_seeded_distinct_and_honours_within():
    w = load_workload("gated_mlp")          # default dims: predictions spread over 100x
    space = SearchSpace(w, backend_kind("cpu").tile_bounds)
    predict = lambda c: estimate(w, c, CPU_DEFAULT).total_s
    a = choose(w, space, predict, 12, seed=3)
    assert [c.key for c in a] == [c.key for c in choose(w, space, predict, 12, seed=3)]
    assert [c.name for c in a[:3]] == ["unfused", "heuristic", "greedy"]
    assert len({c.key for c in a}) == len(a) == 15
    bar = 1.5 * min(predict(named_plan(space, n)) for n in ("unfused", "heuristic", "greedy"))
    near = choose(w, space, predict, 5, seed=3, within=1.5)[3:]
    assert near and all(predict(c) <= bar for c in near)
    assert any(predict(c) > bar for c in a[3:])           # without --within: any candidate
