#!/usr/bin/env python
"""The drop-in triangle updates inside a model, against the same model written from the equations
(issue 17): eager and torch.compile, in one process.

    python bench/torch_module.py --n 384 702 --rounds 5 --db PLANS.sqlite

The model is an AlphaFold pair-stack step, ``z + outgoing(z, mask)`` then ``+ incoming(z,
mask)`` (bench/alphafold_modules.py: PairBlock).  Four contenders per N, all float32 with the
same OpenFold-named weights: the reference modules eager and under torch.compile (inductor),
autotune.torch's TriangleMultiplicationOutgoing/Incoming eager and under torch.compile (the
plan is one custom-op node of the graph).  Every contender's output is first checked against
the reference model in float64 (relative Frobenius error under ``--tol``); one that fails is
reported and not timed.  Then ``--rounds`` rounds, the contenders in a shuffled order each
round, one call each; medians compared.  Which plan each drop-in module ran (tuned at exactly
this N, adapted from the nearest tuned N, or the heuristic plan) is recorded: tune the two
workloads at these N first (``autotune search trimul_outgoing --dims N=384,702`` and the same
for trimul_incoming) for the tuned figures.  JSON: ``<out>/torch-module-pairblock-C<c>-cpu.json``.
"""
from __future__ import annotations

import os

import autotune  # noqa: F401  (first: thread settings before torch's OpenMP and NumPy's BLAS)

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT, ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import torch  # noqa: E402

from alphafold_modules import AlphaFoldUpdate, PairBlock, random_state  # noqa: E402
from autotune.interop.resolve import plan_for  # noqa: E402
from autotune.torch import (TriangleMultiplicationIncoming,  # noqa: E402
                            TriangleMultiplicationOutgoing)
from search_spaces import load_workload  # noqa: E402


def models(c: int, db: str | None, backend: str) -> dict[str, torch.nn.Module]:
    """The four contenders with the same weights (float32); the compiled two compile at their
    first call (``backend``: torch.compile's)."""
    out_state, in_state = random_state(c, 1, torch.float32), random_state(c, 2, torch.float32)
    ref = PairBlock(AlphaFoldUpdate(c, c, True), AlphaFoldUpdate(c, c, False))
    ours = PairBlock(TriangleMultiplicationOutgoing(c, c, db=db),
                     TriangleMultiplicationIncoming(c, c, db=db))
    for m in (ref, ours):
        m.outgoing.load_state_dict(out_state)
        m.incoming.load_state_dict(in_state)
        m.eval()
    return {"reference eager": ref, "reference torch.compile": torch.compile(ref, backend=backend),
            "autotune eager": ours, "autotune torch.compile": torch.compile(ours, backend=backend)}


def float64_reference(c: int, z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    ref = PairBlock(AlphaFoldUpdate(c, c, True), AlphaFoldUpdate(c, c, False)).double()
    ref.outgoing.load_state_dict(random_state(c, 1))
    ref.incoming.load_state_dict(random_state(c, 2))
    with torch.no_grad():
        return ref(z.double(), mask.double())


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    return float(torch.linalg.norm(got.double() - want) / torch.linalg.norm(want))


def plans_used(n: int, c: int, db: str | None) -> dict:
    """Which plan each drop-in module resolves to at this N (the resolution is cached per
    process, so asking costs nothing the modules do not do anyway)."""
    out = {}
    for name in ("trimul_outgoing", "trimul_incoming"):
        w = load_workload(name, {"N": n, "C": c})
        res = plan_for(w, "cpu", db)[1]
        out[name] = {"source": res.source.value,
                     "tuned_dims": dict(res.tuned_dims) if res.tuned_dims else None}
    return out


def bench_n(n: int, c: int, rounds: int, tol: float, db: str | None, seed: int,
            backend: str = "inductor") -> dict:
    gen = torch.Generator().manual_seed(seed + n)
    z = torch.randn(n, n, c, generator=gen)
    mask = (torch.rand(n, n, generator=gen) < 0.9).float()
    want = float64_reference(c, z, mask)
    contenders = models(c, db, backend)
    rows: dict[str, dict] = {}
    with torch.no_grad():
        for name, m in contenders.items():
            t0 = time.perf_counter()
            got = m(z, mask)             # the first call compiles, binds and verifies
            first = time.perf_counter() - t0
            err = rel_err(got, want)
            rows[name] = {"rel_err": err, "first_call_s": first,
                          "status": "ok" if err < tol else "wrong", "times_s": []}
            print(f"  N={n} {name:<26} first call {first:7.2f} s  rel err {err:.1e}"
                  + ("" if err < tol else f"  WRONG (tol {tol:g}): not timed"), flush=True)
        live = [k for k, r in rows.items() if r["status"] == "ok"]
        rng = random.Random(seed)
        for _ in range(rounds):
            rng.shuffle(live)
            for name in live:
                t0 = time.perf_counter()
                contenders[name](z, mask)
                rows[name]["times_s"].append(time.perf_counter() - t0)
    for r in rows.values():
        r["median_s"] = statistics.median(r["times_s"]) if r["times_s"] else None
    best_ref = min((rows[k]["median_s"] for k in ("reference eager", "reference torch.compile")
                    if rows[k]["median_s"] is not None), default=None)
    for r in rows.values():
        r["ratio_to_fastest_reference"] = (r["median_s"] / best_ref
                                           if r["median_s"] and best_ref else None)
    return {"n": n, "c": c, "plans": plans_used(n, c, db), "contenders": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[384, 702])
    ap.add_argument("--c", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-3,
                    help="largest relative error against the float64 model")
    ap.add_argument("--db", default=None, help="plan database (default: $AUTOTUNE_DB or the "
                    "user cache)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile-backend", default="inductor",
                    help="torch.compile's backend (the tests use aot_eager: no C++ compiles)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    args = ap.parse_args()
    warnings.simplefilter("ignore")      # the plans' fallback warnings are recorded instead
    load_before = os.getloadavg()
    results = []
    for n in args.n:
        res = bench_n(n, args.c, args.rounds, args.tol, args.db, args.seed, args.compile_backend)
        results.append(res)
        plans = ", ".join(f"{k} {v['source']}" for k, v in res["plans"].items())
        print(f"N={n} C={args.c}: medians of {args.rounds} interleaved rounds (plans: {plans})")
        for name, r in res["contenders"].items():
            t = "-" if r["median_s"] is None else f"{r['median_s']:.3f} s"
            ratio = r["ratio_to_fastest_reference"]
            print(f"  {name:<26} {t:>10}" + (f"  {ratio:.2f}x the faster reference"
                                               if ratio else ""))
    record = {"command": "python " + " ".join(shlex.quote(a) for a in sys.argv),
              "torch": torch.__version__, "threads": torch.get_num_threads(),
              "load_before": load_before, "load_after": os.getloadavg(),
              "compile_backend": args.compile_backend,
              "rounds": args.rounds, "statistic": "median of shuffled interleaved rounds",
              "results": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"torch-module-pairblock-C{args.c}-cpu.json"
    path.write_text(json.dumps(record, indent=2) + "\n")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
