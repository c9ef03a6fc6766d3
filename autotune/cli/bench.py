"""`autotune bench` and `plot`: the tuned plan against its peers, and the pictures of a search."""
from __future__ import annotations

import json
from typing import Optional

import typer

from autotune.cli.common import (DEFAULT_WORKLOAD, CliError, Db, Dims, Format, RunDevice,
                                 WorkloadArg, handled, load)


@handled
def bench_cmd(workload: WorkloadArg = DEFAULT_WORKLOAD,
              dims: Dims = None,
              device: RunDevice = "cpu",
              peers: str = typer.Option("jax,torch,inductor,iree",
                                        help="comma-separated: jax, torch, inductor, iree "
                                             "(missing ones are reported and skipped)"),
              rounds: int = typer.Option(5, help="interleaved timing rounds"),
              fmt: Format = "table",
              plot: Optional[str] = typer.Option(None, "--plot", metavar="FILE.png",
                                                 help="write the bar chart (needs matplotlib)"),
              search_budget: Optional[int] = typer.Option(
                  None, "--search-budget", help="with no plan cached, search this many trials "
                                                "first"),
              db: Db = None,
              out: str = typer.Option("bench/results", "--out", help="folder for the JSON record"),
              greedy_timeout: float = typer.Option(60.0, "--greedy-timeout",
                                                   help="seconds the greedy plan's one run may "
                                                        "take (0: skip it)"),
              seed: int = typer.Option(1, help="seed of the inputs and of the round order")):
    """Time the cached best plan against the named plans, JAX/XLA, PyTorch, torch.compile and
    IREE on the same inputs, in one process (interleaved rounds, medians)."""
    import shlex
    import sys

    from autotune.bench.run import run_bench
    from autotune.bench.table import format_table
    if rounds < 1:
        raise CliError("--rounds must be at least 1")
    if search_budget is not None and search_budget < 1:
        raise CliError("--search-budget must be at least 1")
    w = load(workload, dims)
    command = shlex.join(["autotune", *sys.argv[1:]])
    result = run_bench(w, device, peers, rounds, db, search_budget,
                       greedy_timeout if greedy_timeout > 0 else None, seed, out, command,
                       log=lambda s: typer.echo(s, err=True))
    if fmt == "json":
        typer.echo(json.dumps(result.to_dict(), indent=2, default=float))
    else:
        typer.echo(format_table(result))
        typer.echo(f"wrote {result.json_path}")
    if plot:
        from autotune.report.plots import plot_bench
        try:
            path = plot_bench(result, plot)
        except OSError as e:
            raise CliError(f"--plot {plot}: cannot write ({e.strerror or e})") from None
        typer.echo(f"wrote {path}", err=fmt == "json")


@handled
def plot_cmd(workload: WorkloadArg = DEFAULT_WORKLOAD,
             dims: Dims = None,
             device: RunDevice = "cpu",
             db: Db = None,
             results: str = typer.Option("bench/results", "--results",
                                         help="where `autotune bench` saved its JSON"),
             out: str = typer.Option(..., "--out", help="folder for the PNGs")):
    """Plot the search history, predicted vs measured (Spearman's rho) and, when a bench record
    exists, the bench bar chart."""
    from autotune.report.plots import plot_all
    w = load(workload, dims)
    try:
        written = plot_all(w, out, device, db, results)
    except OSError as e:
        raise CliError(f"--out {out}: cannot write ({e.strerror or e})") from None
    for name, path in written.items():
        if name != "rho":
            typer.echo(f"wrote {path}")
    if "rho" in written:
        typer.echo(f"Spearman's rho (predicted vs measured): {written['rho']:.3f}")
    if "bench" not in written:
        typer.echo(f"no bench record for {w.name} in {results}: run `autotune bench` for "
                   f"bench.png", err=True)


def register(app: typer.Typer) -> None:
    """Add `bench` and `plot` to the app."""
    app.command("bench")(bench_cmd)
    app.command("plot")(plot_cmd)
