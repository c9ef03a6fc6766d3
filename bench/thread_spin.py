#!/usr/bin/env python
"""How long the idle OpenMP and OpenBLAS threads should spin (autotune.threads), measured: the
heuristic plans of some workloads, each setting in a process of its own.

    python bench/thread_spin.py                                    # the default list, 2 settings
    python bench/thread_spin.py bench/unseen/odd_mlp.toml attention --settings 5000/17,1000/14,300/12
    python bench/thread_spin.py gated_mlp --db plans.db --plans heuristic,best --alternations 3

A setting ``S/T`` is ``GOMP_SPINCOUNT=S OPENBLAS_THREAD_TIMEOUT=T`` with
``OMP_WAIT_POLICY=PASSIVE`` (the runtimes read them when they load, so one process each).  Every
(setting, workload) pair runs in a fresh process that builds the plans, checks each against the
float64 reference on random inputs and times it in rounds of back-to-back calls (about 0.25 s a
round, the plans interleaved); the settings alternate ``--alternations`` times, so a setting's
spread across its processes shows the host's noise.  Prints one line per process and writes
``<out>/thread-spin-cpu.json`` (every process's medians and the command).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

DEFAULT_WORKLOADS = ("attention", "gated_mlp", "gelu_mlp", "bench/unseen/odd_mlp.toml",
                     "bench/unseen/var_pow.toml", "bench/unseen/long_elementwise.toml")


def child(workload: str, dims: str, plans: list[str], db: str | None, rounds: int) -> dict:
    """Time ``plans`` of ``workload`` in this process (its thread settings): medians per plan."""
    import autotune  # noqa: F401  (before NumPy)
    from search_spaces.loader import load_workload
    from search_spaces.plans import named_plan
    from autotune.api import best_candidate, space_for
    from autotune.backends.base import BufferPool, verify
    from autotune.backends.factory import backend_kind, resolve
    from autotune.cli.common import parse_dims
    from autotune.reference import reference
    w = load_workload(workload, parse_dims(dims) or None)
    kind = backend_kind(resolve("cpu").kind)
    space = space_for(w, "cpu")
    inputs = w.random_inputs(0)
    ref = reference(w, inputs)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autotune" / "kernels"
    built = {}
    for name in plans:
        cand = best_candidate(w, "cpu", db)[0] if name == "best" else named_plan(space, name)
        if cand is None:
            raise SystemExit(f"{w.name}: no cached best plan in {db}; run autotune search first")
        plan = kind.make_plan(w, cand, cache, pool=BufferPool())
        err, why = verify(plan(**inputs), ref, w.rtol)
        if why:
            raise SystemExit(f"{w.name}: the {name} plan is wrong ({why}); nothing timed")
        built[name] = plan
    one = max(_timed(p, inputs, 1) for p in built.values())
    calls = max(3, int(0.25 / max(one, 1e-7)))
    runs: dict[str, list[float]] = {n: [] for n in built}
    for _ in range(rounds):
        for n, p in built.items():
            runs[n].append(_timed(p, inputs, calls))
    seen = {v: os.environ.get(v) for v in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT",
                                           "OPENBLAS_THREAD_TIMEOUT")}
    return {"workload": w.name, "dims": dict(w.dims), "calls_per_round": calls, "env": seen,
            "median_s": {n: statistics.median(v) for n, v in runs.items()}, "runs_s": runs}


def _timed(plan, inputs, calls: int) -> float:
    plan(**inputs)
    t0 = time.perf_counter()
    for _ in range(calls):
        plan(**inputs)
    return (time.perf_counter() - t0) / calls


def _env(setting: str) -> dict[str, str]:
    spin, timeout = setting.split("/")
    env = dict(os.environ)
    env.update(OMP_WAIT_POLICY="PASSIVE", GOMP_SPINCOUNT=str(int(spin)),
               OPENBLAS_THREAD_TIMEOUT=str(int(timeout)))
    return env


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workloads", nargs="*", default=list(DEFAULT_WORKLOADS))
    ap.add_argument("--dims", default="", help="dims for every workload, e.g. N=64")
    ap.add_argument("--settings", default="5000/17,1000/14",
                    help="GOMP_SPINCOUNT/OPENBLAS_THREAD_TIMEOUT pairs, comma-separated")
    ap.add_argument("--plans", default="heuristic", help="named plans, or best (with --db)")
    ap.add_argument("--db", default=None)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--alternations", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "threads-spin"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    plans = a.plans.split(",")
    if a.child:
        print(json.dumps(child(a.workloads[0], a.dims, plans, a.db, a.rounds)))
        return 0
    settings = a.settings.split(",")
    for s in settings:
        if len(s.split("/")) != 2 or not all(x.isdigit() for x in s.split("/")):
            raise SystemExit(f"--settings: {s!r} is not SPIN/TIMEOUT (for example 1000/14)")
    if a.rounds < 1 or a.alternations < 1:
        raise SystemExit("--rounds and --alternations must be at least 1")
    records = []
    for alt in range(a.alternations):
        for s in settings:
            for wl in a.workloads:
                # (a file named relative to the caller's directory, the child runs in ROOT)
                wl = str(Path(wl).resolve()) if Path(wl).is_file() else wl
                cmd = [sys.executable, __file__, wl, "--child", "--plans", a.plans,
                       "--rounds", str(a.rounds), "--dims", a.dims] + \
                      (["--db", a.db] if a.db else [])
                r = subprocess.run(cmd, env=_env(s), capture_output=True, text=True, cwd=ROOT)
                if r.returncode != 0:
                    msg = (r.stderr.strip().splitlines() or ["no output"])[-1]
                    raise SystemExit(f"{wl} under {s}: {msg}")
                rec = json.loads(r.stdout.strip().splitlines()[-1])
                rec.update(setting=s, alternation=alt + 1)
                records.append(rec)
                print(f"{alt + 1} {s:>9s} {rec['workload']:20s} " + "  ".join(
                    f"{n} {v * 1e6:9.1f} us" for n, v in rec["median_s"].items()), flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "thread-spin-cpu.json"
    path.write_text(json.dumps({
        "command": "python bench/thread_spin.py " + " ".join(sys.argv[1:] if argv is None
                                                              else argv),
        "machine": platform.processor() or platform.machine(), "cores": os.cpu_count(),
        "settings": settings, "records": records}, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
