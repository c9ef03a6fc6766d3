#!/usr/bin/env python
"""What binding a plan's parameters saves per call (autotune.backends.bound): the plan a
library caller gets (the database's for these dims, else the nearest tuned or the heuristic
one), called with every input, against the same plan bound to the workload's declared
parameters and called with the activations only.

    python bench/binding.py                                      # trimul_outgoing, N=64
    python bench/binding.py gated_mlp --rounds 21 --db plans.sqlite
    python bench/binding.py trimul_outgoing --dims N=256 --out /tmp/b

Both are checked against the float64 reference first, then timed in interleaved rounds (the
order shuffled each round, each contender making back-to-back calls for ``--round-s`` seconds
in its turn; the round records their mean).  Reported: each contender's median per call, the
rounds the bound plan was faster in, what the binding prepared (the groups it ran once, the
operands it keeps, with their bytes) and, from the executor's own group clock, each group's
median seconds both ways.  JSON to ``<out>/binding-<workload>-<dims>-cpu.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import autotune  # noqa: E402,F401  (before NumPy: the thread settings)


def prepared_of(bound) -> dict:
    """What ``bound`` prepared: groups run once, operands built once (name -> bytes it holds;
    0 for a view of a bound array, kept only so that it is not looked up again)."""
    import numpy as np
    made = {}
    for tag, v in bound.prep.made.items():
        arrays = [a for a in (v if isinstance(v, tuple) else (v,)) if hasattr(a, "nbytes")]
        made[tag] = int(sum(a.nbytes for a in arrays
                            if not any(np.shares_memory(a, p) for p in bound.params.values())))
    return {"constant_groups": sorted(bound.prep.skip), "operands_bytes": made}


def rounds(contenders: dict, n: int, round_s: float, seed: int = 0) -> dict:
    """name -> (per-call seconds of each round, each group's seconds per round)."""
    rng = random.Random(seed)
    out = {k: ([], []) for k in contenders}
    for _ in range(n):
        order = list(contenders)
        rng.shuffle(order)
        for k in order:
            call, plan = contenders[k]
            calls, groups, t0 = 0, [], time.perf_counter()
            while True:
                call()
                calls += 1
                groups.append(plan._last_groups)
                if time.perf_counter() - t0 >= round_s:
                    break
            out[k][0].append((time.perf_counter() - t0) / calls)
            out[k][1].append([statistics.median(g) for g in zip(*groups)])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", nargs="?", default="trimul_outgoing")
    ap.add_argument("--dims", default=None, help="e.g. N=64 (default: N=64 for trimul)")
    ap.add_argument("--db", default=None, help="plan database (default: $AUTOTUNE_DB or the "
                    "user's)")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--round-s", type=float, default=0.2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    if a.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    from autotune.backends.base import verify
    from autotune.cli.common import parse_dims
    from autotune.interop.resolve import plan_for
    from autotune.reference import reference
    from search_spaces.loader import load_workload
    dims = a.dims or ("N=64" if a.workload.startswith("trimul") else "")
    w = load_workload(a.workload, parse_dims(dims))
    if not w.params:
        raise SystemExit(f"{w.name} declares no parameters: nothing to bind")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan, res = plan_for(w, "cpu", a.db)
    x = w.random_inputs(0)
    params = {n: x[n] for n in w.params}
    acts = {n: x[n] for n in w.activations}
    bound = plan.bind(params)
    want = reference(w, x)
    for name, outs in (("plan", plan(**x)), ("bound", bound(**acts))):
        err, why = verify(outs, want, w.rtol)
        if why:
            raise SystemExit(f"{name}: wrong result ({why})")
    load_before = os.getloadavg()
    got = rounds({"plan": (lambda: plan(**x), plan), "bound": (lambda: bound(**acts), plan)},
                 a.rounds, a.round_s)
    anchors = [g.anchor for g in plan.groups]
    med = {k: statistics.median(v[0]) for k, v in got.items()}
    record = {
        "command": "python " + " ".join(shlex.quote(s) for s in sys.argv),
        "workload": w.name, "dims": w.dim_dict, "plan": res.source.value,
        "plan_key": plan.cand.key, "host": platform.processor() or platform.machine(),
        "load_before": load_before, "load_after": os.getloadavg(),
        "rounds": a.rounds, "round_s": a.round_s,
        "median_s": med, "bound_over_plan": med["bound"] / med["plan"],
        "bound_faster_rounds": sum(b < p for p, b in zip(got["plan"][0], got["bound"][0])),
        "per_round_s": {k: v[0] for k, v in got.items()},
        "group_median_s": {k: dict(zip(anchors, (statistics.median(c) for c in zip(*v[1]))))
                           for k, v in got.items()},
        "prepared": prepared_of(bound),
    }
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tag = "-".join(f"{k}{v}" for k, v in sorted(w.dim_dict.items()))
    path = out / f"binding-{w.name}-{tag}-cpu.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"{w.name} {tag}, {res.source.value} plan {plan.cand.key[:12]}: medians of {a.rounds} "
          f"interleaved rounds (load {load_before[0]:.1f} -> {record['load_after'][0]:.1f})")
    print(f"  every input  {med['plan'] * 1e3:9.3f} ms a call")
    print(f"  bound        {med['bound'] * 1e3:9.3f} ms a call  ({record['bound_over_plan']:.3f}x;"
          f" faster in {record['bound_faster_rounds']} of {a.rounds} rounds)")
    prep = record["prepared"]
    print(f"  prepared: constant groups {prep['constant_groups'] or 'none'}; operands built "
          + (", ".join(f"{t} ({b / 1024:.0f} KiB)" for t, b in prep["operands_bytes"].items()
                       if b) or "none"))
    gp, gb = record["group_median_s"]["plan"], record["group_median_s"]["bound"]
    for anchor in anchors:
        if abs(gp[anchor] - gb[anchor]) > 0.02 * max(gp[anchor], 1e-9):
            print(f"  group {anchor:<8} {gp[anchor] * 1e6:9.1f} us -> {gb[anchor] * 1e6:9.1f} us")
    print(f"  -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
