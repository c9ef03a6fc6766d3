"""`autotune bench` and `plot`: the tuned plan against its peers, and the pictures of a search."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
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
              isolate: bool = typer.Option(False, "--isolate-peers",
                                           help="build and run each peer in a process of its "
                                                "own, driven round by round (by default "
                                                "they share the bench's process)"),
              every: bool = typer.Option(False, "--all",
                                         help="every built-in at its default dims, or every "
                                              "*.toml in the folder given as the workload "
                                              "(searched first where nothing is cached: "
                                              f"--search-budget, default {ALL_BUDGET}), then "
                                              "one summary table, JSON and --plot chart"),
              module: bool = typer.Option(False, "--module",
                                          help="trimul_outgoing/incoming: then time the "
                                               "drop-in torch modules inside an AlphaFold "
                                               "pair-stack step against the step written from "
                                               "the equations, eager and torch.compile (--dims "
                                               "may list N: N=384,702)")):
    """Time the cached best plan against the named plans, JAX/XLA, PyTorch, torch.compile and
    IREE on the same inputs, in one process (interleaved rounds, medians; --isolate-peers: each
    peer in a process of its own)."""
    import shlex
    import sys

    if rounds < 1:
        raise CliError("--rounds must be at least 1")
    if search_budget is not None and search_budget < 1:
        raise CliError("--search-budget must be at least 1")
    command = shlex.join(["autotune", *sys.argv[1:]])
    greedy = greedy_timeout if greedy_timeout > 0 else None
    if every and (dims or module or (workload != DEFAULT_WORKLOAD
                                     and not Path(workload).is_dir())):
        raise CliError("--all benches every built-in, or every *.toml of a folder given as "
                       "the workload, at its default dims: give no --dims, no --module and "
                       "no single workload with it")
    opts = _Options(device, peers, rounds, search_budget or (ALL_BUDGET if every else None),
                    db, out, greedy, seed, command, isolate)
    if every:
        return _bench_all(opts, plot, _all_workloads(workload))
    if module:
        return _bench_module(workload, dims, opts, fmt, plot)
    result = _bench_one(load(workload, dims), opts)
    _show(result, fmt, plot)


@dataclass(frozen=True)
class _Options:
    """What every plan bench of one command shares."""
    device: str
    peers: str
    rounds: int
    search_budget: Optional[int]
    db: Optional[str]
    out: str
    greedy_timeout: Optional[float]
    seed: int
    command: str
    isolate_peers: bool = False


def _bench_one(w, o: _Options):
    from autotune.bench.run import run_bench
    return run_bench(w, o.device, o.peers, o.rounds, o.db, o.search_budget, o.greedy_timeout,
                     o.seed, o.out, o.command, log=lambda s: typer.echo(s, err=True),
                     isolate_peers=o.isolate_peers)


def _show(result, fmt: str, plot: Optional[str], json_later: bool = False) -> None:
    """The table (or JSON, unless the caller prints one object later) and the chart."""
    from autotune.bench.table import format_table
    if fmt == "json":
        if not json_later:
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


def _bench_module(workload: str, dims: Optional[str], o: _Options, fmt: str,
                  plot: Optional[str]) -> None:
    """Each shape's plan bench, then the drop-in modules inside the model at every N (one
    process); with --format json one object: {"benches": [...], "module": {...}}."""
    from autotune.bench.module import MODULE_WORKLOADS, format_module_result, run_module_bench
    from autotune.bench.peers import PeerUnavailable
    from autotune.cli.common import parse_dims_list
    if workload not in MODULE_WORKLOADS:
        raise CliError(f"--module: {workload!r} has no drop-in module (there are: "
                       f"{', '.join(MODULE_WORKLOADS)})")
    if o.device != "cpu":
        raise CliError("--module: the module bench runs on the cpu only; drop --device")
    shapes = [load(workload, d) for d in parse_dims_list(dims)]
    if plot and len(shapes) > 1:
        raise CliError("--plot draws one bench: give one N with it")
    if len({dict(w.dims)["C"] for w in shapes}) > 1:
        raise CliError("--module: give one C for every N")
    benches = []
    for w in shapes:
        result = _bench_one(w, o)
        benches.append(result.to_dict())
        _show(result, fmt, plot, json_later=True)
    try:
        record, path = run_module_bench(sorted({dict(w.dims)["N"] for w in shapes}),
                                        dict(shapes[0].dims)["C"], o.rounds, o.db, o.out,
                                        o.command, o.seed,
                                        say=lambda s: typer.echo(s, err=True))
    except PeerUnavailable as e:
        raise CliError(f"--module: {e}") from None
    if fmt == "json":
        typer.echo(json.dumps({"benches": benches, "module": record}, indent=2, default=float))
    else:
        typer.echo("\n".join(format_module_result(r, o.rounds) for r in record["results"]))
    typer.echo(f"wrote {path}", err=fmt == "json")


def _all_workloads(workload: str) -> list[str]:
    """What ``--all`` benches: every built-in, or every workload file of a folder."""
    from search_spaces.loader import builtin_names
    if not Path(workload).is_dir():      # bench_cmd let only the default name through
        return list(builtin_names())
    files = sorted(str(p) for p in Path(workload).glob("*.toml"))
    if not files:
        raise CliError(f"--all {workload}: the folder holds no *.toml workload; give a "
                       "folder of workload files, or no workload for the built-ins")
    return files


def _bench_all(o: _Options, plot: Optional[str], names: list[str]) -> None:
    """Each workload's own bench run (one process each, interleaved), then the summary."""
    from search_spaces import WorkloadError

    from autotune.bench.summary import failed_row, format_summary, save_summary, summary_row
    rows = []
    for name in names:
        try:
            w = load(name, None)
        except WorkloadError as e:   # a malformed file of the folder is its row
            rows.append(failed_row(name, {}, str(e)))
            continue
        typer.echo(f"== {name}", err=True)
        try:
            result = _bench_one(w, o)
        except CliError:
            raise
        except Exception as e:   # one workload's failure is its row, not the end of the run
            rows.append(failed_row(name, dict(w.dims), f"{type(e).__name__}: {e}"))
            continue
        rows.append(summary_row(result))
    typer.echo(format_summary(rows))
    path = save_summary(rows, Path(o.out) / f"bench-all-{o.device}.json", o.command, o.device)
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
