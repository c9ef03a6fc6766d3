#!/usr/bin/env python
"""The cached best CPU plan against JAX/XLA:CPU and the named plans, in one process.

    python bench/cpu_trimul.py                       # trimul_outgoing at N=702 (C=128)
    python bench/cpu_trimul.py --dims N=256 --db /tmp/plans.sqlite --out /tmp/results

All contenders run on the same inputs (seed 1) and are checked against the float64 reference
before timing (a wrong one is reported and not timed).  Timing is in interleaved rounds: each
round runs every contender once, in a shuffled order; we report median and min.  The greedy plan
(the 2023 IREE rule, per-element tiles) is run once in a spawned subprocess under a timeout,
with its cost-model prediction.  The compute floor is the workload's useful flops at the GEMM
rate measured here (np.matmul 2048^2 float32).  A JSON record goes to
``<out>/cpu_trimul-<workload>-N<N>.json``.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import multiprocessing as mp
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

GEMM_N = 2048


# ---- helpers -----------------------------------------------------------------------------------
def parse_dims(text: str) -> dict[str, int]:
    out = {}
    for part in filter(None, (p.strip() for p in (text or "").split(","))):
        k, sep, v = part.partition("=")
        if not sep or not k.strip() or not v.strip().isdigit():
            raise SystemExit(f"--dims: {part!r} is not NAME=INTEGER (example: --dims N=702)")
        out[k.strip()] = int(v)
    return out


def gemm_rate(repeats: int = 5) -> float:
    """Best-of-``repeats`` float32 GEMM rate of np.matmul at 2048^2, in flop/s."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((GEMM_N, GEMM_N), dtype=np.float32)
    b = rng.standard_normal((GEMM_N, GEMM_N), dtype=np.float32)
    c = np.empty_like(a)
    np.matmul(a, b, out=c)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.matmul(a, b, out=c)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * GEMM_N ** 3 / best


def version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def fmt_s(t: float | None) -> str:
    if t is None:
        return "-"
    return f"{t * 1e3:.2f} ms" if t < 1 else f"{t:.3f} s"


# ---- the greedy plan, in a spawned subprocess ---------------------------------------------------
def _greedy_child(spec: str, dims: dict, seed: int, cache_dir: str, out_dir: str, conn) -> None:
    """Compile and run the greedy plan once; report through ``conn``; outputs to ``out_dir``."""
    try:
        from autotune.api import make_executable, space_for
        from search_spaces import load_workload
        from search_spaces.plans import named_plan
        w = load_workload(spec, dims)
        inputs = w.random_inputs(seed=seed)
        t0 = time.perf_counter()
        fn = make_executable(w, named_plan(space_for(w, "cpu"), "greedy"), "cpu",
                             Path(cache_dir))
        conn.send(("compiled", time.perf_counter() - t0))
        t0 = time.perf_counter()
        outs = fn(**inputs)
        elapsed = time.perf_counter() - t0
        np.savez(os.path.join(out_dir, "greedy.npz"), **outs)
        conn.send(("done", elapsed))
    except BaseException as e:  # reported to the parent, which prints it
        conn.send(("error", f"{type(e).__name__}: {e}".splitlines()[0]))


def run_greedy(w, spec: str, seed: int, cache_dir: Path, timeout_s: float, ref, rtol: float,
               compile_timeout_s: float = 600.0) -> dict:
    """One run of the greedy plan in a spawned process: its time, or that it timed out."""
    from autotune.measure import verify
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="greedy-") as tmp:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_greedy_child,
                           args=(spec, w.dim_dict, seed, str(cache_dir), tmp, child), daemon=True)
        proc.start()
        child.close()
        res: dict = {"status": "error", "timeout_s": timeout_s}
        try:
            if not parent.poll(compile_timeout_s):
                res.update(status="error", error=f"no compiled plan after {compile_timeout_s:g} s")
                return res
            msg = parent.recv()
            if msg[0] == "error":
                res.update(error=msg[1])
                return res
            res["compile_s"] = msg[1]
            if not parent.poll(timeout_s):
                res.update(status="timed_out")
                return res
            msg = parent.recv()
            if msg[0] == "error":
                res.update(error=msg[1])
                return res
            res["time_s"] = msg[1]
            with np.load(os.path.join(tmp, "greedy.npz")) as z:
                err, why = verify({k: z[k] for k in z.files}, ref, rtol)
            res["rel_err"] = err
            res["status"] = "wrong" if why else "ok"
            if why:
                res["error"] = why
            return res
        except EOFError:
            res.update(error=f"the subprocess died (exit code {proc.exitcode})")
            return res
        finally:
            if proc.is_alive():
                proc.kill()
            proc.join(10)
            parent.close()


# ---- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="trimul_outgoing", help="built-in name or .toml path")
    ap.add_argument("--dims", default="N=702", help="dim overrides, e.g. N=702 or N=256,C=64")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--db", default=None, help="plan database (default: $AUTOTUNE_DB or the "
                                              "user cache dir)")
    ap.add_argument("--greedy-timeout", type=float, default=60.0,
                    help="seconds the greedy plan's one run may take")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"), help="JSON output folder")
    ap.add_argument("--search-budget", type=int, default=None,
                    help="when no plan is cached, search this many trials first")
    ap.add_argument("--seed", type=int, default=1, help="seed of the inputs and the round order")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")

    from autotune import __version__
    from autotune.api import best_candidate, cache_root, make_executable, run_search, space_for
    from autotune.backends import device_spec
    from autotune.environment import detect
    from autotune.measure import verify
    from autotune.peers import PeerUnavailable, jax_function
    from autotune.reference import reference
    from costmodel import estimate
    from db.store import default_db_path
    from search_spaces import WorkloadError, load_workload
    from search_spaces.plans import named_plan

    command = [sys.executable, *sys.argv] if argv is None else [sys.executable, __file__, *argv]
    try:
        w = load_workload(args.workload, parse_dims(args.dims))
    except WorkloadError as e:
        raise SystemExit(str(e))
    dims_txt = ",".join(f"{k}={v}" for k, v in w.dims)
    db_path = Path(args.db).expanduser() if args.db else default_db_path()
    env = detect("cpu")
    dev = device_spec(env)
    print(f"{w.name}  dims {dims_txt}  dtype {w.dtype}  on {env.name} ({env.cores} cores)")
    print(f"plan database {db_path}")

    # (a) the cached best plan, found by a search
    cand, row = best_candidate(w, "cpu", db_path) if db_path.exists() else (None, None)
    searched = None
    if cand is None:
        if not args.search_budget:
            print(f"error: no plan cached for {w.name} ({dims_txt}) on this CPU in {db_path}; run "
                  f"`autotune search {args.workload} --dims {dims_txt} --db {db_path}` first "
                  f"(or pass --search-budget N)", file=sys.stderr)
            return 1
        from autotune.search import SearchConfig
        print(f"no plan cached: searching {args.search_budget} trials first ...", flush=True)
        t0 = time.perf_counter()
        result = run_search(w, "cpu", db_path, SearchConfig(budget=args.search_budget))
        searched = {"budget": args.search_budget, "wall_s": time.perf_counter() - t0,
                    "measured": result.progress.measured, "pruned": result.progress.pruned,
                    "failed": result.progress.failed}
        cand, row = best_candidate(w, "cpu", db_path)
        if cand is None:
            print(f"error: the search found no verified plan for {w.name}", file=sys.stderr)
            return 1

    inputs = w.random_inputs(seed=args.seed)
    t0 = time.perf_counter()
    ref = reference(w, inputs)
    ref_s = time.perf_counter() - t0
    print(f"float64 reference: {ref_s:.2f} s")

    root = cache_root(db_path)
    space = space_for(w, "cpu")
    plans = {"best": cand,
             "unfused": named_plan(space, "unfused"),
             "heuristic": named_plan(space, "heuristic")}
    greedy = named_plan(space, "greedy")
    predicted = {k: estimate(w, c, dev).total_s for k, c in {**plans, "greedy": greedy}.items()}

    contenders: dict[str, dict] = {}
    fns = {}
    for name, c in plans.items():
        info = contenders[name] = {"kind": "plan", "predicted_s": predicted[name]}
        try:
            t0 = time.perf_counter()
            fns[name] = make_executable(w, c, "cpu", root)
            info["build_s"] = time.perf_counter() - t0
        except Exception as e:
            info.update(status="failed", error=f"{type(e).__name__}: {e}".splitlines()[0])

    # (c) JAX/XLA:CPU via the peer generated from the IR; inputs placed on the device once
    info = contenders["xla"] = {"kind": "peer", "peer": "jax", "precision": "default"}
    try:
        import jax
        jfn = jax_function(w, "default")
        jin = {k: jax.device_put(v) for k, v in inputs.items()}
        t0 = time.perf_counter()
        jax.block_until_ready(jfn(**jin))
        info["build_s"] = time.perf_counter() - t0   # trace + XLA compile + first run
        fns["xla"] = lambda: jax.block_until_ready(jfn(**jin))
    except PeerUnavailable as e:
        info.update(status="unavailable", error=str(e))
    except Exception as e:
        info.update(status="failed", error=f"{type(e).__name__}: {e}".splitlines()[0])

    # every contender's output against the reference before timing (this is also the warm-up)
    runners = {}
    for name in list(fns):
        fn = fns[name]
        call = fn if name == "xla" else (lambda fn=fn: fn(**inputs))
        try:
            outs = call()
            err, why = verify({k: np.asarray(v) for k, v in outs.items()}, ref, w.rtol)
        except Exception as e:
            contenders[name].update(status="failed",
                                    error=f"{type(e).__name__}: {e}".splitlines()[0])
            continue
        contenders[name]["rel_err"] = err
        if why:
            contenders[name].update(status="wrong", error=why)
            print(f"{name}: WRONG ({why}); not timed")
            continue
        contenders[name]["status"] = "ok"
        runners[name] = call
        del outs

    rate = gemm_rate()
    flops = w.flops()
    floor = flops / rate
    print(f"GEMM rate (np.matmul {GEMM_N}^2 float32): {rate / 1e9:.1f} GFLOP/s;  "
          f"useful flops {flops:.4g};  compute floor {fmt_s(floor)}")

    times: dict[str, list[float]] = {n: [] for n in runners}
    rng = random.Random(args.seed)
    for r in range(args.rounds):
        order = list(runners)
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            out = runners[name]()
            times[name].append(time.perf_counter() - t0)
            del out
        print(f"round {r + 1}/{args.rounds}: " + "  ".join(
            f"{n} {fmt_s(times[n][-1])}" for n in order), flush=True)

    # the greedy plan: once, in a subprocess, under a timeout (after the rounds: no contention)
    print(f"greedy plan: one run in a subprocess (timeout {args.greedy_timeout:g} s) ...",
          flush=True)
    g = run_greedy(w, args.workload, args.seed, root, args.greedy_timeout, ref, w.rtol)
    g.update(kind="plan", predicted_s=predicted["greedy"])
    contenders["greedy"] = g

    xla_med = statistics.median(times["xla"]) if "xla" in times else None
    for name, ts in times.items():
        med = statistics.median(ts)
        contenders[name].update(median_s=med, min_s=min(ts), times_s=ts,
                                ratio_to_xla=med / xla_med if xla_med else None,
                                ratio_to_floor=med / floor)
    if g.get("status") == "ok":
        g.update(ratio_to_xla=g["time_s"] / xla_med if xla_med else None,
                 ratio_to_floor=g["time_s"] / floor)

    # ---- the table ----
    print()
    print(f"{'contender':<10} {'median':>11} {'min':>11} {'vs XLA':>8} {'vs floor':>9} "
          f"{'predicted':>11}  note")
    for name in ("best", "xla", "heuristic", "unfused", "greedy"):
        c = contenders.get(name)
        if c is None:
            continue
        pred = fmt_s(c.get("predicted_s")) if c.get("predicted_s") is not None else "-"
        if "median_s" in c:
            rx = f"{c['ratio_to_xla']:.2f}x" if c.get("ratio_to_xla") else "-"
            print(f"{name:<10} {fmt_s(c['median_s']):>11} {fmt_s(c['min_s']):>11} {rx:>8} "
                  f"{c['ratio_to_floor']:>8.2f}x {pred:>11}  rel err {c['rel_err']:.2g}")
        elif name == "greedy" and c.get("status") in ("ok", "wrong", "timed_out"):
            if c["status"] == "timed_out":
                note = (f"timed out after {c['timeout_s']:g} s (one run, compiled in "
                        f"{c['compile_s']:.1f} s)")
                print(f"{name:<10} {'> ' + fmt_s(c['timeout_s']):>11} {'-':>11} {'-':>8} "
                      f"{'-':>9} {pred:>11}  {note}")
            else:
                rx = f"{c['ratio_to_xla']:.2f}x" if c.get("ratio_to_xla") else "-"
                rf = f"{c['ratio_to_floor']:.2f}x" if c.get("ratio_to_floor") else "-"
                note = "one run" + (f"; WRONG: {c['error']}" if c["status"] == "wrong" else
                                    f", rel err {c['rel_err']:.2g}")
                print(f"{name:<10} {fmt_s(c['time_s']):>11} {'-':>11} {rx:>8} {rf:>9} "
                      f"{pred:>11}  {note}")
        else:
            print(f"{name:<10} {'-':>11} {'-':>11} {'-':>8} {'-':>9} {pred:>11}  "
                  f"{c.get('status', '?')}: {c.get('error', '')}")
    print(f"compute floor {fmt_s(floor)} = {flops:.4g} flops at {rate / 1e9:.1f} GFLOP/s")

    record = {
        "command": shlex.join(command),
        "argv": command,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "workload": w.name, "dims": dict(w.dims), "dtype": w.dtype, "workload_hash": w.hash,
        "rtol": w.rtol, "seed": args.seed, "rounds": args.rounds,
        "machine": {"cpu": env.name, "cores": env.cores, "platform": platform.platform(),
                    "python": platform.python_version()},
        "versions": {"numpy": np.__version__, "jax": version("jax"), "jaxlib": version("jaxlib"),
                     "autotune": __version__, "optuna": version("optuna")},
        "db": str(db_path),
        "best_plan": {"plan_key": row["plan_key"], "study": row.get("study"),
                      "trial_number": row.get("trial_number"),
                      "measured_s_in_search": row.get("measured_s"),
                      "candidate": json.loads(row["candidate_json"])},
        "search": searched,
        "reference_s": ref_s,
        "gemm_rate_flops": rate, "useful_flops": flops, "floor_s": floor,
        "xla_median_s": xla_med,
        "contenders": contenders,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    n = w.dim_dict.get("N")
    path = out_dir / f"cpu_trimul-{w.name}-N{n if n is not None else 'x'}.json"
    path.write_text(json.dumps(record, indent=2, default=float) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
