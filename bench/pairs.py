#!/usr/bin/env python
"""What a kernel pair buys (two contractions over a shared operand under one epilogue, run as
one generated kernel: search_spaces.kernel_fusion.pair_of), against the same plan without it.

    python bench/pairs.py                                        # trimul_outgoing, N=702
    python bench/pairs.py gated_mlp --rounds 9
    python bench/pairs.py trimul_outgoing --dims N=256 --rounds 5 --out /tmp/p

The plan measured is the cost model's favourite that holds a pair (the search's own climb,
autotune.search.proposals.model_favourites, on this machine's calibration).  Its variants, each
built and checked against the float64 reference in one process and timed in interleaved rounds
on the same inputs: ``pair`` (as the model chose it), ``split`` (every pair question answered
no: the first contraction keeps the epilogue, the second runs as its own kernel group) and
``heuristic`` (the named plan: library GEMMs and loop groups).  Reported per variant: the whole
plan's median seconds and, from the executor's own group clock, the seconds of the groups that
hold the pairs' ops.  The JSON record goes to ``<out>/pairs-<workload>-<dims>-cpu.json``.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import autotune  # noqa: E402,F401  (before NumPy: the thread settings)


def _pair_groups(w, cand) -> dict[str, tuple[str, ...]]:
    """consumer -> the ops of each pair group of ``cand``."""
    from search_spaces.kernel_fusion import kernel_parts
    out = {}
    for s in cand.schedules:
        if s.impl == "kernel":
            parts = kernel_parts(w, cand.fused_pairs, s.anchor)
            if parts.pair:
                out[s.anchor] = parts.members
    return out


def variants(w, space, dev) -> dict:
    """The three candidates (None where the model's favourites hold no pair)."""
    from search_spaces.answers import params_of
    from search_spaces.plans import named_plan
    from autotune.search.config import SearchConfig
    from autotune.search.proposals import model_favourites
    favs = model_favourites(w, space, dev, SearchConfig(), set())
    paired = next((c for c in favs if _pair_groups(w, c)), None)
    if paired is None:
        return {}
    params = params_of(space, paired)
    split = space.build(lambda n, o: 0 if n.split("@")[0].startswith("pair:")
                        else params.get(n, o[0]))
    return {"pair": paired, "split": split, "heuristic": named_plan(space, "heuristic")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", nargs="?", default="trimul_outgoing")
    ap.add_argument("--dims", default=None, help="e.g. N=702 (default: N=702 for trimul)")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"))
    a = ap.parse_args(argv)
    if a.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    from search_spaces.loader import load_workload
    from search_spaces.space import SearchSpace
    from autotune.backends.base import BufferPool, verify
    from autotune.backends.factory import backend_kind, resolve
    from autotune.cli.common import parse_dims
    from autotune.reference import reference
    from costmodel import estimate
    dims = a.dims or ("N=702" if a.workload.startswith("trimul") else "")
    w = load_workload(a.workload, parse_dims(dims) or None)
    env = resolve("cpu")
    kind = backend_kind(env.kind)
    dev = kind.device_spec(env)
    space = SearchSpace(w, kind.tile_bounds)
    cands = variants(w, space, dev)
    if not cands:
        raise SystemExit(f"{w.name}: none of the cost model's favourites holds a pair")
    groups = _pair_groups(w, cands["pair"])
    ops = {o for members in groups.values() for o in members}
    inputs = w.random_inputs(0)
    ref = reference(w, inputs)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "autotune" / "kernels"
    plans = {}
    for name, cand in cands.items():
        plan = kind.make_plan(w, cand, cache, pool=BufferPool())
        err, why = verify(plan(**inputs), ref, w.rtol)
        if why:
            raise SystemExit(f"{w.name}: the {name} plan is wrong ({why}); nothing timed")
        plans[name] = plan
        print(f"{name}: {cand.key[:12]} predicted {estimate(w, cand, dev).total_s:.4g} s, "
              f"verified (rel err {err:.1e})", flush=True)
    runs = {n: [] for n in plans}
    load_before = os.getloadavg()
    for r in range(a.rounds):
        for name, plan in plans.items():
            t0 = time.perf_counter()
            plan(**inputs)
            total = time.perf_counter() - t0
            by = dict(zip([g.anchor for g in plan.groups], plan._last_groups))
            mine = sum(s for anchor, s in by.items()
                       if set(next(g.members for g in plan.groups if g.anchor == anchor)) & ops)
            runs[name].append({"total_s": total, "pair_ops_s": mine})
        print(f"round {r + 1}/{a.rounds}: " + "  ".join(
            f"{n} {runs[n][-1]['total_s']:.3f} s ({runs[n][-1]['pair_ops_s']:.3f})"
            for n in plans), flush=True)
    med = {n: {k: statistics.median(x[k] for x in v) for k in ("total_s", "pair_ops_s")}
           for n, v in runs.items()}
    for n, m in med.items():
        print(f"{n:10s} plan {m['total_s']:.3f} s   groups holding {sorted(ops)}: "
              f"{m['pair_ops_s']:.3f} s  (medians of {a.rounds})")
    dims_s = "-".join(f"{k}{v}" for k, v in w.dims)
    rec = {"command": "python bench/pairs.py " + " ".join(sys.argv[1:] if argv is None else argv),
           "workload": w.name, "dims": dict(w.dims), "rounds": a.rounds,
           "machine": platform.processor() or platform.machine(),
           "load_before": list(load_before), "load_after": list(os.getloadavg()),
           "pairs": {c: list(m) for c, m in groups.items()},
           "candidates": {n: json.loads(c.to_json()) for n, c in cands.items()},
           "median": med, "runs": runs}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"pairs-{w.name}-{dims_s}-cpu.json"
    path.write_text(json.dumps(rec, indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
