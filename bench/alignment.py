#!/usr/bin/env python
"""What aligning a CPU plan's buffers on cache lines buys: each named plan built twice in one
process, once with its buffers on cache lines (what the executor does) and once with every
buffer 16 bytes past a line (where NumPy's large arrays start: 16 bytes past a page), timed in
interleaved rounds (a short plan's round a batch of calls) on the same inputs, both checked against the float64 reference.

    python bench/alignment.py                                    # every built-in, default dims
    python bench/alignment.py --workloads trimul_outgoing --dims N=702 --plans heuristic
    python bench/alignment.py --workloads pair_transition --plans "" --random 8

Only the plan's own buffers move (intermediates, outputs, staging matrices); the generated
loops' tile buffers are aligned in both builds (the C allocates them).  The JSON record goes to
``<out>/alignment-<commit>.json``.
"""
from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import autotune  # noqa: E402  (before NumPy: the thread settings)
import numpy as np  # noqa: E402

from autotune.backends import buffers  # noqa: E402

MISALIGN = 16     # bytes past a line
BATCH_S = 0.2     # a round times this long a batch of calls of a short plan


def _offset_bytes(n: int, align: int = buffers.ALIGN) -> np.ndarray:
    raw = np.empty(n + align + MISALIGN, dtype=np.uint8)
    start = -raw.ctypes.data % align + MISALIGN
    return raw[start:start + n]


@contextmanager
def misaligned():
    """Every buffer the executor allocates meanwhile starts MISALIGN bytes past a line."""
    saved = buffers.aligned_bytes
    buffers.aligned_bytes = _offset_bytes
    try:
        yield
    finally:
        buffers.aligned_bytes = saved


def _build(w, cand, cache: Path, inputs, ref, off: bool):
    from autotune.backends.base import relative_error
    from autotune.backends.cpu.executor import CompiledPlan
    ctx = misaligned() if off else _nothing()
    with ctx:
        plan = CompiledPlan(w, cand, cache)
        outs = plan(**inputs)        # allocates the outputs and staging matrices
    starts = {t: a.ctypes.data % buffers.ALIGN for t, a in {**plan.storage, **outs}.items()}
    if off and not any(starts.values()):
        raise SystemExit(f"{w.name}: no buffer moved off its line; nothing to compare")
    err = max(relative_error(outs[o], ref[o]) for o in w.outputs)
    if not err <= w.rtol:
        raise SystemExit(f"{w.name}: a {'misaligned' if off else 'aligned'} plan is wrong "
                         f"(relative error {err:.2e})")
    del outs
    return plan, err


@contextmanager
def _nothing():
    yield


def main(argv: list[str] | None = None) -> int:
    from autotune.api import cache_root, space_for
    from autotune.cli.common import parse_dims
    from search_spaces import builtin_names, load_workload
    from autotune.backends.factory import backend_kind, resolve
    from autotune.report.model_check import FIRST, choose
    from costmodel import estimate
    from search_spaces.plans import named_plan

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", default=",".join(builtin_names()))
    ap.add_argument("--dims", default="", help="dim overrides for every workload, e.g. N=702")
    ap.add_argument("--plans", default="heuristic,unfused")
    ap.add_argument("--random", type=int, default=0,
                    help="also this many random legal candidates a workload, predicted within "
                         "10x of the best named plan (as `autotune model-check --within 10`)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random candidates")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "alignment"))
    args = ap.parse_args(argv)
    cache = cache_root() / "kernels"
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    record = {"command": shlex.join([sys.executable, *sys.argv]), "commit": commit,
              "host": platform.processor() or platform.machine(), "rounds": args.rounds,
              "misalign_bytes": MISALIGN, "results": []}
    for name in args.workloads.split(","):
        w = load_workload(name, parse_dims(args.dims) if args.dims else {})
        inputs = w.random_inputs(7)
        ref = autotune.reference(w, inputs)
        space = space_for(w, "cpu")
        cands = [(p, named_plan(space, p)) for p in args.plans.split(",") if p]
        if args.random:
            dev = backend_kind("cpu").device_spec(resolve("cpu"))
            drawn = choose(w, space, lambda c: estimate(w, c, dev).total_s, args.random,
                           args.seed, within=10.0)[len(FIRST):]
            cands += [(f"random:{c.key[:12]}", c) for c in drawn]
        for pname, cand in cands:
            plans = {}
            for off in (False, True):
                plans[off] = _build(w, cand, cache, inputs, ref, off)[0]
            t0 = time.perf_counter()
            plans[False](**inputs)
            calls = max(1, int(BATCH_S / max(time.perf_counter() - t0, 1e-6)))
            times = {False: [], True: []}
            for r in range(args.rounds):
                for off in ((False, True) if r % 2 == 0 else (True, False)):
                    t0 = time.perf_counter()
                    for _ in range(calls):
                        plans[off](**inputs)
                    times[off].append((time.perf_counter() - t0) / calls)
            for p in plans.values():
                p.release()
            med = {off: float(np.median(ts)) for off, ts in times.items()}
            row = {"workload": name, "dims": dict(w.dims), "plan": pname,
                   "candidate": cand.to_json() if pname.startswith("random:") else None,
                   "aligned_s": med[False], "misaligned_s": med[True],
                   "speedup": med[True] / med[False], "calls_per_round": calls,
                   "aligned_runs": times[False], "misaligned_runs": times[True]}
            record["results"].append(row)
            print(f"{name:28s} {pname:20s} aligned {med[False] * 1e3:9.2f} ms  misaligned "
                  f"{med[True] * 1e3:9.2f} ms  x{row['speedup']:.2f}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"alignment-{commit}.json"
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
