#!/usr/bin/env python
"""The drop-in triangle updates inside a model, against the same model written from the equations
(issue 17): eager and torch.compile, in one process.  A thin wrapper over
:func:`autotune.bench.module.run_module_bench`, which ``autotune bench trimul_outgoing --module``
runs too (see there for the method).

    python bench/torch_module.py --n 384 702 --rounds 5 --db PLANS.sqlite

JSON: ``<out>/torch-module-pairblock-C<c>-cpu.json``.
"""
from __future__ import annotations

import autotune  # noqa: F401  (first: thread settings before torch's OpenMP and NumPy's BLAS)

import argparse  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autotune.bench.module import run_module_bench  # noqa: E402


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
    _, path = run_module_bench(args.n, args.c, args.rounds, args.db, args.out,
                               "python " + shlex.join(sys.argv), args.seed, args.tol,
                               args.compile_backend, say=lambda s: print(s, flush=True))
    print(f"-> {path}")


if __name__ == "__main__":
    main()
