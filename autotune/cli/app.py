"""The typer CLI: a thin layer over the library.  Errors are one line on stderr, exit code 1.

One module per command family, each adding its commands to the app here:

    workloads.py   workloads, check           search.py     search, show-best
    tools.py       explain, calibrate, emit   bench.py      bench, plot
    frontends.py   import-mlir                cache.py      db check, cache prune
    model_check.py model-check

common.py holds what they share: the options defined once, error handling, workload loading.
"""
from __future__ import annotations

import typer

from autotune.cli import bench, cache, frontends, model_check, search, tools, workloads

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Declarative, cost-model-driven fusion autotuner for einsum-heavy programs.")
for family in (workloads, search, tools, bench, frontends, cache, model_check):
    family.register(app)


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
