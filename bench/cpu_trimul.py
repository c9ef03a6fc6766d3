#!/usr/bin/env python
"""The cached best CPU plan against JAX/XLA:CPU and the named plans, in one process.

    python bench/cpu_trimul.py                       # trimul_outgoing at N=702 (C=128)
    python bench/cpu_trimul.py --dims N=256 --db /tmp/plans.sqlite --out /tmp/results

A thin wrapper over :func:`autotune.bench.run.run_bench` (what `autotune bench` runs; see there for
the method: same inputs, checked against the float64 reference before timing, interleaved
rounds, the greedy plan once in a subprocess under a timeout, the calibrated floor).  The JSON
record goes to ``<out>/bench-<workload>-<dims>-cpu.json``.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


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
    ap.add_argument("--peers", default="jax", help="comma-separated peers (jax, torch, "
                                                  "inductor, iree)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")

    from autotune.bench.run import BenchError, run_bench
    from autotune.bench.table import format_table
    from autotune.cli.common import CliError, parse_dims
    from search_spaces import WorkloadError, load_workload

    command = [sys.executable, *sys.argv] if argv is None else [sys.executable, __file__, *argv]
    try:
        w = load_workload(args.workload, parse_dims(args.dims))
    except (WorkloadError, CliError) as e:
        raise SystemExit(str(e))
    try:
        result = run_bench(w, "cpu", args.peers, args.rounds, args.db, args.search_budget,
                           args.greedy_timeout, args.seed, args.out, shlex.join(command),
                           log=lambda s: print(s, flush=True))
    except BenchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print()
    print(format_table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
