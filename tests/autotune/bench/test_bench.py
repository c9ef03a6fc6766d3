"""`autotune bench` and `autotune plot`: run_bench on a tiny workload, checks before timing,
missing peers skipped, the JSON record, the plots and Spearman's rho."""
from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from typer.testing import CliRunner

from autotune.bench import runners as bench_runners
from autotune.bench.peers import PeerUnavailable
from autotune.bench.run import BenchError, run_bench
from autotune.bench.runners import Runner
from autotune.bench.table import format_table
from search_spaces import load_workload
from tests.support.caches import link_caches
from tests.support.skips import require

DIMS = {"N": 12, "C": 8}
PNG = b"\x89PNG\r\n\x1a\n"


def tiny():
    return load_workload("trimul_outgoing", DIMS)


@pytest.fixture(scope="module")
def searched(tmp_path_factory, shared_caches):
    """One bench run that searches first (budget 4) into a fresh database."""
    require("jax")
    root = link_caches(tmp_path_factory.mktemp("bench"), shared_caches)
    db = root / "plans.sqlite"
    res = run_bench(tiny(), "cpu", peers=("jax", "torch"), rounds=2, db=db, search_budget=4,
                    greedy_timeout_s=120, out_dir=root / "results", command="autotune bench x")
    return res, db, root


def test_run_bench_searches_times_and_saves(searched):
    res, db, root = searched
    assert res.search is not None and res.search["budget"] == 4
    for name in ("best", "unfused", "heuristic", "jax"):
        c = res.contender(name)
        assert c.status == "ok", (name, c.error)
        assert c.median_s > 0 and c.min_s <= c.median_s and len(c.times_s) == 2
        assert c.rel_err <= res.rtol
    assert res.contender("jax").ratio_to_xla == pytest.approx(1.0)
    assert res.contender("best").ratio_to_xla == pytest.approx(
        res.contender("best").median_s / res.xla_median_s)
    for name in ("best", "unfused", "heuristic", "greedy"):
        assert res.contender(name).predicted_s > 0
    g = res.contender("greedy")
    assert g.status == "ok", g.error        # tiny: the one run ends well within the timeout
    assert g.median_s > 0 and g.note == "one run"
    torch = res.contender("torch")
    if torch.status != "ok":                 # not installed here: skipped with the reason
        assert torch.status == "skipped" and "PyTorch" in torch.error
    fl = res.floor
    assert fl["floor_s"] == max(fl["compute_s"], fl["memory_s"]) > 0
    # the floor is the machine's limit (peak FMA rate); the library GEMM rate is quoted beside it
    assert fl["compute_s"] == pytest.approx(fl["useful_flops"] / fl["peak_flops"])
    assert fl["gemm_floor_s"] == pytest.approx(max(fl["useful_flops"] / fl["gemm_flops"],
                                                   fl["memory_s"]))
    path = root / "results" / "bench-trimul_outgoing-N12-C8-cpu.json"
    assert res.json_path == str(path)
    rec = json.loads(path.read_text())
    assert rec["command"] == "autotune bench x"
    assert rec["contenders"]["jax"]["times_s"] == list(res.contender("jax").times_s)
    assert rec["versions"]["numpy"] == np.__version__ and rec["machine"]["cores"] >= 1
    # the thread spins every contender ran under (torch.compile's libgomp reads them too)
    spins = rec["machine"]["threads"]
    assert set(spins) == {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT", "late"}
    assert spins["GOMP_SPINCOUNT"] == os.environ["GOMP_SPINCOUNT"]
    assert rec["best_plan"]["plan_key"] and rec["search"]["budget"] == 4
    table = format_table(rec)
    assert table == format_table(res)
    for word in ("best", "heuristic", "unfused", "greedy", "jax (XLA)", "floor", "1.00x"):
        assert word in table


def test_cached_plan_is_reused_without_searching(searched, monkeypatch):
    _, db, _ = searched
    monkeypatch.setattr("autotune.api.run_search", lambda *a, **k: pytest.fail("searched"))
    res = run_bench(tiny(), peers=(), rounds=1, db=db, search_budget=4, greedy_timeout_s=None,
                    out_dir=None)
    assert res.search is None and res.contender("best").status == "ok"
    assert res.contender("greedy").status == "skipped" and res.json_path is None
    assert res.xla_median_s is None and res.contender("best").ratio_to_xla is None


def test_no_cached_plan_and_no_budget_is_one_line_error(tmp_path):
    with pytest.raises(BenchError) as e:
        run_bench(tiny(), peers=(), db=tmp_path / "none.sqlite", out_dir=None)
    msg = str(e.value)
    assert "\n" not in msg and "autotune search" in msg and "--search-budget" in msg


def test_unknown_peer_is_rejected():
    with pytest.raises(BenchError, match="unknown peer 'tvm'"):
        run_bench(tiny(), peers=("jax", "tvm"), out_dir=None)


def test_wrong_and_failing_contenders_are_reported_not_timed(searched, monkeypatch):
    _, db, _ = searched
    w = tiny()

    def wrong(ctx):
        zeros = {o: np.zeros(w.shapes[o], dtype=np.float32) for o in w.outputs}
        return Runner(lambda: zeros, dict)

    def broken(ctx):
        raise RuntimeError("compiler crashed\nsecond line")

    def missing(ctx):
        raise PeerUnavailable("iree is not installed here")
    monkeypatch.setitem(bench_runners.PEER_BUILDERS, "jax", wrong)
    monkeypatch.setitem(bench_runners.PEER_BUILDERS, "torch", broken)
    monkeypatch.setitem(bench_runners.PEER_BUILDERS, "iree", missing)
    # (the builders are replaced in this process, where the peers run by default)
    res = run_bench(w, peers="jax,torch,iree", rounds=1, db=db, greedy_timeout_s=None,
                    out_dir=None)
    j = res.contender("jax")
    assert j.status == "wrong" and j.median_s is None and j.times_s == ()
    assert "wrong result in 'out'" in j.error and j.rel_err == pytest.approx(1.0)
    t = res.contender("torch")
    assert t.status == "failed" and t.error == "RuntimeError: compiler crashed"
    i = res.contender("iree")
    assert i.status == "skipped" and i.error == "iree is not installed here"
    assert res.contender("best").status == "ok"
    table = format_table(res)
    assert "WRONG, not timed" in table and "skipped: iree is not installed here" in table


@pytest.mark.parametrize("case", ["float32", "float64", "float64_tanh"])
def test_iree_peer_matches_reference(case):
    # float64: the module must take float64 inputs (it was lowered as float32 and refused them);
    # with a tanh (gelu_mlp's GELU), which IREE calls from libm in float64, it must also link
    require("jax")
    require("iree.compiler")
    require("iree.runtime")
    from autotune.backends.base import verify
    from autotune.reference import reference
    from search_spaces import parse_workload
    from search_spaces.loader import builtin_text
    from tests.conftest import SMALL_DIMS
    dtype = case.split("_")[0]
    name, dims = ("gelu_mlp", SMALL_DIMS["gelu_mlp"]) if "tanh" in case else \
        ("trimul_outgoing", DIMS)
    w = tiny() if case == "float32" else parse_workload(
        builtin_text(name).replace('dtype = "float32"', 'dtype = "float64"'), "w64.toml", dims)
    assert w.dtype == dtype
    inputs = w.random_inputs(seed=3)
    r = bench_runners.iree_runner(bench_runners.Context(w, inputs, "cpu", None))
    out = r.to_host(r.call())
    assert all(np.asarray(v).dtype == np.dtype(dtype) for v in out.values())
    err, why = verify(out, reference(w, inputs), w.rtol)
    assert not why, why
    assert "stablehlo" in bench_runners.stablehlo_text(w) and r.detail["target"] == "llvm-cpu"


# ---- plots -------------------------------------------------------------------------------------
def test_plots_are_non_empty_pngs(searched, tmp_path):
    require("matplotlib")
    from autotune.report.plots import plot_all, plot_bench
    res, db, root = searched
    written = plot_all(tiny(), tmp_path / "plots", db=db, results_dir=root / "results")
    assert set(written) == {"history", "predicted_vs_measured", "bench", "rho"}
    assert -1 <= written["rho"] <= 1 or math.isnan(written["rho"])
    for name in ("history", "predicted_vs_measured", "bench"):
        data = written[name].read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, name
    p = plot_bench(res, tmp_path / "bar.png")
    assert p.read_bytes().startswith(PNG)


def test_plot_without_trials_is_an_error(tmp_path):
    require("matplotlib")
    from autotune.report.plots import PlotError, plot_all
    from db.store import PlanDB
    PlanDB(tmp_path / "empty.sqlite").close()       # a database without trials (a missing
    with pytest.raises(PlotError, match="autotune search"):     # one: test_missing_db)
        plot_all(tiny(), tmp_path / "p", db=tmp_path / "empty.sqlite")


# ---- the CLI -----------------------------------------------------------------------------------
def test_cli_bench_and_plot(searched, tmp_path):
    from autotune.cli.app import app
    _, db, _ = searched
    runner = CliRunner()
    r = runner.invoke(app, ["bench", "trimul_outgoing", "--dims", "N=12,C=8", "--peers", "jax",
                            "--rounds", "1", "--greedy-timeout", "0", "--db", str(db),
                            "--out", str(tmp_path / "res"), "--isolate-peers"])
    assert r.exit_code == 0, r.output
    assert "jax (XLA)" in r.stdout and "floor" in r.stdout
    rec = json.loads((tmp_path / "res" / "bench-trimul_outgoing-N12-C8-cpu.json").read_text())
    jax = rec["contenders"]["jax"]
    assert jax["status"] == "ok" and jax["detail"]["process"] == "own"   # timed over there
    r = runner.invoke(app, ["bench", "trimul_outgoing", "--dims", "N=12,C=8", "--db",
                            str(tmp_path / "empty.sqlite"), "--out", str(tmp_path / "res")])
    assert r.exit_code == 1 and "--search-budget" in r.output
    r = runner.invoke(app, ["bench", "--peers", "jax,tvm", "--dims", "N=12,C=8"])
    assert r.exit_code == 1 and "unknown peer 'tvm'" in r.output
    require("matplotlib")
    r = runner.invoke(app, ["plot", "trimul_outgoing", "--dims", "N=12,C=8", "--db", str(db),
                            "--results", str(tmp_path / "res"), "--out", str(tmp_path / "p")])
    assert r.exit_code == 0, r.output
    for f in ("history.png", "predicted_vs_measured.png", "bench.png"):
        assert (tmp_path / "p" / f).read_bytes().startswith(PNG)
    assert "Spearman's rho" in r.stdout


def test_the_floor_counts_a_product_at_its_order_of_fewest_flops():
    # r[b,o] += x[b,i] * w[o,i,j] * z[b,j]: 2*B*O*I*J flops as written, but (x.z).w needs
    # B*I*J + 2*B*I*J*O - the floor must not sit above the plans that split it
    from costmodel.devices import CPU_DEFAULT
    from autotune.bench.roofline import floor_of
    from search_spaces import parse_workload
    text = ('name = "bilinear"\noutputs = ["r"]\nprogram = """\n'
            'r[b,o] += x[b,i] * w[o,i,j] * z[b,j]\n"""\n[dims]\nB = 16\nI = 8\nJ = 8\nO = 32\n'
            '[inputs]\nx = ["B", "I"]\nw = ["O", "I", "J"]\nz = ["B", "J"]\n')
    w = parse_workload(text, "bilinear.toml")
    as_written = w.flops()
    fl = floor_of(w, CPU_DEFAULT)
    assert fl["useful_flops"] < as_written
    assert fl["useful_flops"] == 16 * 8 * 8 + 2 * 16 * 8 * 8 * 32
    assert fl["compute_s"] == pytest.approx(fl["useful_flops"] / CPU_DEFAULT.f32_flops)


def test_the_floor_applies_a_sums_constant_factors_once_per_result():
    # s += q * k / sqrt(D): a multiply-add per term, the scale once per score; m += x / C the
    # same for a plain reduction; an elementwise op's constants stay per element
    from autotune.bench.roofline import useful_flops
    from search_spaces import parse_workload
    text = ('name = "scaled"\noutputs = ["y"]\nprogram = """\n'
            's[i,j] += q[i,d] * k[j,d] / sqrt(D)\nm[i] += s[i,j] / J\n'
            'y[i,j] = s[i,j] * 2.0 - m[i]\n"""\n[dims]\nI = 8\nJ = 16\nD = 4\n'
            '[inputs]\nq = ["I", "D"]\nk = ["J", "D"]\n')
    w = parse_workload(text, "scaled.toml")
    scale = w.op("s").flops_per_iteration()[0] - 2          # what / sqrt(D) costs
    assert scale >= 1
    assert useful_flops(w) == (8 * 16 * 4 * 2 + 8 * 16 * scale) + (8 * 16 + 8) + 8 * 16 * 2
    assert useful_flops(w) < w.flops()


def test_a_float64_floor_is_at_half_the_float32_rates():
    from costmodel.devices import CPU_DEFAULT
    from autotune.bench.roofline import floor_of
    from search_spaces import parse_workload
    from search_spaces.loader import builtin_text
    text = builtin_text("trimul_outgoing")
    w32 = parse_workload(text, "t32.toml", DIMS)
    w64 = parse_workload(text.replace('dtype = "float32"', 'dtype = "float64"'), "t64.toml", DIMS)
    f32, f64 = floor_of(w32, CPU_DEFAULT), floor_of(w64, CPU_DEFAULT)
    assert f64["useful_flops"] == f32["useful_flops"]
    assert f64["compute_s"] == pytest.approx(2 * f32["compute_s"])
    assert f64["peak_flops"] == pytest.approx(CPU_DEFAULT.f32_flops / 2)
    assert f64["compulsory_bytes"] == 2 * f32["compulsory_bytes"]
