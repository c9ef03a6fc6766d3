"""`autotune bench --all`'s summary: rows from bench results, verdicts, the JSON, the CLI flow
(run_bench replaced by a recording stub: the real one is tested in test_bench.py)."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest
from typer.testing import CliRunner

from db.records import Status

from autotune.bench import summary
from autotune.bench.result import SAME_PLAN, BenchResult, Contender
from autotune.cli.app import app
from tests.support.skips import require


def result(workload: str, **medians) -> BenchResult:
    """A bench result whose contenders ran in the given medians (None: skipped)."""
    cs = tuple(Contender(n, "peer" if n in ("jax", "torch", "inductor", "iree") else "plan",
                         Status.OK if s is not None else Status.SKIPPED, median_s=s)
               for n, s in medians.items())
    return BenchResult(workload, {"N": 8}, "float32", "h", "cpu", "cpu0", 1e-4, 1, 5, "cmd",
                       "today", {}, {}, "db", {}, None, 1.0, {}, cs, f"/r/{workload}.json")


def test_a_row_compares_with_the_fastest_correct_peer_and_the_heuristic():
    r = summary.summary_row(result("a", best=1.0, heuristic=1.02, jax=3.0, iree=2.0,
                                   inductor=None))
    assert r.best_peer == "iree" and r.best_peer_s == 2.0
    assert r.vs_best_peer == pytest.approx(0.5) and r.vs_heuristic == pytest.approx(1 / 1.02)
    assert r.peers_s == {"jax": 3.0, "iree": 2.0} and r.wins


@pytest.mark.parametrize("medians, wins", [
    ({"best": 2.1, "heuristic": 2.0, "jax": 3.0}, True),     # within 5 % of the heuristic
    ({"best": 2.2, "heuristic": 2.0, "jax": 3.0}, False),    # 10 % behind the heuristic
    ({"best": 3.0, "heuristic": 3.0, "jax": 2.9}, False),    # behind a peer
    ({"best": 1.0, "heuristic": 1.0, "jax": None}, False),   # no peer ran: no claim
])
def test_the_verdict(medians, wins):
    assert summary.summary_row(result("w", **medians)).wins is wins


def test_the_heuristic_plan_cached_as_best_is_not_behind_itself():
    # the search cached the heuristic plan: its two rows time one plan, 8 % apart by noise
    res = result("g", best=2.6, heuristic=2.4, jax=5.0)
    cs = tuple(replace(c, note=SAME_PLAN) if c.name == "heuristic" else c
               for c in res.contenders)
    row = summary.summary_row(replace(res, contenders=cs))
    assert row.same_as_heuristic and row.wins
    assert row.vs_heuristic == pytest.approx(2.6 / 2.4)        # still recorded
    line = summary.format_summary([row]).splitlines()[2]
    assert "same" in line and line.endswith("wins")
    assert not summary.summary_row(res).wins                     # two plans: 1.08x behind


def test_table_and_json(tmp_path):
    rows = [summary.summary_row(result("a", best=1.0, heuristic=1.0, jax=2.0)),
            summary.summary_row(result("b", best=3.0, heuristic=1.0, jax=2.0)),
            summary.failed_row("c", {"N": 8}, "RuntimeError: boom")]
    table = summary.format_summary(rows)
    assert "wins" in table.splitlines()[2] and "behind a peer" in table.splitlines()[3]
    assert "failed: RuntimeError: boom" in table
    assert table.splitlines()[-1].startswith("1 of 3 workloads")
    doc = json.loads(summary.save_summary(rows, tmp_path / "s.json", "cmd", "cpu").read_text())
    assert doc["wins"] == 1 and doc["workloads"] == 3
    assert [r["wins"] for r in doc["rows"]] == [True, False, False]


def test_bench_all_runs_every_builtin_and_writes_the_summary(tmp_path, monkeypatch):
    import autotune.bench.run as run
    import search_spaces.loader as loader
    seen = []

    def fake_run_bench(w, device, peers, rounds, db, budget, *rest, **kw):
        seen.append((w.name, budget))
        if w.name == "gated_mlp":
            raise RuntimeError("no luck")
        return result(w.name, best=1.0, heuristic=1.0, jax=2.0)
    monkeypatch.setattr(run, "run_bench", fake_run_bench)
    monkeypatch.setattr(loader, "builtin_names", lambda: ["attention", "gated_mlp"])
    r = CliRunner().invoke(app, ["bench", "--all", "--out", str(tmp_path), "--db",
                                 str(tmp_path / "p.sqlite")])
    assert r.exit_code == 0, r.output
    assert seen == [("attention", 60), ("gated_mlp", 60)]
    doc = json.loads((tmp_path / "bench-all-cpu.json").read_text())
    assert [row["workload"] for row in doc["rows"]] == ["attention", "gated_mlp"]
    assert doc["rows"][1]["error"] == "RuntimeError: no luck" and doc["wins"] == 1


def test_bench_all_refuses_a_workload_or_dims():
    r = CliRunner().invoke(app, ["bench", "--all", "--dims", "N=8"])
    assert r.exit_code == 1 and "give no --dims" in r.output
    r = CliRunner().invoke(app, ["bench", "attention", "--all"])
    assert r.exit_code == 1 and "no single workload" in r.output


TINY = """name = "{name}"
outputs = ["y"]
program = \"\"\"
y[i] = x[i] * 2.0
\"\"\"
[dims]
N = 4
[inputs]
x = ["N"]
"""


def test_bench_all_of_a_folder_benches_each_file_and_rows_a_malformed_one(tmp_path,
                                                                           monkeypatch):
    import autotune.bench.run as run
    seen = []

    def fake_run_bench(w, device, peers, rounds, db, budget, *rest, **kw):
        seen.append(w.name)
        return result(w.name, best=1.0, heuristic=1.0, jax=2.0)
    monkeypatch.setattr(run, "run_bench", fake_run_bench)
    folder = tmp_path / "blocks"
    folder.mkdir()
    (folder / "b.toml").write_text(TINY.format(name="second"))
    (folder / "a.toml").write_text(TINY.format(name="first"))
    (folder / "c.toml").write_text("name = \"broken\"\nprogram = 3\n")
    (folder / "notes.txt").write_text("not a workload")
    out = tmp_path / "out"
    r = CliRunner().invoke(app, ["bench", str(folder), "--all", "--out", str(out), "--db",
                                 str(tmp_path / "p.sqlite")])
    assert r.exit_code == 0, r.output
    assert seen == ["first", "second"]
    doc = json.loads((out / "bench-all-cpu.json").read_text())
    rows = {row["workload"]: row for row in doc["rows"]}
    assert set(rows) == {"first", "second", str(folder / "c.toml")}
    assert "c.toml" in rows[str(folder / "c.toml")]["error"] and doc["wins"] == 2


def test_bench_all_of_an_empty_folder_is_one_line(tmp_path):
    r = CliRunner().invoke(app, ["bench", str(tmp_path), "--all", "--out", str(tmp_path)])
    assert r.exit_code == 1 and len(r.output.strip().splitlines()) == 1
    assert "no *.toml workload" in r.output
    assert not (tmp_path / "bench-all-cpu.json").exists()


def test_the_summary_chart(tmp_path):
    require("matplotlib")
    from autotune.report.plots import PlotError, plot_summary
    rows = [summary.summary_row(result("a", best=1.0, heuristic=1.1, jax=2.0)),
            summary.failed_row("c", {"N": 8}, "boom")]
    path = plot_summary(rows, tmp_path / "s.png")
    assert path.stat().st_size > 1000
    with pytest.raises(PlotError):
        plot_summary(rows[1:], tmp_path / "none.png")
