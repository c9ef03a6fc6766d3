"""The CLI through typer's CliRunner: workloads, check, errors as one line with exit code 1."""
from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from autotune.cli.app import app
from search_spaces import builtin_names, load_workload

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args))


def test_workloads_table_lists_every_builtin():
    r = invoke("workloads")
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().split("\n")
    assert len(lines) == len(builtin_names())
    for name, line in zip(builtin_names(), lines):
        assert line.split()[0] == name
    row = next(l for l in lines if l.startswith("trimul_outgoing "))
    assert "N=702,C=128" in row and "AlphaFold" in row


def test_workloads_json_lists_every_builtin_with_dims_and_summary():
    r = invoke("workloads", "--format", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [row["name"] for row in rows] == builtin_names()
    for row in rows:
        assert row["dims"] == load_workload(row["name"]).dim_dict
        assert isinstance(row["summary"], str) and row["summary"]
    assert {"trimul_outgoing", "trimul_incoming", "attention", "gated_mlp",
            "outer_product_mean", "triangle_attention_starting", "triangle_attention_ending",
            "msa_row_attention", "pair_transition", "gelu_mlp"} <= {row["name"] for row in rows}


def test_workloads_bad_format():
    r = invoke("workloads", "--format", "yaml")
    assert r.exit_code == 1
    assert "--format" in r.stderr and "Traceback" not in r.output


def test_check_prints_the_op_graph():
    r = invoke("check", "trimul_outgoing", "--dims", "N=16,C=8")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "workload trimul_outgoing" in out and "N=16" in out and "C=8" in out
    w = load_workload("trimul_outgoing", dims={"N": 16, "C": 8})
    assert w.hash[:16] in out
    kinds = {}
    for line in out.split("\n"):
        m = re.match(r"^\s+(\w+)\s+(contraction|reduction|elementwise)\s+domain\((.*?)\)", line)
        if m:
            kinds[m.group(1)] = (m.group(2), m.group(3))
    assert list(kinds) == [op.out for op in w.ops]          # every op, in program order
    assert kinds["t"] == ("contraction", "d0:16, d1:16, d2:8, d3:16")
    assert {n for n, (k, _) in kinds.items() if k == "contraction"} == {
        op.out for op in w.ops if op.is_contraction}
    assert kinds["mu"][0] == "reduction" and kinds["xn"][0] == "elementwise"
    t_line = next(l for l in out.split("\n") if l.strip().startswith("t "))
    assert "a[d0,d3,d2]" in t_line and "b[d1,d3,d2]" in t_line and "reduce d3" in t_line
    assert "outputs: out" in out


@pytest.mark.parametrize("name", builtin_names())
def test_check_every_builtin(name):
    r = invoke("check", name)
    assert r.exit_code == 0, r.output
    assert f"workload {name}" in r.stdout and "contraction" in r.stdout
    assert r.stderr == ""                        # no warnings for the built-ins


def test_check_a_file_path(tmp_path):
    p = tmp_path / "mm.toml"
    p.write_text('name = "mm"\noutputs = ["y"]\nprogram = """\ny[i,j] += A[i,k] * B[k,j]\n"""\n'
                 '[dims]\nM = 4\nK = 3\n[inputs]\nA = ["M", "K"]\nB = ["K", "M"]\n')
    r = invoke("check", str(p))
    assert r.exit_code == 0, r.output
    assert "workload mm" in r.stdout and re.search(r"y\s+contraction", r.stdout)


def test_check_malformed_file_is_one_line_with_location(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('name = "bad"\noutputs = ["y"]\nprogram = """\n'
                 "y[i] += x[i,k] * q[k]\n"
                 '"""\n[dims]\nN = 4\nK = 3\n[inputs]\nx = ["N", "K"]\n')
    r = invoke("check", str(p))
    assert r.exit_code == 1
    assert "Traceback" not in r.output and isinstance(r.exception, SystemExit)
    assert r.stdout == ""
    lines = r.stderr.strip().split("\n")
    assert lines == [f"{p}:4:18: error: unknown tensor 'q'"]


def test_check_invalid_toml_is_one_line(tmp_path):
    p = tmp_path / "bad.toml"
    p.write_text('name = "bad"\noutputs = [\n')
    r = invoke("check", str(p))
    assert r.exit_code == 1
    assert "Traceback" not in r.output
    assert len(r.stderr.strip().split("\n")) == 1
    assert re.match(rf"^{re.escape(str(p))}:\d+:\d+: error: invalid TOML", r.stderr)


def test_check_deep_nesting_is_one_line(tmp_path):
    p = tmp_path / "deep.toml"
    p.write_text('name = "d"\noutputs = ["y"]\nprogram = """\n'
                 "y[i] += " + "(" * 500 + "x[i]" + ")" * 500 + "\n"
                 '"""\n[dims]\nN = 4\n[inputs]\nx = ["N"]\n')
    r = invoke("check", str(p))
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert r.stderr.strip() == f"{p}:4:109: error: expression nested deeper than 100 levels"


def test_check_unused_input_warns_but_succeeds(tmp_path):
    p = tmp_path / "warn.toml"
    p.write_text('name = "w"\noutputs = ["y"]\nprogram = """\ny[i] += x[i,k]\n"""\n'
                 '[dims]\nN = 4\nK = 3\n[inputs]\nx = ["N", "K"]\nu = ["N"]\n')
    r = invoke("check", str(p))
    assert r.exit_code == 0, r.output
    assert r.stderr.strip() == f"{p}:11:1: warning: input 'u' is never read"


def test_check_unknown_workload():
    r = invoke("check", "no_such_workload")
    assert r.exit_code == 1
    assert "no_such_workload" in r.stderr and "trimul_outgoing" in r.stderr
    assert "Traceback" not in r.output and len(r.stderr.strip().split("\n")) == 1


@pytest.mark.parametrize("dims, needle", [
    ("N", "NAME=INTEGER"),
    ("N=abc", "NAME=INTEGER"),
    ("N=16,,C=8", "NAME=INTEGER"),
    ("=5", "NAME=INTEGER"),
    ("Q=5", "unknown dim 'Q'"),
    ("N=0", "[1, 2^31)"),
    ("N=-3", "[1, 2^31)"),
])
def test_check_bad_dims(dims, needle):
    r = invoke("check", "trimul_outgoing", "--dims", dims)
    assert r.exit_code == 1, r.output
    assert needle in r.stderr and "Traceback" not in r.output
    assert len(r.stderr.strip().split("\n")) == 1


@pytest.mark.parametrize("args", [[], ["workloads"], ["check"]])
def test_help(args):
    r = runner.invoke(app, args + ["--help"])
    assert r.exit_code == 0, r.output
    assert "Usage" in r.stdout
    if args == ["check"]:
        assert "workload" in r.stdout.lower() and "--dims" in r.stdout
    if args == ["workloads"]:
        assert "--format" in r.stdout
    if not args:
        assert "check" in r.stdout and "workloads" in r.stdout


def test_no_arguments_shows_help():
    r = runner.invoke(app, [])
    assert "Usage" in r.output
