"""`autotune explain` shows each product statement's contraction order, its rank among the
orders offered and its flops against the unsplit statement (table and JSON); `show-best`'s plan
summary names the split."""
from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from autotune.cli.app import app
from autotune.report.best import plan_summary
from search_spaces import load_workload
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace

CHAIN = str(Path(__file__).resolve().parents[2] / "data" / "chain3.toml")
runner = CliRunner()


def test_explain_table_shows_the_order_and_the_rewritten_groups():
    r = runner.invoke(app, ["explain", CHAIN, "--dims", "N=768"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "order: r = (A·B)·M  [order 1 of 2, 1.8e9 flops vs 1.0e12 unsplit]" in out
    assert re.search(r"^group 0: anchor r__1  impl library", out, re.M)
    assert re.search(r"^group 1: anchor r  impl library", out, re.M)
    total = re.search(r"^total: ([0-9.]+) (us|ms) predicted", out, re.M)
    assert total, out                         # microseconds on an H200, not the unsplit 417 s


def test_explain_json_lists_the_orders():
    r = runner.invoke(app, ["explain", CHAIN, "--dims", "N=64", "--plan", "unfused",
                            "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    (o,) = d["orders"]
    assert o["statement"] == "r" and o["order"] == "((0,1),2)" and o["rank"] == 1
    assert o["offered"] == ["((0,1),2)", "(0,(1,2))"]
    assert o["unsplit_flops"] == 3 * 64 ** 4 and o["text"].startswith("r = (A·B)·M")
    assert [g["anchor"] for g in d["groups"]] == ["r__1", "r"]


def test_explain_of_a_builtin_shows_no_order():
    r = runner.invoke(app, ["explain", "gated_mlp", "--dims", "T=16,C=16,F=32"])
    assert r.exit_code == 0, r.output
    assert "order:" not in r.stdout


def test_plan_summary_names_the_split():
    w = load_workload(CHAIN, {"N": 32})
    cand = named_plan(SearchSpace(w), "heuristic")
    assert plan_summary(cand).startswith("split r as ((0,1),2); 2 groups")
