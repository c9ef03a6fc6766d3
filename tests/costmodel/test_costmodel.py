"""The analytic cost model: recompute factors hand-computed on small programs, the triangle
update's 702x recomputation under the 2023 greedy rule, `autotune explain` (table, JSON schema,
DOT) and the cpu calibration file.

Recompute factor of a fused producer = executions of its body in the fused nest / iterations of
its own domain (search_spaces.footprint.executions, docs/costmodel.md).
"""
from __future__ import annotations

import json
import math
import re

import pytest
from typer.testing import CliRunner

import costmodel
from autotune.backends.cpu import calibrate as cal
from autotune.cli.app import app
from autotune.report.dot import dispatch_dot
from costmodel.devices import CPU_DEFAULT
from search_spaces import load_workload
from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.footprint import plan_group
from search_spaces.partition import check_partition, groups
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace
from tests.support.workloads import workload

runner = CliRunner()


def fused_factors(w, edges: list[str], anchor: str, tiles: tuple[int, ...]):
    """Recompute factors of the one group ``edges`` build, two ways: the footprint planner
    (MemberPlan.recompute) and the cost model (GroupCost.fused); they must agree."""
    pairs = {tuple(e.split("->")) for e in edges}
    assert check_partition(w, pairs) is None
    (g,) = [g for g in groups(w, pairs) if g.anchor == anchor]
    ident = lambda t: tuple(range(len(w.shapes[t])))
    plans = {m.op: m.recompute for m in plan_group(w, g, tiles, ident)}
    scheds = [GroupSchedule(h.anchor, tiles if h.anchor == anchor else
                            tuple(w.op(h.anchor).out_shape)) for h in groups(w, pairs)]
    cand = make_candidate(edges, {}, scheds, "test")
    est = costmodel.estimate(w, cand, costmodel.preset("h200"))
    (gc,) = [c for c in est.groups if c.anchor == anchor]
    model = {f.producer: f.recompute_factor for f in gc.fused}
    assert model == {k: v for k, v in plans.items() if k != anchor}
    assert plans[anchor] == 1.0          # the anchor itself runs its domain exactly once
    return model, gc


# ---- recompute factors, by hand ---------------------------------------------------------------

ELEMENTWISE = ("q[i,j] = exp(x[i,j])\n"
               "r[i,j] = q[i,j] * 2.0 + x[i,j]\n")


@pytest.mark.parametrize("tiles", [(1, 1), (2, 4), (3, 7), (6, 10), (64, 64)])
def test_elementwise_into_elementwise_same_domain_is_one(tiles):
    w = workload(ELEMENTWISE, {"I": 6, "J": 10}, {"x": ["I", "J"]}, ["r"])
    factors, gc = fused_factors(w, ["q->r"], "r", tiles)
    # q's footprint is exactly r's tile: every element of q is computed once
    assert factors == {"q": 1.0}
    assert gc.recomputed_flops == 0.0
    assert gc.transcendentals == 6 * 10      # one exp per element of q, no more


def test_recomputed_transcendentals_are_counted_apart_from_flops():
    # exp costs no arithmetic flop: its recomputation shows in the factor and in the
    # transcendental count (weighted in the time), and recomputed_flops stays a part of flops
    I, K, J = 4, 5, 6
    w = workload("p[i,k] = exp(x[i,k])\ns[i,j] += p[i,k] * y[k,j]\n", {"I": I, "K": K, "J": J},
                 {"x": ["I", "K"], "y": ["K", "J"]}, ["s"])
    factors, gc = fused_factors(w, ["p->s"], "s", (1, 1))
    assert factors == {"p": J}
    assert gc.transcendentals == I * J * K
    assert gc.flops == 2 * I * J * K
    assert gc.recomputed_flops == 0.0


@pytest.mark.parametrize("name", ["trimul_outgoing", "attention", "gated_mlp"])
def test_recomputed_flops_are_a_part_of_flops(name):
    import numpy as np
    w = load_workload(name, {"trimul_outgoing": {"N": 12, "C": 8},
                             "attention": {"S": 12, "H": 2, "D": 4, "C": 8},
                             "gated_mlp": {"T": 12, "C": 8, "F": 16}}[name])
    space = SearchSpace(w)
    cands = [named_plan(space, p) for p in ("unfused", "greedy", "heuristic")] + \
        [space.random(np.random.default_rng(s)) for s in range(10)]
    for cand in cands:
        for g in costmodel.estimate(w, cand, costmodel.preset("h100")).groups:
            assert 0.0 <= g.recomputed_flops <= g.flops, (cand.fused, g)
            assert (g.recomputed_flops == 0) or any(f.recompute_factor > 1 for f in g.fused)


# p[i,k] is broadcast along j into the contraction s[i,j] += p[i,k] * y[k,j]; p's body costs
# 2 flops (a multiply and an add), s's costs 2 (a multiply and the += combiner).
BROADCAST = ("p[i,k] = x[i,k] * x[i,k] + 1.0\n"
             "s[i,j] += p[i,k] * y[k,j]\n")


def test_broadcast_into_a_reduction_per_element_is_the_extent():
    I, K, J = 4, 5, 6
    w = workload(BROADCAST, {"I": I, "K": K, "J": J}, {"x": ["I", "K"], "y": ["K", "J"]}, ["s"])
    factors, gc = fused_factors(w, ["p->s"], "s", (1, 1))
    # per element (i, j) of s the whole row p[i, :] is evaluated: over all (i, j) that is
    # I*J*K evaluations of p's body against its I*K iterations -> J = ceil(J/1)
    assert factors == {"p": J}
    assert gc.flops == 2 * I * J * K + 2 * I * J * K
    assert gc.recomputed_flops == 2 * (I * J * K - I * K)


@pytest.mark.parametrize("tiles,expected", [
    ((1, 1), 20),     # ceil(20/1)
    ((4, 8), 3),      # ceil(20/8): two full tiles and a boundary tile
    ((8, 16), 2),     # ceil(20/16)
    ((3, 5), 4),      # tiling i (the dim p shares with s) changes nothing
    ((2, 20), 1),     # j untiled: each tile computes its rows of p once
    ((8, 32), 1),     # a tile larger than the extent is clipped to it
])
def test_tiled_prologue_is_the_number_of_tiles_along_the_other_free_dim(tiles, expected):
    w = workload(BROADCAST, {"I": 8, "K": 5, "J": 20}, {"x": ["I", "K"], "y": ["K", "J"]},
                 ["s"])
    factors, _ = fused_factors(w, ["p->s"], "s", tiles)
    assert factors == {"p": expected}
    assert expected == math.ceil(20 / min(tiles[1], 20))


# mu[i] reduces over c and is read by the elementwise xc[i,c] (a layer norm's mean)
REDUCTION = ("mu[i] += x[i,c] / C\n"
             "xc[i,c] = x[i,c] - mu[i]\n")


@pytest.mark.parametrize("ti", [1, 2, 5, 8])
def test_reduction_into_elementwise_with_the_reduced_dim_untiled_is_one(ti):
    w = workload(REDUCTION, {"I": 5, "C": 12}, {"x": ["I", "C"]}, ["xc"])
    factors, gc = fused_factors(w, ["mu->xc"], "xc", (ti, 12))
    assert factors == {"mu": 1.0}
    assert gc.recomputed_flops == 0.0


@pytest.mark.parametrize("tc,expected", [(1, 12), (4, 3), (8, 2)])
def test_reduction_into_elementwise_with_the_reduced_dim_tiled_recomputes(tc, expected):
    # each tile along c needs the whole mean of its rows: ceil(C / Tc) evaluations of it
    w = workload(REDUCTION, {"I": 5, "C": 12}, {"x": ["I", "C"]}, ["xc"])
    factors, gc = fused_factors(w, ["mu->xc"], "xc", (1, tc))
    assert factors == {"mu": expected}
    assert gc.recomputed_flops > 0


def test_unique_bytes_count_each_tensor_once():
    # mu and xc both read x: the group touches x (5*12*4 = 240 bytes) once and writes xc once
    w = workload(REDUCTION, {"I": 5, "C": 12}, {"x": ["I", "C"]}, ["xc"])
    _, gc = fused_factors(w, ["mu->xc"], "xc", (5, 12))
    assert gc.unique_bytes == 240 + 240


# ---- the triangle multiplicative update at AlphaFold size -------------------------------------

@pytest.mark.parametrize("name", ["trimul_outgoing", "trimul_incoming"])
def test_trimul_greedy_recomputes_702x_and_costs_50x_heuristic(name):
    w = load_workload(name, {"N": 702, "C": 128})
    space = SearchSpace(w)
    h200 = costmodel.preset("h200")
    greedy = costmodel.estimate(w, named_plan(space, "greedy"), h200)
    heuristic = costmodel.estimate(w, named_plan(space, "heuristic"), h200)
    (einsum,) = [g for g in greedy.groups if g.anchor == "t"]
    factors = {f.producer: f.recompute_factor for f in einsum.fused}
    assert factors == {p: 702.0 for p in ("pa", "ga", "a", "pb", "gb", "b")}
    assert set(einsum.ops) == {"pa", "ga", "a", "pb", "gb", "b", "t"}
    assert einsum.recomputed_flops > 100 * w.flops()
    assert greedy.total_s >= 50 * heuristic.total_s
    # the heuristic never recomputes
    assert heuristic.recomputed_flops == 0.0
    assert all(f.recompute_factor == 1.0 for g in heuristic.groups for f in g.fused)


def test_estimate_is_pure_and_consistent():
    w = load_workload("trimul_outgoing", {"N": 24, "C": 8})
    cand = named_plan(SearchSpace(w), "heuristic")
    a = costmodel.estimate(w, cand, costmodel.preset("a100"))
    b = costmodel.estimate(w, cand, costmodel.preset("a100"))
    assert a == b
    assert a.total_s == pytest.approx(sum(g.predicted_s for g in a.groups))
    for g in a.groups:
        assert g.bound in ("compute", "memory")
        assert g.predicted_s >= g.launches * costmodel.preset("a100").launch_s
        assert g.bytes >= 0 and g.unique_bytes >= 0


# ---- autotune explain -------------------------------------------------------------------------

def test_explain_json_schema(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "plans.sqlite"))
    r = runner.invoke(app, ["explain", "trimul_outgoing", "--dims", "N=16,C=8", "--plan",
                            "greedy", "--device", "h100", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {"workload", "dims", "device", "plan", "total_s", "groups"} <= set(d)
    assert d["workload"] == "trimul_outgoing" and d["dims"] == {"N": 16, "C": 8}
    assert d["device"] == "h100" and d["plan"] == "greedy"
    assert isinstance(d["total_s"], float) and d["total_s"] > 0
    assert isinstance(d["groups"], list) and d["groups"]
    for g in d["groups"]:
        assert {"ops", "anchor", "predicted_s", "flops", "recomputed_flops", "bytes", "bound",
                "fused"} <= set(g)
        assert isinstance(g["ops"], list) and all(isinstance(o, str) for o in g["ops"])
        assert g["anchor"] in g["ops"]
        for k in ("predicted_s", "flops", "recomputed_flops", "bytes"):
            assert isinstance(g[k], (int, float)) and not isinstance(g[k], bool) and g[k] >= 0
        assert g["bound"] in ("compute", "memory")
        assert isinstance(g["fused"], list)
        for f in g["fused"]:
            assert set(f) == {"producer", "recompute_factor"}
            assert f["producer"] in g["ops"] and f["producer"] != g["anchor"]
            assert isinstance(f["recompute_factor"], (int, float)) and f["recompute_factor"] >= 1
    assert d["total_s"] == pytest.approx(sum(g["predicted_s"] for g in d["groups"]))
    (t,) = [g for g in d["groups"] if g["anchor"] == "t"]
    assert {f["producer"]: f["recompute_factor"] for f in t["fused"]} == \
        {p: 16 for p in ("pa", "ga", "a", "pb", "gb", "b")}


def test_explain_table_defaults_to_trimul_heuristic_on_h200():
    r = runner.invoke(app, ["explain", "--dims", "N=16,C=8"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert out.startswith("workload trimul_outgoing")
    assert "plan: heuristic" in out and "device: h200" in out
    assert re.search(r"^group 0: anchor \w+ ", out, re.M)
    assert "fused:  mu x1" in out
    assert re.search(r"^total: .* predicted", out, re.M)


def test_explain_dot_writes_a_graph(tmp_path):
    dot = tmp_path / "plan.dot"
    r = runner.invoke(app, ["explain", "--dims", "N=16,C=8", "--plan", "greedy", "--dot",
                            str(dot)])
    assert r.exit_code == 0, r.output
    text = dot.read_text()
    assert text.startswith("digraph")
    assert text.rstrip().endswith("}")
    assert text.count("{") == text.count("}")
    w = load_workload("trimul_outgoing", {"N": 16, "C": 8})
    n_groups = len(groups(w, named_plan(SearchSpace(w), "greedy").fused_pairs))
    assert len(re.findall(r"subgraph cluster_\d+ \{", text)) == n_groups
    # xn (16*16*8 float32 = 8192 bytes) is materialized: an edge labelled with its bytes
    assert '"op:xn" -> "op:pa" [label="xn 8.0 KiB (8192 bytes)"]' in text
    assert '"in:x" [label="x", shape=plaintext]' in text


def test_dot_every_op_is_in_exactly_one_cluster():
    w = load_workload("attention", {"S": 8, "H": 2, "D": 4, "C": 8})
    for plan in ("unfused", "greedy", "heuristic"):
        text = dispatch_dot(w, named_plan(SearchSpace(w), plan))
        for op in w.ops:
            decl = re.findall(rf'^    "op:{op.out}" \[label=', text, re.M)
            assert len(decl) == 1, (plan, op.out)


@pytest.mark.parametrize("args,needle", [
    (["--plan", "fastest"], "--plan"),
    (["--device", "tpu"], "--device"),
    (["--format", "yaml"], "--format"),
    (["no_such_workload"], "no built-in workload"),
    (["--dims", "N=x"], "--dims"),
])
def test_explain_errors_are_one_line_exit_1(args, needle):
    r = runner.invoke(app, ["explain", *args])
    assert r.exit_code == 1
    lines = r.stderr.strip().split("\n")
    assert len(lines) == 1 and needle in lines[0], r.stderr
    assert "Traceback" not in r.output


# ---- calibration ------------------------------------------------------------------------------

def test_calibration_path_follows_the_plan_db(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "db" / "plans.sqlite"))
    assert cal.calibration_path() == tmp_path / "db" / "calibration-cpu.json"
    monkeypatch.delenv("AUTOTUNE_DB")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cal.calibration_path() == tmp_path / "xdg" / "autotune" / "calibration-cpu.json"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cal.calibration_path() == tmp_path / "home" / ".cache" / "autotune" / \
        "calibration-cpu.json"


def test_calibrate_writes_and_load_cpu_spec_reads(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "plans.sqlite"))
    assert cal.load_cpu_spec() == CPU_DEFAULT          # nothing stored yet
    r = runner.invoke(app, ["calibrate", "--device", "cpu", "--gemm-n", "64", "--copy-mb",
                            "0.5", "--repeats", "1", "--kernel-samples", "0"])
    assert r.exit_code == 0, r.output
    assert "kernel:     not measured" in r.stdout
    assert "GFLOP/s" in r.stdout and "GB/s" in r.stdout
    path = tmp_path / "calibration-cpu.json"
    assert str(path) in r.stdout
    rec = json.loads(path.read_text())
    assert rec["gemm_flops"] > 0 and rec["bandwidth"] > 0
    assert rec["loop_flops"] == max(CPU_DEFAULT.loop_flops, 0.15 * rec["gemm_flops"])
    assert rec["f32_flops"] > 0 and "peak" in r.stdout
    # no temp file left; the peak loop's compiled library sits in the kernel cache
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration-cpu.json", "kernels"]
    spec = cal.load_cpu_spec()
    assert spec.f32_flops == rec["f32_flops"]
    assert spec.name == "cpu"
    assert spec.gemm_flops == rec["gemm_flops"] and spec.bandwidth == rec["bandwidth"]
    assert spec.loop_flops == rec["loop_flops"]
    # the group call is measured since version 2 of the file (it was the default before)
    assert spec.launch_s == rec["launch_s"] and rec["version"] == cal.CALIBRATION_VERSION


def test_explain_cpu_uses_the_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "plans.sqlite"))
    args = ["explain", "--dims", "N=64,C=16", "--device", "cpu", "--plan", "unfused",
            "--format", "json"]
    before = json.loads(runner.invoke(app, args).stdout)["total_s"]
    rec = {"gemm_flops": CPU_DEFAULT.gemm_flops * 10, "bandwidth": CPU_DEFAULT.bandwidth * 10,
           "loop_flops": CPU_DEFAULT.loop_flops * 10}
    cal.write_calibration(rec)
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    after = json.loads(r.stdout)
    assert after["device"] == "cpu"
    assert after["total_s"] < before


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"gemm_flops": -1, "bandwidth": 1}',
                                     '{"bandwidth": 1e10}', '{"gemm_flops": "fast", '
                                                            '"bandwidth": 1e10}'])
def test_a_corrupt_calibration_warns_and_uses_the_defaults(tmp_path, monkeypatch, content):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "plans.sqlite"))
    cal.calibration_path().write_text(content)
    with pytest.warns(cal.CalibrationWarning, match="calibration"):
        assert cal.load_cpu_spec() == CPU_DEFAULT
    r = runner.invoke(app, ["explain", "--dims", "N=8,C=4", "--device", "cpu", "--format",
                            "json"])
    assert r.exit_code == 0, r.output
    assert "warning" in r.stderr and len(r.stderr.strip().split("\n")) == 1


def test_calibrate_rejects_gpu_devices():
    r = runner.invoke(app, ["calibrate", "--device", "h200"])
    assert r.exit_code == 1 and len(r.stderr.strip().split("\n")) == 1


def test_cpu_spec_status_says_whether_the_spec_is_calibrated(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "plans.sqlite"))
    assert cal.cpu_spec_status() == (CPU_DEFAULT, False, ())            # no file yet
    cal.calibration_path().write_text("{not json")
    spec, calibrated, notes = cal.cpu_spec_status()
    assert spec == CPU_DEFAULT and calibrated is False
    assert len(notes) == 1 and "ignoring the cpu calibration" in notes[0]
    cal.write_calibration({"gemm_flops": 1e12, "bandwidth": 5e10})
    spec, calibrated, notes = cal.cpu_spec_status()
    assert calibrated is True and notes == () and spec.gemm_flops == 1e12
