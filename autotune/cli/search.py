"""`autotune search` and `show-best`: find the fastest verified plan, and show what is cached."""
from __future__ import annotations

import dataclasses
import json
import sys
import time
from typing import Optional

import typer

from autotune.cli.common import (DEFAULT_WORKLOAD, CachedWorkloadArg, CliError, Db, Dims,
                                 DimsList, Format, WorkloadArg, _api, handled, load,
                                 parse_dims_list)


@handled
def search_cmd(
        workload: WorkloadArg = DEFAULT_WORKLOAD,
        budget: int = typer.Option(200, help="trials in all (measured, pruned and failed)"),
        dims: DimsList = None,
        device: str = typer.Option("cpu", help="cpu, cuda or auto"),
        sampler: str = typer.Option("tpe", help="tpe, random, gp or cmaes"),
        db: Db = None,
        seed: int = typer.Option(0, help="seed of the sampler and of the random inputs"),
        prune_factor: Optional[float] = typer.Option(
            None, help="skip candidates predicted this many times slower than the best "
                       "(default: 2, tightened as the model's errors are measured)"),
        repeats: int = typer.Option(3, help="timed runs per candidate (median)"),
        confirm_rounds: Optional[int] = typer.Option(
            None, help="at the end, re-measure the finalists side by side in this many "
                       "interleaved rounds and cache the winner by median (0: no "
                       "confirmation; default: 3, more while they take under 6 s)"),
        storage: Optional[str] = typer.Option(
            None, help="share the search with other workers through an Optuna storage: "
                       "journal:PATH (a file all workers reach) or an RDB URL such as "
                       "postgresql://user:pw@host/db; --budget then counts the shared "
                       "study's trials")):
    """Search for the fastest verified plan and cache it (for each shape of a --dims list, in
    order: a model's tuned functions then find each shape's plan, and the nearest one's for
    the shapes between)."""
    from autotune.backends.base import MeasureSettings
    from autotune.search.config import SAMPLERS, SearchConfig
    if sampler not in SAMPLERS:
        raise CliError(f"--sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    if budget < 1:
        raise CliError("--budget must be at least 1")
    if prune_factor is not None and not prune_factor > 0:
        raise CliError("--prune-factor must be above 0 (leave it out for the model's own)")
    if confirm_rounds is not None and confirm_rounds < 0:
        raise CliError("--confirm-rounds must be 0 (no confirmation) or more")
    shapes = [load(workload, d) for d in parse_dims_list(dims)]   # every error before a search
    env = _api().resolve(device)   # a missing GPU fails here, before any output
    config = SearchConfig(budget=budget, sampler=sampler, seed=seed, prune_factor=prune_factor,
                          storage=storage)
    if confirm_rounds is not None:
        # a number asked for is the number run; the default grows while its rounds are cheap
        config = dataclasses.replace(config, confirm_rounds=confirm_rounds, confirm_s=0.0)
    if storage:
        from autotune.search.storage import open_storage
        open_storage(storage)   # a bad URL or an unreachable server fails here, in one line
    settings = MeasureSettings(repeats=max(1, repeats))
    note = _calibration_note(env.kind)
    for n, w in enumerate(shapes, start=1):
        if len(shapes) > 1:
            typer.echo(f"== {w.name} at {','.join(f'{d}={v}' for d, v in w.dims)} "
                       f"(shape {n} of {len(shapes)})")
        _search_one(w, workload, device, db, config, settings, budget, note)
        note = ""                       # said once


def _calibration_note(kind: str) -> str:
    """The line to say on stderr when the cost model runs on default terms, not this
    machine's ("" when calibrated): the search still measures what it keeps, but prunes and
    proposes by a model priced for another machine (a calibration is read from
    $AUTOTUNE_DB's folder, else the user's cache)."""
    from autotune.backends.factory import backend_kind
    if backend_kind(kind).calibrated() is not False:
        return ""
    where = ""
    if kind == "cpu":
        from autotune.backends.cpu.calibrate import calibration_path
        where = f" (none at {calibration_path()})"
    return (f"note: no calibration of this machine's {kind}{where}: the cost model uses "
            f"default terms; `autotune calibrate --device {kind}` measures them once")


def _search_one(w, workload: str, device: str, db, config, settings, budget: int,
                note: str = "") -> None:
    """One shape's search, with its progress and its result line; ``note`` said on stderr
    once the search has started (a refusal before that, a damaged database say, stays the
    one line it is)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
        TimeElapsedColumn
    pending = [note] if note else []

    def say_note() -> None:
        if pending:
            typer.echo(pending.pop(), err=True)

    def status(p) -> str:
        best = f"best {p.best_s:.4g} s ({p.best_name})" if p.best_s else "best -"
        busy = "  machine busy: runs repeated" if p.busy else ""
        return f"{best}  pruned {p.pruned}  failed {p.failed}{busy}"
    if not sys.stdout.isatty():
        # a pipe or a log (a bar prints nothing there): one plain line per trial, flushed
        t0 = time.monotonic()

        def plain(p):
            say_note()
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
                lambda p: (say_note(), bar.update(task, completed=p.done, status=status(p))))
    say_note()          # a search with nothing left to run reports no progress
    p = result.progress
    if result.best is None:
        raise CliError(f"no candidate of {w.name} passed verification in {p.done} trials; "
                       f"see `autotune show-best {workload}`")
    c = result.confirmation
    confirmed = f" (confirmed: {c.winner} won {len(c.finalists)} finalists over {c.rounds} " \
        "interleaved rounds)" if c else ""
    typer.echo(f"{w.name}: {p.done} trials ({p.measured} measured, {p.pruned} pruned, "
               f"{p.failed} failed; {p.new} run by this process); best "
               f"{result.best.measured_s:.4g} s{confirmed}, plan key {result.key.key[:16]}")


@handled
def show_best(workload: CachedWorkloadArg = None, dims: Dims = None, db: Db = None,
              fmt: Format = "table"):
    """Show the best cached plan per key: time, prediction, speedups, trial counts."""
    from autotune.report.best import best_report
    wh = load(workload, dims).hash if workload else None
    rows = best_report(_api().open_db(db, create=False), wh)
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        raise CliError("no cached plan" + (f" for {workload}" if workload else "") +
                       "; run `autotune search` first")
    for r in rows:
        typer.echo(f"{r['workload']}  dims {r['dims']}  device {r['device']}  key {r['plan_key'][:16]}")
        typer.echo(f"  best {r['measured_s']:.4g} s (predicted {r['predicted_s']:.4g} s), "
                   f"trial {r['trial_number']} of study {r['study']}, {r['updated']}")
        if c := r["confirmed"]:
            typer.echo(f"  confirmed: median of {c['rounds']} interleaved rounds, the fastest "
                       f"of {c['finalists']} finalists re-measured side by side")
        else:
            typer.echo("  not confirmed: the fastest single measurement")
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


def register(app: typer.Typer) -> None:
    """Add `search` and `show-best` to the app."""
    app.command("search")(search_cmd)
    app.command("show-best")(show_best)
