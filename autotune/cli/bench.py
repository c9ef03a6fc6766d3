"""`autotune bench` and `plot`: the tuned plan against its peers, and the pictures of a search."""
from __future__ import annotations

import json
from typing import Optional

import typer

from autotune.cli.common import (DEFAULT_WORKLOAD, CliError, Db, Dims, Format, RunDevice,
                                 WorkloadArg, handled, load)


ALL_BUDGET = 60      # trials of the search `bench --all` runs where no plan is cached


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
              seed: int = typer.Option(1, help="seed of the inputs and of the round order"),
              every: bool = typer.Option(False, "--all",
                                         help="every built-in at its default dims (searched "
                                              f"first where nothing is cached: "
                                              f"--search-budget, default {ALL_BUDGET}), then "
                                              "one summary table, JSON and --plot chart")):
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
    command = shlex.join(["autotune", *sys.argv[1:]])
    if every:
        if dims or workload != DEFAULT_WORKLOAD:
            raise CliError("--all benches every built-in at its default dims: give no "
                           "workload and no --dims with it")
        return _bench_all(device, peers, rounds, plot, search_budget or ALL_BUDGET, db, out,
                          greedy_timeout if greedy_timeout > 0 else None, seed, command)
    w = load(workload, dims)
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


def _bench_all(device, peers, rounds, plot, budget, db, out, greedy_timeout, seed, command):
    """Each built-in's own bench run (one process each, interleaved), then the summary."""
    from pathlib import Path

    from search_spaces.loader import builtin_names

    from autotune.bench.run import run_bench
    from autotune.bench.summary import failed_row, format_summary, save_summary, summary_row
    rows = []
    for name in builtin_names():
        w = load(name, None)
        typer.echo(f"== {name}", err=True)
        try:
            result = run_bench(w, device, peers, rounds, db, budget, greedy_timeout, seed, out,
                               command, log=lambda s: typer.echo(s, err=True))
        except CliError:
            raise
        except Exception as e:   # one workload's failure is its row, not the end of the run
            rows.append(failed_row(name, dict(w.dims), f"{type(e).__name__}: {e}"))
            continue
        rows.append(summary_row(result))
    typer.echo(format_summary(rows))
    path = save_summary(rows, Path(out) / f"bench-all-{device}.json", command, device)
    typer.echo(f"wrote {path}")
    if plot:
        from autotune.report.plots import plot_summary
        try:
            typer.echo(f"wrote {plot_summary(rows, plot)}")
        except OSError as e:
            raise CliError(f"--plot {plot}: cannot write ({e.strerror or e})") from None


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
