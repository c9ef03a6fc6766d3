"""The typer CLI: a thin layer over the library.  Errors are one line on stderr, exit code 1.

Commands live in cli.py (workloads, check, search, show-best), cli_tools.py (explain, calibrate,
emit) and cli_cache.py (db check, cache prune); importing those modules registers them.
"""
from __future__ import annotations

import json
import sys
import time
from typing import Optional

import typer

from search_spaces import builtin_names, load_workload

from autotune.cli import cache, tools  # noqa: F401  (registers their commands on app)
from autotune.cli.common import DEFAULT_WORKLOAD, CliError, _api, app, handled, load

__all__ = ["app", "main"]


@app.command()
@handled
def workloads(fmt: str = typer.Option("table", "--format", help="table or json")):
    """List the built-in workloads with their dims and summary."""
    rows = []
    for name in builtin_names():
        w = load_workload(name)
        rows.append({"name": name, "dims": dict(w.dims), "summary": w.summary})
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    if fmt != "table":
        raise CliError(f"--format {fmt!r}: use table or json")
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        dims = ",".join(f"{k}={v}" for k, v in r["dims"].items())
        typer.echo(f"{r['name']:<{width}}  {dims:<16}  {r['summary']}")


@app.command()
@handled
def check(workload: str = typer.Argument(..., help="built-in name or path to a .toml"),
          dims: Optional[str] = typer.Option(None, help="override dims, e.g. N=64,C=16")):
    """Parse and validate a workload; print its op graph."""
    w = load(workload, dims)
    typer.echo(f"workload {w.name}  dtype={w.dtype}  dims: "
               + ", ".join(f"{k}={v}" for k, v in w.dims) + f"  hash={w.hash[:16]}")
    typer.echo("inputs: " + ", ".join(f"{n}{list(s)}" for n, s in w.inputs))
    for op in w.ops:
        kind = "contraction" if op.is_contraction else (
            "reduction" if op.reduction else "elementwise")
        dom = ", ".join(f"{i}:{e}" for i, e in zip(op.domain, op.extents))
        red = f" | reduce {','.join(op.reduction)}" if op.reduction else ""
        maps = "; ".join(f"{a.tensor}[{','.join(a.idx)}]" for a in
                         dict.fromkeys(op.reads()))
        consumers = w.consumers.get(op.out, ())
        typer.echo(f"  {op.out:<8} {kind:<11} domain({dom}){red}  reads {maps}"
                   + (f"  -> {', '.join(consumers)}" if consumers else "  -> output"))
    typer.echo(f"outputs: {', '.join(w.outputs)}   ops: {len(w.ops)}   "
               f"flops: {w.flops():.3e}")


@app.command("search")
@handled
def search_cmd(
        workload: str = typer.Argument(DEFAULT_WORKLOAD, help="built-in name or path"),
        budget: int = typer.Option(200, help="trials in all (measured, pruned and failed)"),
        dims: Optional[str] = typer.Option(None, help="override dims, e.g. N=128"),
        device: str = typer.Option("cpu", help="cpu, cuda or auto"),
        sampler: str = typer.Option("tpe", help="tpe, random, gp or cmaes"),
        db: Optional[str] = typer.Option(None, help="plan database (default: $AUTOTUNE_DB or "
                                                    "the user cache dir)"),
        seed: int = typer.Option(0, help="seed of the sampler and of the random inputs"),
        prune_factor: float = typer.Option(2.0, help="skip candidates predicted this many "
                                                     "times slower than the best"),
        repeats: int = typer.Option(3, help="timed runs per candidate (median)"),
        storage: Optional[str] = typer.Option(
            None, help="share the search with other workers through an Optuna storage: "
                       "journal:PATH (a file all workers reach) or an RDB URL such as "
                       "postgresql://user:pw@host/db; --budget then counts the shared "
                       "study's trials")):
    """Search for the fastest verified plan and cache it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
        TimeElapsedColumn

    from autotune.backends.base import MeasureSettings
    from autotune.search.config import SAMPLERS, SearchConfig
    if sampler not in SAMPLERS:
        raise CliError(f"--sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    if budget < 1:
        raise CliError("--budget must be at least 1")
    w = load(workload, dims)
    _api().resolve(device)   # a missing GPU fails here, before any output
    config = SearchConfig(budget=budget, sampler=sampler, seed=seed, prune_factor=prune_factor,
                          storage=storage)
    if storage:
        from autotune.search.storage import open_storage
        open_storage(storage)   # a bad URL or an unreachable server fails here, in one line
    settings = MeasureSettings(repeats=max(1, repeats))

    def status(p) -> str:
        best = f"best {p.best_s:.4g} s ({p.best_name})" if p.best_s else "best -"
        return f"{best}  pruned {p.pruned}  failed {p.failed}"
    if not sys.stdout.isatty():
        # a pipe or a log (a bar prints nothing there): one plain line per trial, flushed
        t0 = time.monotonic()

        def plain(p):
            typer.echo(f"trial {p.done}/{budget} {time.monotonic() - t0:.0f}s  {p.last}  "
                       f"{status(p)}")
            sys.stdout.flush()
        result = _api().run_search(w, device, db, config, settings, plain)
    else:
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                      MofNCompleteColumn(), TextColumn("{task.fields[status]}"),
                      TimeElapsedColumn(), transient=False) as bar:
            task = bar.add_task(f"search {w.name}", total=budget,
                                status="starting (reference...)")
            result = _api().run_search(
                w, device, db, config, settings,
                lambda p: bar.update(task, completed=p.done, status=status(p)))
    p = result.progress
    if result.best is None:
        raise CliError(f"no candidate of {w.name} passed verification in {p.done} trials; "
                       f"see `autotune show-best {workload}`")
    typer.echo(f"{w.name}: {p.done} trials ({p.measured} measured, {p.pruned} pruned, "
               f"{p.failed} failed; {p.new} run by this process); best "
               f"{result.best['measured_s']:.4g} s, plan key {result.key.key[:16]}")


@app.command("show-best")
@handled
def show_best(workload: Optional[str] = typer.Argument(None, help="built-in name or path "
                                                                   "(default: every cached)"),
              dims: Optional[str] = typer.Option(None, help="override dims"),
              db: Optional[str] = typer.Option(None, help="plan database"),
              fmt: str = typer.Option("table", "--format", help="table or json")):
    """Show the best cached plan per key: time, prediction, speedups, trial counts."""
    from autotune.report.best import best_report
    wh = load(workload, dims).hash if workload else None
    rows = best_report(_api().open_db(db), wh)
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    if fmt != "table":
        raise CliError(f"--format {fmt!r}: use table or json")
    if not rows:
        raise CliError("no cached plan" + (f" for {workload}" if workload else "") +
                       "; run `autotune search` first")
    for r in rows:
        typer.echo(f"{r['workload']}  dims {r['dims']}  device {r['device']}  key {r['plan_key'][:16]}")
        typer.echo(f"  best {r['measured_s']:.4g} s (predicted {r['predicted_s']:.4g} s), "
                   f"trial {r['trial_number']} of study {r['study']}, {r['updated']}")
        for base in ("unfused", "greedy", "heuristic"):
            v = r["speedup"].get(base)
            pred = r["named_predicted_s"].get(base)
            if v:
                typer.echo(f"  vs {base:<9} {v:.2f}x faster ({r['named_s'][base]:.4g} s)")
            elif pred:
                typer.echo(f"  vs {base:<9} not run: predicted {pred:.4g} s, "
                           f"~{pred / r['predicted_s']:.0f}x the best's prediction (pruned)")
            else:
                typer.echo(f"  vs {base:<9} not measured")
        c = r["trials"]
        typer.echo(f"  trials: {c.get('ok', 0)} ok, {c.get('pruned', 0)} pruned, "
                   f"{c.get('failed', 0)} failed;  {r['stale'] or 'current'}")
        typer.echo(f"  plan: {r['plan']}")


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
