"""`autotune model-check` on a tiny workload: every figure in the JSON, the measurements in
the plan DB, the plot (and a one-line error without matplotlib); the draw of candidates."""
from __future__ import annotations

import json
import math
import sys

import pytest
from typer.testing import CliRunner

from autotune.backends.factory import backend_kind
from autotune.cli.app import app
from autotune.report.model_check import FIGURES, choose
from costmodel import estimate
from costmodel.devices import CPU_DEFAULT
from costmodel.group_features import GROUP_FEATURES
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


class _Learner:
    """What score() asks of a Learner, for candidates of two untimed-feature groups each."""

    def __init__(self, feats):
        self.feats = feats

    def features(self, c):
        return self.feats[c.key][0]

    def group_obs(self, c):
        from costmodel.group_correction import GroupObs
        x, (a1, a2) = self.feats[c.key]
        return (("g1", GroupObs("sig-" + c.key + "-1", tuple([0.0] * len(GROUP_FEATURES)), a1)),
                ("g2", GroupObs("sig-" + c.key + "-2", tuple([0.0] * len(GROUP_FEATURES)), a2)))

    def candidates(self, exclude):
        return []

    def samples(self, exclude):
        return []


def test_folds_that_fall_back_rank_exactly_as_the_analytic_model():
    """Each fold's fallback carries its own measured/analytic scale; pooled as they are, the
    folds' predictions reorder near-ties.  The rank figures divide each fold's scale out."""
    from dataclasses import dataclass

    import numpy as np

    from autotune.report.model_check import score
    from db.records import Status

    @dataclass(frozen=True)
    class C:
        key: str
        name: str = ""

    rng = np.random.default_rng(5)
    n = 40
    cands = [C(f"c{i:02d}") for i in range(n)]
    # analytic times 1.00 .. 1.39 ms (near-ties), measured = analytic x lognormal noise
    analytic = {c.key: 1e-3 * (1 + 0.01 * i) for i, c in enumerate(cands)}
    meas = {k: a * float(np.exp(rng.normal(0, 0.3))) for k, a in analytic.items()}
    feats = {k: ((1.0,), (a / 2, a / 2)) for k, a in analytic.items()}
    state = {k: (Status.OK, [m], "", [{"g1": m / 2, "g2": m / 2}]) for k, m in meas.items()}
    w = type("W", (), {"hash": "w"})()
    pts, figs, notes, _, _ = score(w, cands, analytic, state, _Learner(feats), 5, 0)
    assert all(n.startswith("analytic") for n in notes), notes   # noise: nothing to learn
    for name in ("spearman_rho", "kendall_tau", "top1_regret"):
        assert figs[name + "_corrected"] == figs[name], name
    assert [p.ranked_s for p in pts] == pytest.approx([analytic[c.key] for c in cands])
    # the corrected seconds keep their folds' scales, which differ (what the pooling undoes)
    ratios = {round(p.corrected_s / p.predicted_s, 9) for p in pts}
    assert len(ratios) > 1
