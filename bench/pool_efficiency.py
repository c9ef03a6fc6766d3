#!/usr/bin/env python
"""Search efficiency against a whole measured space: how close does a search with a budget of a
quarter of the space come to the best candidate of all of it?

    python bench/pool_efficiency.py                          # bench/workloads/pool_gelu_mlp.toml
    python bench/pool_efficiency.py WORKLOAD --dims T=256 --fraction 0.25 --seeds 0,1,2
    python bench/pool_efficiency.py --pool bench/results/pool-....json   # reuse a measured pool

1. Every candidate of the workload's space (search_spaces.exhaustive walks its questions; the
   workload's [space] table keeps it small) is measured on the CPU backend in interleaved
   rounds through the isolated worker (autotune.report.check_rounds.measure_rounds: every run
   verified against the float64 reference; each candidate's time the median of its rounds).
2. For each seed, `search()` runs with the CLI's configuration and a budget of ``fraction`` x
   the pool's size (pruned and failed trials count) from an empty plan database, its
   measurements answered from the pool (autotune.backends.replay: the pool's median for
   every run, the same for the confirmation), so the seeds differ only in the search's own
   choices, never in the machine's noise.  A candidate the search builds that the pool does
   not hold would be answered "failed" and counted (the walk is exhaustive: expected 0).
3. Each seed's cached best is scored as pool best time / its pool time (1.0: it found the
   best; the issue asks >= 0.95).

The pool and the figures are written to ``<out>/pool-<workload>-<dims>-cpu.json``.
"""
from __future__ import annotations

import autotune  # noqa: F401  (first: its thread settings precede NumPy's OpenBLAS)

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:      # run as a script: this checkout's packages
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from db.keys import PlanKey  # noqa: E402
from db.records import Status  # noqa: E402
from db.store import PlanDB  # noqa: E402
from search_spaces import load_workload  # noqa: E402
from search_spaces.exhaustive import SpaceTooLarge, all_candidates  # noqa: E402
from search_spaces.space import SearchSpace  # noqa: E402

from autotune.backends.base import Measurement, MeasureSettings  # noqa: E402
from autotune.backends.factory import backend_kind, resolve  # noqa: E402
from autotune.backends.replay import NOT_RECORDED, ReplayBackend  # noqa: E402
from autotune.report.check_rounds import measure_rounds  # noqa: E402
from autotune.search.config import SearchConfig  # noqa: E402
from autotune.search.loop import search  # noqa: E402
from autotune.search.state import REUSED  # noqa: E402

DEFAULT = ROOT / "bench" / "workloads" / "pool_gelu_mlp.toml"


def measure_pool(w, kind, env, space, rounds: int, seed: int, cache: Path, log) -> dict:
    cands = all_candidates(space)
    log(f"{w.name}: {len(cands)} distinct candidates in the space; measuring each in "
        f"{rounds} interleaved rounds")
    backend = kind.backend(w, seed, cache, MeasureSettings(repeats=1))
    t0 = time.time()
    try:
        state = measure_rounds(backend, cands, rounds, seed, kind.min_timeout_s,
                               lambda s: None)
    finally:
        backend.close()
    pool = {}
    for c in cands:
        status, times, error = state[c.key]
        pool[c.key] = {"status": str(status), "times": times,
                       "median_s": float(np.median(times)) if status == Status.OK and times
                       else None, "error": error, "candidate": c.to_json()}
    log(f"measured in {time.time() - t0:.0f} s")
    return pool


def replay_of(pool: dict, kind) -> ReplayBackend:
    rec = {}
    for key, p in pool.items():
        rec[key] = (Measurement(Status.OK, p["median_s"], tuple(p["times"]))
                    if p["status"] == "ok" else Measurement(Status.FAILED, error=p["error"]))
    return ReplayBackend(rec, kind=kind, confirmed=rec)


def run_seed(w, space, kind, env, pool: dict, budget: int, seed: int, workdir: Path) -> dict:
    db = PlanDB(workdir / f"seed{seed}.sqlite")
    backend = replay_of(pool, kind)
    try:
        key = PlanKey.for_env(w.hash, env)
        t0 = time.time()
        res = search(w, space, backend, db, key, kind.device_spec(env),
                     SearchConfig(budget=budget, seed=seed))
        wall = time.time() - t0
        trials = db.trials(key.key)
    finally:
        db.close()
    best_key = res.best.to_candidate().key
    ok = [p["median_s"] for p in pool.values() if p["median_s"] is not None]
    asked = {c.key for c in backend.calls}
    return {
        "seed": seed, "budget": budget, "search_wall_s": round(wall, 2),
        "trials": len([t for t in trials if not t.study.endswith("confirm")]),
        "pruned": sum(1 for t in trials if t.status == Status.PRUNED),
        "reused": sum(1 for t in trials if t.error == REUSED),
        "distinct_measured": len(asked),
        "measured_fraction_of_pool": round(len(asked) / len(pool), 4),
        "outside_pool": sum(1 for t in trials if t.error == NOT_RECORDED),
        "best_key": best_key, "best_name": res.best.name,
        "best_pool_s": pool[best_key]["median_s"],
        "rank_in_pool": 1 + sum(1 for v in ok if v < pool[best_key]["median_s"]),
        "speed_vs_pool_best": min(ok) / pool[best_key]["median_s"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", nargs="?", default=str(DEFAULT))
    ap.add_argument("--dims", default=None, help="e.g. T=256,C=128")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--fraction", type=float, default=0.25)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--min-pool", type=int, default=300)
    ap.add_argument("--pool", default=None, help="a pool JSON written before: skip measuring")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    dims = dict(kv.split("=") for kv in a.dims.split(",")) if a.dims else None
    w = load_workload(a.workload, {k: int(v) for k, v in dims.items()} if dims else None)
    dims_s = "-".join(f"{k}{v}" for k, v in dict(w.dims).items())
    path = Path(a.out) / f"pool-{w.name}-{dims_s}-cpu.json"
    command = "python bench/pool_efficiency.py " + " ".join(sys.argv[1:] if argv is None else argv)
    env = resolve("cpu")
    kind = backend_kind(env.kind)
    space = SearchSpace(w, kind.tile_bounds)
    with tempfile.TemporaryDirectory() as tmp:
        if a.pool:
            pool = json.loads(Path(a.pool).read_text())["pool"]
        else:
            try:
                pool = measure_pool(w, kind, env, space, a.rounds, 0, Path(tmp), log)
            except SpaceTooLarge as e:
                sys.exit(f"{a.workload}: {e}")
            # saved before any search: the measurement is the expensive part
            Path(a.out).mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"command": command, "pool": pool}))
            log(f"wrote the pool to {path} (reuse it with --pool)")
        if len(pool) < a.min_pool:
            sys.exit(f"{a.workload}: the space holds {len(pool)} candidates, fewer than "
                     f"--min-pool {a.min_pool}; widen its [space] table")
        budget = math.ceil(a.fraction * len(pool))
        runs = []
        for seed in (int(s) for s in a.seeds.split(",")):
            r = run_seed(w, space, kind, env, pool, budget, seed, Path(tmp))
            log(f"seed {seed}: best {r['best_pool_s']:.4g} s, rank {r['rank_in_pool']} of "
                f"{len(pool)}, {100 * r['speed_vs_pool_best']:.1f} % of the pool's best speed "
                f"({r['distinct_measured']} distinct candidates measured, "
                f"{r['outside_pool']} outside the pool)")
            runs.append(r)
    ok = sorted(p["median_s"] for p in pool.values() if p["median_s"] is not None)
    out = {
        "command": command,
        "workload": w.name, "dims": dict(w.dims),
        "load_average": list(os.getloadavg()), "machine": platform.processor()
        or platform.machine(), "pool_size": len(pool), "pool_ok": len(ok),
        "pool_best_s": ok[0], "pool_median_s": ok[len(ok) // 2], "pool_worst_s": ok[-1],
        "fraction": a.fraction, "budget": budget, "seeds": runs,
        "min_speed_vs_pool_best": min(r["speed_vs_pool_best"] for r in runs),
        "pool": pool,
    }
    Path(a.out).mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print(json.dumps({k: v for k, v in out.items() if k != "pool"}, indent=1))
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
