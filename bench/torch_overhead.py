#!/usr/bin/env python
"""What a call through autotune.torch costs over the bare plan (issue 17: < 50 us on the CPU).

    python bench/torch_overhead.py                            # trimul_outgoing, N=64, C=128
    python bench/torch_overhead.py --n 64 --rounds 7 --db /tmp/plans.sqlite

Two measurements in one process, each in ``--rounds`` interleaved rounds (the order shuffled
every round), medians compared:

1. the overhead alone: the plan replaced by a stub that hands back preallocated outputs, called
   bare with NumPy arrays, through ``autotune.torch.function`` with every input, and through its
   bound form with the activations only.  The differences are what the torch path adds per call
   (the custom op's dispatch, the checks, the tensor <-> array views).
2. end to end with the real plan (the one the database gives for these dims, else the heuristic
   one): bare plan, the bare plan bound (what binding prepares: autotune.backends.bound), torch
   function, bound torch function.  On a shared machine the plan's own
   run-to-run noise is larger than the overhead; part 1 is the measurement, part 2 the context.

Every torch result is checked against the bare plan's before timing.  The JSON record (command,
load average before and after, torch version) goes to
``<out>/torch-overhead-<workload>-N<n>-C<c>-cpu.json``.
"""
from __future__ import annotations

import os

# first, before torch loads its OpenMP runtime and NumPy its OpenBLAS: idle threads of either
# sleep rather than spin against the other's (autotune.threads explains; a user's setting wins)
import autotune  # noqa: F401, E402

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def per_call_us(fn, kwargs: dict, calls: int) -> float:
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(**kwargs)
    return (time.perf_counter() - t0) / calls * 1e6


def interleaved(contenders: dict, rounds: int, calls: int, seed: int = 0) -> dict:
    """name -> median microseconds per call over ``rounds`` shuffled rounds."""
    rng = random.Random(seed)
    times: dict[str, list[float]] = {k: [] for k in contenders}
    for fn, kw in contenders.values():        # warm-up: the first calls resolve and bind
        for _ in range(3):
            fn(**kw)
    for _ in range(rounds):
        order = list(contenders)
        rng.shuffle(order)
        for k in order:
            fn, kw = contenders[k]
            times[k].append(per_call_us(fn, kw, calls))
    return {k: {"median_us": statistics.median(v), "min_us": min(v), "rounds_us": v}
            for k, v in times.items()}


class Stub:
    """A plan that does nothing: the outputs it hands back were allocated once."""

    def __init__(self, outs):
        self.outs = outs

    def __call__(self, **inputs):
        return dict(self.outs)

    def bind(self, params):
        return self              # nothing to prepare

    def run(self, inputs):
        return dict(self.outs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workload", default="trimul_outgoing")
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--c", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--db", default=None, help="plan database (default: a fresh one, so the "
                    "heuristic plan runs)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()

    import numpy as np
    import torch

    import autotune.interop.function as function_mod
    import autotune.torch as at
    from autotune.interop.resolve import plan_for
    from search_spaces import load_workload

    warnings.simplefilter("ignore")
    load_before = os.getloadavg()
    db = args.db or str(Path(tempfile.mkdtemp(prefix="torch-overhead-")) / "plans.sqlite")
    w = load_workload(args.workload, {"N": args.n, "C": args.c})
    x = w.random_inputs(0)
    tx = {n: torch.from_numpy(a) for n, a in x.items()}
    acts = {n: tx[n] for n in w.activations}
    plan, res = plan_for(w, "cpu", db)
    want = plan(**x)

    # 1. the overhead alone: every function made while plan_for answers with the stub
    stub = Stub({k: np.empty_like(v) for k, v in want.items()})
    real = function_mod.plan_for
    function_mod.plan_for = lambda w, device, db: (stub, res)
    try:
        fn = at.function(w, "cpu", db + ".stub")     # its own op: another database key
        layer = fn.bind(**{n: tx[n] for n in w.params})
        alone = interleaved({"bare": (stub, x), "torch": (fn, tx), "torch_bound": (layer, acts)},
                            args.rounds, calls=2000)
    finally:
        function_mod.plan_for = real

    # 2. end to end, the real plan
    fn = at.function(w, "cpu", db)
    layer = fn.bind(**{n: tx[n] for n in w.params})
    for got in (fn(**tx), layer(**acts)):
        np.testing.assert_allclose(got["out"].numpy(), want["out"], rtol=1e-5, atol=1e-6)
    calls = max(3, int(0.05 / max(1e-6, per_call_us(plan, x, 3) / 1e6)))
    bare_bound = plan.bind({n: x[n] for n in w.params})
    np.testing.assert_allclose(bare_bound(**{n: x[n] for n in w.activations})["out"],
                               want["out"], rtol=1e-5, atol=1e-6)
    full = interleaved({"bare": (plan, x), "torch": (fn, tx), "torch_bound": (layer, acts),
                        "bare_bound": (bare_bound, {n: x[n] for n in w.activations})},
                       args.rounds, calls)

    base = alone["bare"]["median_us"]
    record = {
        "command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
        "workload": w.name, "dims": w.dim_dict, "device": "cpu", "plan": res.source.value,
        "torch": torch.__version__, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "load_before": load_before, "load_after": os.getloadavg(),
        # medians of the rounds; the fastest rounds too: on a shared machine other processes
        # only ever add time, so the minimum is the closest to the path's own cost
        "overhead_us": {k: alone[k]["median_us"] - base for k in ("torch", "torch_bound")},
        "overhead_min_us": {k: alone[k]["min_us"] - alone["bare"]["min_us"]
                            for k in ("torch", "torch_bound")},
        "target_us": 50.0,
        "stub": alone, "real_plan": full,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"torch-overhead-{w.name}-N{args.n}-C{args.c}-cpu.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"{w.name} N={args.n} C={args.c}, {res.source.value} plan; per call, medians of "
          f"{args.rounds} rounds (load {load_before[0]:.1f} -> {record['load_after'][0]:.1f})")
    for k in ("torch", "torch_bound"):
        print(f"  overhead {k:<12} {record['overhead_us'][k]:7.1f} us median, "
              f"{record['overhead_min_us'][k]:.1f} us fastest round  (stub plan: bare "
              f"{base:.1f} us, {k} {alone[k]['median_us']:.1f} us)")
    print(f"  real plan: bare {full['bare']['median_us']:.0f} us, bare bound "
          f"{full['bare_bound']['median_us']:.0f} us, torch {full['torch']['median_us']:.0f} us, "
          f"torch bound {full['torch_bound']['median_us']:.0f} us")
    print(f"  -> {path}")


if __name__ == "__main__":
    main()
