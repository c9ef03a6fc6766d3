#!/usr/bin/env python
"""The searched best CUDA plan against XLA:GPU, PyTorch and the named plans, in one process.

    python bench/gpu_trimul.py --db bench/results/plans-h200.sqlite --out bench/results
    python bench/gpu_trimul.py --emulate --dims N=24,C=8 --out /tmp/r   # the flow on a CPU

Every contender gets the same inputs (seed 0, the search's), placed on the device once, and is
checked against the float64 reference (the worker's cached one when present).  Timing: the
device-resident call plus a device synchronize, in interleaved rounds (each round runs every
contender once, shuffled); median and min are reported.  Contenders:

* ``best``: the plan the search cached, and the next fastest (up to ``--top``) of its measured
  trials, re-timed here (the search's own timings include host transfers);
* ``heuristic`` and ``unfused`` plans; ``greedy`` (the 2023 IREE rule) once, in a spawned
  subprocess under a timeout;
* JAX/XLA:GPU ``jax.jit`` at default precision (TF32 matmuls on Ampere and later) and at
  ``'highest'`` (full fp32), via ``autotune.bench.peers``; PyTorch eager and ``torch.compile``
  (fp32 matmuls, PyTorch's default).

The roofline floor comes from rates measured in the same run: the copy bandwidth (a 1 GiB
device-to-device copy) and the fp32 and tf32 GEMM rates (cuBLAS 8192^3 through the backend's
own GEMM path): ``floor = max(useful flops / GEMM rate, compulsory bytes / bandwidth)`` where
compulsory bytes are the inputs read once and the outputs written once.  A JSON record goes to
``<out>/gpu_trimul-<gpu>-<workload>-N<N>.json``.

``--emulate`` runs the same flow on the CPU (the backend's host emulator, JAX on CPU, NumPy
rates) at small dims: a dry run of everything but the GPU.
"""
from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # share the GPU with CuPy
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import datetime as _dt  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from autotune.report.units import fmt_s  # noqa: E402

SEED = 0           # the search's seed: its cached reference is reused
GEMM_N = 8192
COPY_BYTES = 1 << 30


def first_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]


def gpu_tag(name: str) -> str:
    low = name.lower()
    for key in ("h200", "h100", "a100", "l40s", "l4", "a10"):
        if key in low:
            return key
    return re.sub(r"[^a-z0-9]+", "-", low).strip("-") or "gpu"


# ---- the device: CuPy on a GPU, or the host emulator ---------------------------------------------
class Device:
    def __init__(self, emulate: bool):
        self.emulate = emulate
        if emulate:
            from autotune.backends.cuda.emulator import HostEmulator
            self.rt = HostEmulator(threads=2)
            self.xp = np
            self.name = f"host emulation on {platform.processor() or platform.machine()}"
            self.info = {"name": self.name}
        else:
            from autotune.backends.cuda.runtime import CupyRuntime
            from autotune.environment import detect
            env = detect("cuda")            # NoGPUError: one line, exit 1 (main)
            self.rt = CupyRuntime()
            self.xp = self.rt.cupy
            self.name = env.name
            self.info = env.to_dict()

    def sync(self) -> None:
        self.rt.synchronize()

    def put(self, inputs: dict) -> dict:
        return {k: self.rt.to_device(v) for k, v in inputs.items()}

    # -- rates for the roofline floor --
    def copy_bandwidth(self, repeats: int = 5) -> float:
        xp = self.xp
        n = (COPY_BYTES if not self.emulate else 1 << 26) // 4
        a = xp.ones(n, dtype=np.float32)
        b = xp.empty_like(a)
        b[...] = a
        self.sync()
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            b[...] = a
            self.sync()
            best = min(best, time.perf_counter() - t0)
        return 2 * n * 4 / best

    def gemm_rate(self, precision: str, repeats: int = 5) -> float:
        from autotune.backends.cuda.gemm import Mat, plan_gemm
        xp = self.xp
        n = GEMM_N if not self.emulate else 512
        a = xp.asarray(np.random.default_rng(0).standard_normal((n, n), dtype=np.float32))
        b = xp.asarray(np.random.default_rng(1).standard_normal((n, n), dtype=np.float32))
        c = xp.empty((n, n), dtype=np.float32)
        m = Mat(n, n, n, 1, 0)
        call = plan_gemm(m, m, m, 1)
        bufs = {"A": a, "B": b}
        run = lambda: self.rt.gemm(call, bufs[call.first], bufs[call.second], c, 1.0, precision)
        run()
        self.sync()
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            run()
            self.sync()
            best = min(best, time.perf_counter() - t0)
        return 2.0 * n ** 3 / best


# ---- greedy in a subprocess ----------------------------------------------------------------------
def _greedy_child(spec: str, dims: dict, cache_dir: str, emulate: bool, out_dir: str, conn):
    try:
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        from autotune.backends.cuda.executor import CudaPlan
        from search_spaces import load_workload
        from search_spaces.plans import named_plan
        from search_spaces.space import SearchSpace, TileBounds
        dev = Device(emulate)
        w = load_workload(spec, dims)
        inputs = dev.put(w.random_inputs(seed=SEED))
        t0 = time.perf_counter()
        plan = CudaPlan(w, named_plan(SearchSpace(w, TileBounds(1, 1024)), "greedy"),
                        Path(cache_dir), runtime=dev.rt)
        conn.send(("compiled", time.perf_counter() - t0))
        t0 = time.perf_counter()
        outs = plan.run_device(**inputs)
        dev.sync()
        elapsed = time.perf_counter() - t0
        np.savez(os.path.join(out_dir, "greedy.npz"),
                 **{k: dev.rt.to_host(v) for k, v in outs.items()})
        conn.send(("done", elapsed))
    except BaseException as e:
        conn.send(("error", first_line(e)))


def run_greedy(w, spec: str, cache_dir: Path, timeout_s: float, ref, emulate: bool,
               compile_timeout_s: float = 300.0) -> dict:
    from autotune.bench.runners import run_once_in_subprocess
    res = run_once_in_subprocess(_greedy_child, (spec, w.dim_dict, str(cache_dir), emulate),
                                 timeout_s, ref, w.rtol, compile_timeout_s)
    if "build_s" in res:
        res["compile_s"] = res.pop("build_s")
    return res


def breakdown(w, cand, plan, inputs, spec, repeats: int = 5) -> list[dict]:
    """Each group of ``plan``: its measured median seconds (CUDA events between groups, from
    :meth:`CudaPlan.timed_call`) beside the cost model's prediction and its kind."""
    from costmodel import estimate
    from search_spaces.precision import default_precision
    plan.timed_call(inputs, warmup=1, repeats=repeats)
    measured = plan.group_seconds()
    model = {g.anchor: g for g in estimate(w, cand, spec).groups}
    rows = []
    for anchor, secs in measured.items():
        s = cand.schedule(anchor)
        m = model.get(anchor)
        rows.append({"anchor": anchor, "impl": s.impl,
                     "precision": (s.precision or default_precision(w)) if s.impl == "library"
                     else "-", "measured_s": secs,
                     "predicted_s": m.predicted_s if m is not None else None})
    return rows


# ---- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", default="trimul_outgoing", help="built-in name or .toml path")
    ap.add_argument("--dims", default="N=702,C=128", help="dim overrides")
    ap.add_argument("--db", default=None, help="plan database the search wrote")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"), help="JSON output folder")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    ap.add_argument("--top", type=int, default=5, help="re-time this many best searched plans")
    ap.add_argument("--greedy-timeout", type=float, default=60.0,
                    help="seconds the greedy plan's one run may take")
    ap.add_argument("--no-torch-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--emulate", action="store_true",
                    help="dry run on the CPU (host emulator, JAX on CPU); small dims only")
    args = ap.parse_args(argv)
    command = [sys.executable, *sys.argv] if argv is None else [sys.executable, __file__, *argv]

    from autotune import __version__
    from autotune.api import cache_root
    from autotune.backends.factory import backend_kind
    from autotune.backends.cuda.executor import CudaPlan, precision_of
    from autotune.environment import NoGPUError, detect, dist_version
    from autotune.backends.base import verify
    from autotune.reference import load_or_compute_reference
    from costmodel import estimate, preset
    from db.keys import PlanKey
    from db.records import Status
    from db.store import PlanDB
    from autotune.cli.common import CliError, parse_dims
    from search_spaces import WorkloadError, load_workload
    from search_spaces.candidate import Candidate
    from search_spaces.plans import named_plan
    from search_spaces.space import SearchSpace, TileBounds

    try:
        dev = Device(args.emulate)
    except NoGPUError as e:
        print(f"gpu_trimul: {e}", file=sys.stderr)
        return 1
    try:
        w = load_workload(args.workload, parse_dims(args.dims))
    except (WorkloadError, CliError) as e:
        raise SystemExit(str(e))
    dims_txt = ",".join(f"{k}={v}" for k, v in w.dims)
    db_path = Path(args.db) if args.db else None
    print(f"{w.name}  dims {dims_txt}  dtype {w.dtype}  rtol {w.rtol:g}  on {dev.name}", flush=True)
    spec = preset("h200") if args.emulate else backend_kind("cuda").device_spec(detect("cuda"))

    # ---- candidates: the searched ones and the named plans ----
    space = SearchSpace(w, TileBounds(1, 1024))
    searched: list[tuple[Candidate, float]] = []
    search_info = None
    if db_path is not None and db_path.exists():
        env = detect("cpu" if args.emulate else "cuda")   # emulation reads a CPU search's plans
        key = PlanKey.for_env(w.hash, env).key
        store = PlanDB(db_path)
        try:
            rows = [r for r in store.trials(key) if r.status == Status.OK]
            best = store.best(key)
            counts = store.trial_counts(key)
        finally:
            store.close()
        seen = set()
        for r in sorted(rows, key=lambda r: r.measured_s):
            c = r.to_candidate()
            if c.key not in seen:
                seen.add(c.key)
                searched.append((c, r.measured_s))
            if len(searched) >= args.top:
                break
        search_info = {"db": str(db_path), "plan_key": key, "trials": counts,
                       "best_row": {"measured_s": best.measured_s,
                                    "predicted_s": best.predicted_s, "study": best.study,
                                    "trial_number": best.trial_number} if best else None,
                       "top": [{"candidate": json.loads(c.to_json()), "measured_s_in_search": s}
                               for c, s in searched]}
    if not searched:
        print("no searched plan in the database: 'best' is the heuristic plan", flush=True)
    plans = {f"best#{k}": c for k, (c, _) in enumerate(searched)}
    plans["heuristic"] = named_plan(space, "heuristic")
    plans["unfused"] = named_plan(space, "unfused")
    # the first searched plan (else the heuristic) once more, every run eager: what running
    # the whole plan as one CUDA graph saves
    plans["eager:" + next(iter(plans))] = next(iter(plans.values()))
    greedy = named_plan(space, "greedy")
    predicted = {n: estimate(w, c, spec).total_s for n, c in {**plans, "greedy": greedy}.items()}

    # ---- inputs and the reference ----
    host_inputs = w.random_inputs(seed=SEED)
    root = cache_root(db_path) if db_path else Path(tempfile.mkdtemp(prefix="gpu-trimul-"))
    t0 = time.perf_counter()
    ref = load_or_compute_reference(w, host_inputs, root, SEED)
    ref_s = time.perf_counter() - t0
    print(f"float64 reference: {ref_s:.1f} s (cached under {root / 'refs'})", flush=True)
    inputs = dev.put(host_inputs)
    dev.sync()

    contenders: dict[str, dict] = {}
    runners = {}

    def check(name: str, call, to_host) -> None:
        """Run once (compile, warm-up), verify, and register for timing (a contender beyond
        the workload's rtol is still timed, and marked: XLA's default precision is TF32)."""
        info = contenders[name]
        try:
            t0 = time.perf_counter()
            outs = call()
            info["first_call_s"] = time.perf_counter() - t0
            host = {k: to_host(v) for k, v in outs.items()}
            err, why = verify(host, ref, w.rtol)
        except Exception as e:
            info.update(status="failed", error=first_line(e))
            print(f"{name}: FAILED {info['error']}", flush=True)
            if os.environ.get("GPU_TRIMUL_TRACEBACK"):
                traceback.print_exc()
            return
        info.update(rel_err=err, within_rtol=not why, status="ok" if not why else "inexact")
        if why:
            info["error"] = why
        runners[name] = call
        print(f"{name}: rel err {err:.2g}{'' if not why else '  (beyond rtol: ' + why + ')'}",
              flush=True)

    # our plans
    kernels_dir = root / "kernels"
    built = {}
    for name, cand in plans.items():
        # the plan-wide default, and each library contraction's own where the search chose one
        info = contenders[name] = {"kind": "plan", "predicted_s": predicted[name],
                                   "precision": precision_of(w), "candidate": cand.to_dict(),
                                   "gemm_precisions": {s.anchor: s.precision or precision_of(w)
                                                       for s in cand.schedules
                                                       if s.impl == "library"}}
        if name.startswith("best#"):
            info["measured_s_in_search"] = searched[int(name[5:])][1]
        try:
            t0 = time.perf_counter()
            plan = CudaPlan(w, cand, kernels_dir, runtime=dev.rt,
                            graphs=not name.startswith("eager:"))
            info["build_s"] = time.perf_counter() - t0
            info["kernels"] = [k.to_dict() | {"attrs": plan.kernel_attrs.get(k.name, {})}
                               for k in plan.kernels.values()]
            plan.run_device(**inputs)      # eager: the checked call captures the graph that
            dev.sync()                     # the rounds replay, and verifies it
        except Exception as e:
            info.update(status="failed", error=first_line(e))
            print(f"{name}: FAILED to build: {info['error']}", flush=True)
            continue

        built[name] = plan

        def call(plan=plan):
            outs = plan.run_device(**inputs)
            dev.sync()
            return outs
        check(name, call, dev.rt.to_host)
        info.update(graph=plan.graphs.captures > 0, graph_error=plan.graphs.error)

    # JAX / XLA
    try:
        import jax
        from autotune.bench.peers import jax_function
        jdev = jax.devices("cpu" if args.emulate else "gpu")[0]
        jin = {k: jax.device_put(v, jdev) for k, v in host_inputs.items()}
        for prec in ("default", "highest"):
            name = f"xla-{prec}"
            contenders[name] = {"kind": "peer", "peer": "jax", "precision": prec,
                                "device": str(jdev)}
            fn = jax_function(w, prec)
            call = (lambda fn=fn: jax.block_until_ready(fn(**jin)))
            check(name, call, np.asarray)
    except Exception as e:
        contenders.setdefault("xla-default", {"kind": "peer", "peer": "jax"}).update(
            status="unavailable", error=first_line(e))
        print(f"JAX unavailable: {first_line(e)}", flush=True)

    # PyTorch eager and torch.compile
    try:
        import torch
        from autotune.bench.peers import torch_function
        tdev = "cpu" if args.emulate else "cuda"
        tin = {k: torch.as_tensor(v).to(tdev) for k, v in host_inputs.items()}
        tsync = (lambda: None) if args.emulate else torch.cuda.synchronize
        variants = [("torch-eager", False)] + ([] if args.no_torch_compile else
                                               [("torch-compile", True)])
        for name, comp in variants:
            contenders[name] = {"kind": "peer", "peer": "torch", "compile": comp,
                                "precision": "default (fp32 matmul)", "device": tdev}
            fn = torch_function(w, compile=comp)

            def call(fn=fn):
                outs = fn(**tin)
                tsync()
                return outs
            check(name, call, lambda t: t.detach().cpu().numpy())
    except Exception as e:
        contenders.setdefault("torch-eager", {"kind": "peer", "peer": "torch"}).update(
            status="unavailable", error=first_line(e))
        print(f"PyTorch unavailable: {first_line(e)}", flush=True)

    # ---- rates and the floor ----
    bw = dev.copy_bandwidth()
    rate32 = dev.gemm_rate("fp32")
    rate_tf32 = dev.gemm_rate("tf32") if not args.emulate else rate32
    flops = w.flops()
    item = 4 if w.dtype == "float32" else 8
    compulsory = item * (sum(math.prod(s) for _, s in w.inputs)
                         + sum(math.prod(w.shapes[o]) for o in w.outputs))
    floors = {"fp32": max(flops / rate32, compulsory / bw),
              "tf32": max(flops / rate_tf32, compulsory / bw)}
    print(f"copy bandwidth {bw / 1e9:.0f} GB/s;  GEMM fp32 {rate32 / 1e12:.1f} TFLOP/s, "
          f"tf32 {rate_tf32 / 1e12:.1f} TFLOP/s;  useful flops {flops:.4g}, compulsory bytes "
          f"{compulsory:.4g};  floor fp32 {fmt_s(floors['fp32'])}, tf32 "
          f"{fmt_s(floors['tf32'])}", flush=True)

    # ---- interleaved rounds ----
    times: dict[str, list[float]] = {n: [] for n in runners}
    rng = random.Random(SEED)
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
    for name, ts in times.items():
        contenders[name].update(median_s=statistics.median(ts), min_s=min(ts), times_s=ts)

    # the best searched plan, re-timed here (falls back to the heuristic plan)
    timed_best = [n for n in times if n.startswith("best#")]
    best_name = min(timed_best, key=lambda n: contenders[n]["median_s"]) if timed_best else \
        ("heuristic" if "heuristic" in times else None)

    # where the time goes: the best plan's and the heuristic's groups, each timed between CUDA
    # events, beside the cost model's figure for it
    for name in dict.fromkeys(n for n in (best_name, "heuristic") if n in runners):
        contenders[name]["groups"] = breakdown(w, plans[name], built[name], inputs, spec)
        print(f"\n{name}: group times (median of 5 runs, CUDA events) against the model")
        print(f"  {'group':<8} {'impl':<8} {'precision':<9} {'measured':>10} {'predicted':>10}"
              f" {'ratio':>6}")
        for g in contenders[name]["groups"]:
            r = g["measured_s"] / g["predicted_s"] if g["predicted_s"] else float("nan")
            print(f"  {g['anchor']:<8} {g['impl']:<8} {g['precision']:<9} "
                  f"{fmt_s(g['measured_s']):>10} {fmt_s(g['predicted_s']):>10} {r:>5.2f}x")
        tot = sum(g["measured_s"] for g in contenders[name]["groups"])
        print(f"  {'total':<27} {fmt_s(tot):>10} {fmt_s(predicted[name]):>10}", flush=True)

    print(f"greedy plan: one run in a subprocess (timeout {args.greedy_timeout:g} s) ...",
          flush=True)
    g = run_greedy(w, args.workload, kernels_dir, args.greedy_timeout, ref, args.emulate)
    g.update(kind="plan", predicted_s=predicted["greedy"], precision=precision_of(w))
    contenders["greedy"] = g

    # ---- ratios and the table ----
    def med(n):
        return contenders.get(n, {}).get("median_s")
    xla_same_class = "xla-highest" if precision_of(w) != "tf32" else "xla-default"
    ref_xla = med(xla_same_class)
    for name, c in contenders.items():
        t = c.get("median_s", c.get("time_s") if c.get("status") == "ok" else None)
        if t:
            c["ratio_to_xla_same_precision"] = t / ref_xla if ref_xla else None
            c["ratio_to_xla_default"] = t / med("xla-default") if med("xla-default") else None
            cls = "tf32" if c.get("precision") in ("default", "tf32") and \
                c.get("peer") == "jax" else "fp32"
            c["ratio_to_floor"] = t / floors[cls]
    best_t = med(best_name) if best_name else None
    verdict = None
    if best_t and ref_xla:
        verdict = {"best": best_name, "best_s": best_t, "xla": xla_same_class, "xla_s": ref_xla,
                   "ratio": best_t / ref_xla, "target_ratio": 0.5,
                   "met": best_t <= 0.5 * ref_xla}

    print()
    print(f"{'contender':<16} {'median':>12} {'min':>12} {'vs XLA*':>8} {'vs floor':>9} "
          f"{'predicted':>11}  note")
    for name, c in contenders.items():
        pred = fmt_s(c.get("predicted_s")) if c.get("predicted_s") is not None else "-"
        if "median_s" in c:
            rx = c.get("ratio_to_xla_same_precision")
            note = f"rel err {c['rel_err']:.2g}" + ("" if c.get("within_rtol") else " (> rtol)")
            print(f"{name:<16} {fmt_s(c['median_s']):>12} {fmt_s(c['min_s']):>12} "
                  f"{(f'{rx:.2f}x' if rx else '-'):>8} {c['ratio_to_floor']:>8.2f}x {pred:>11}  "
                  f"{note}")
        elif name == "greedy" and c.get("status") in ("ok", "wrong"):
            rx = c.get("ratio_to_xla_same_precision")
            print(f"{name:<16} {fmt_s(c['time_s']):>12} {'-':>12} "
                  f"{(f'{rx:.2f}x' if rx else '-'):>8} {'-':>9} {pred:>11}  one run"
                  + (f"; WRONG: {c.get('error')}" if c["status"] == "wrong" else ""))
        elif name == "greedy" and c.get("status") == "timed_out":
            print(f"{name:<16} {'> ' + fmt_s(c['timeout_s']):>12} {'-':>12} {'-':>8} {'-':>9} "
                  f"{pred:>11}  timed out (one run)")
        else:
            print(f"{name:<16} {'-':>12} {'-':>12} {'-':>8} {'-':>9} {pred:>11}  "
                  f"{c.get('status', '?')}: {c.get('error', '')}")
    print(f"* XLA at the plans' precision class: {xla_same_class}")
    if verdict:
        print(f"best ({best_name}) / {xla_same_class} = {verdict['ratio']:.2f}  (target <= 0.5: "
              f"{'met' if verdict['met'] else 'NOT met'})")

    tag = "emulated" if args.emulate else gpu_tag(dev.name)
    record = {
        "command": shlex.join(command), "argv": command,
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "workload": w.name, "dims": dict(w.dims), "dtype": w.dtype, "rtol": w.rtol,
        "workload_hash": w.hash, "seed": SEED, "rounds": args.rounds,
        "device": dev.info, "emulated": args.emulate,
        "versions": {d: dist_version(d) for d in ("numpy", "cupy-cuda12x", "cupy-cuda13x",
                                                  "jax", "jaxlib", "torch", "triton", "optuna")}
        | {"autotune": __version__, "python": platform.python_version()},
        "search": search_info, "reference_s": ref_s,
        "rates": {"copy_bandwidth": bw, "gemm_fp32": rate32, "gemm_tf32": rate_tf32,
                  "gemm_n": GEMM_N, "copy_bytes": COPY_BYTES},
        "useful_flops": flops, "compulsory_bytes": compulsory, "floor_s": floors,
        "best": best_name, "verdict": verdict, "contenders": contenders,
    }
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    n = w.dim_dict.get("N")
    path = out_dir / f"gpu_trimul-{tag}-{w.name}-N{n if n is not None else 'x'}.json"
    path.write_text(json.dumps(record, indent=2, default=float) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
