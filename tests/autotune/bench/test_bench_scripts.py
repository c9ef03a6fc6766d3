"""The bench scripts whose figures the README and the issues quote, each run once at its smallest
size: they still import, run, check their plans against float64 and write the JSON they promise.
(bench/gemm_kernel.py went stale unnoticed once: it imported a calibration function that had
moved.)  loaded_search.py is left to its own runs: it needs a minute of machine load."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support import ROOT

BENCH = ROOT / "bench"


def run_script(name: str, *args: str, tmp_path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, AUTOTUNE_DB=str(tmp_path / "plans.sqlite"))
    r = subprocess.run([sys.executable, str(BENCH / name), *args], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r


def only_json(folder):
    files = list(folder.glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_gemm_kernel_bench_checks_the_kernel_against_blas(tmp_path):
    # C on a cache line and 16 bytes past one (streamed only on lines), each checked
    run_script("gemm_kernel.py", "--rounds", "1", "--shapes", "48x64x24,2x16x32x8",
               "--variant", "pack_a=0,stream=1", "--c-offsets", "0,16",
               "--out", str(tmp_path / "out"), tmp_path=tmp_path)
    d = only_json(tmp_path / "out")
    assert d["float32_fma_peak_gflops"] > 0
    assert [r["label"] for r in d["results"]] == ["48x64x24", "2x16x32x8"]
    for r in d["results"]:
        assert set(r["median_s"]) == {"blas", "default@0", "default@16", "pack_a=0,stream=1@0",
                                      "pack_a=0,stream=1@16"}
        assert all(0 < t for t in r["median_s"].values())
        assert max(r["max_rel_error"].values()) < 1e-4, r["max_rel_error"]


def test_alignment_bench_times_both_placements(tmp_path):
    run_script("alignment.py", "--workloads", "gelu_mlp", "--dims", "T=16,C=8,F=16",
               "--plans", "heuristic", "--rounds", "1", "--out", str(tmp_path / "out"),
               tmp_path=tmp_path)
    d = only_json(tmp_path / "out")
    (row,) = d["results"]
    assert row["plan"] == "heuristic" and row["aligned_s"] > 0 and row["misaligned_s"] > 0
    assert d["misalign_bytes"] % 64 != 0


def test_cpu_trimul_bench_then_search_record(tmp_path):
    """cpu_trimul.py searches (no plan cached yet) and times the contenders; search_record.py
    then summarises the search it left in the database."""
    r = run_script("cpu_trimul.py", "--dims", "N=8,C=4", "--rounds", "1", "--greedy-timeout",
                   "0", "--search-budget", "2", "--peers", "", "--out", str(tmp_path / "bench"),
                   tmp_path=tmp_path)
    d = only_json(tmp_path / "bench")
    for name in ("best", "heuristic", "unfused"):
        assert d["contenders"][name]["status"] == "ok", d["contenders"][name]
        assert d["contenders"][name]["median_s"] > 0
    assert d["floor"]["floor_s"] > 0 and "best plan:" in r.stdout

    run_script("search_record.py", "--db", str(tmp_path / "plans.sqlite"), "--wall", "9.5",
               "--command", "autotune search --budget 2", "--how-run", "a test",
               "--out", str(tmp_path / "out"), tmp_path=tmp_path)
    rec = only_json(tmp_path / "out")
    assert rec["best_candidate"]["schedules"]
    assert rec["wall_time"] == "9.5" and rec["how_run"] == "a test"    # bash `time`'s text
    assert rec["trials"].get("ok", 0) >= 1 and rec["cached_best"]["measured_s"] > 0


@pytest.mark.slow
def test_pool_efficiency_replays_a_measured_pool(tmp_path):
    (pool,) = (ROOT / "bench" / "results").glob("pool-pool_gelu_mlp-*.json")
    r = run_script("pool_efficiency.py", "--pool", str(pool), "--dims", "T=256,C=128,F=512",
                   "--seeds", "0", "--fraction", "0.05", "--out", str(tmp_path / "out"),
                   tmp_path=tmp_path)
    d = only_json(tmp_path / "out")
    (seed,) = d["seeds"]
    assert d["budget"] == -(-d["pool_size"] * 5 // 100)
    assert 0 < seed["speed_vs_pool_best"] <= 1.0 and seed["outside_pool"] == 0, r.stderr[-2000:]


def test_pool_efficiency_says_in_one_line_when_the_space_is_too_large(tmp_path, monkeypatch):
    """A space past the walk's limit of answer sets: one line naming the workload and the fix,
    no traceback (in process, with the limit lowered to 10 so the walk stops at once)."""
    import importlib.util

    from search_spaces import exhaustive
    spec = importlib.util.spec_from_file_location("pool_efficiency", BENCH / "pool_efficiency.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setattr(mod, "all_candidates",
                        lambda space: exhaustive.all_candidates(space, max_leaves=10))
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "plans.sqlite"))
    with pytest.raises(SystemExit) as e:
        mod.main(["gelu_mlp", "--dims", "T=8,C=8,F=8", "--out", str(tmp_path / "out")])
    msg = str(e.value.code)
    assert msg.startswith("gelu_mlp: more than 10 answer sets") and "[space] table" in msg, msg
    assert "\n" not in msg


def test_pairs_bench_times_the_pair_against_its_split_and_the_heuristic(tmp_path):
    # C=32: at C=16 each projection is a 16-deep product, whose micro-kernel calls cost more
    # than its flops, and the model's favourites (rightly) hold no pair
    run_script("pairs.py", "trimul_outgoing", "--dims", "N=32,C=32", "--rounds", "1",
               "--out", str(tmp_path / "out"), tmp_path=tmp_path)
    d = only_json(tmp_path / "out")
    assert set(d["median"]) == {"pair", "split", "heuristic"}
    assert d["pairs"] and all(len(m) == 3 for m in d["pairs"].values())   # two + the epilogue
    assert all(m["total_s"] > 0 and 0 < m["pair_ops_s"] <= m["total_s"]
               for m in d["median"].values())
    assert d["candidates"]["pair"] != d["candidates"]["split"]


def test_torch_overhead_bench_times_bound_and_unbound_calls(tmp_path):
    pytest.importorskip("torch")
    run_script("torch_overhead.py", "--n", "8", "--c", "8", "--rounds", "1",
               "--db", str(tmp_path / "plans.sqlite"), "--out", str(tmp_path / "out"),
               tmp_path=tmp_path)
    d = only_json(tmp_path / "out")
    assert set(d["real_plan"]) == {"bare", "bare_bound", "torch", "torch_bound"}
    assert all(v["median_us"] > 0 for v in d["real_plan"].values())
    assert set(d["overhead_us"]) == {"torch", "torch_bound"}


def test_binding_bench_times_the_plan_bound_and_not(tmp_path):
    run_script("binding.py", "trimul_outgoing", "--dims", "N=8,C=8", "--rounds", "2",
               "--round-s", "0.01", "--out", str(tmp_path / "out"), tmp_path=tmp_path)
    d = only_json(tmp_path / "out")
    assert set(d["median_s"]) == {"plan", "bound"} and all(v > 0 for v in d["median_s"].values())
    assert len(d["per_round_s"]["bound"]) == 2
    assert set(d["prepared"]) == {"constant_groups", "operands_bytes"}
    assert d["plan"] == "heuristic"         # nothing tuned in the test's fresh database


def test_thread_spin_bench_runs_each_setting_in_its_own_process(tmp_path):
    run_script("thread_spin.py", "gated_mlp", "--dims", "T=8,C=8,F=16", "--settings",
               "5000/17,300/12", "--rounds", "1", "--alternations", "1",
               "--out", str(tmp_path / "out"), tmp_path=tmp_path)
    d = only_json(tmp_path / "out")
    assert [r["setting"] for r in d["records"]] == ["5000/17", "300/12"]
    # each process ran under its own setting (the one autotune.threads leaves alone)
    assert [r["env"]["GOMP_SPINCOUNT"] for r in d["records"]] == ["5000", "300"]
    assert [r["env"]["OPENBLAS_THREAD_TIMEOUT"] for r in d["records"]] == ["17", "12"]
    assert all(r["median_s"]["heuristic"] > 0 for r in d["records"])
