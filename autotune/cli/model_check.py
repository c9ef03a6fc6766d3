"""`autotune model-check`: how well the cost model ranks measured candidates, with and without
the correction learnt from measurements (logic: :mod:`autotune.report.model_check`)."""
from __future__ import annotations

import json
from typing import Optional

import typer

from autotune.cli.common import (DEFAULT_WORKLOAD, CliError, Db, Dims, Format, RunDevice,
                                 WorkloadArg, handled, load)


@handled
def model_check(workload: WorkloadArg = DEFAULT_WORKLOAD,
                dims: Dims = None,
                samples: int = typer.Option(40, help="random legal candidates measured "
                                                     "besides the named plans"),
                rounds: int = typer.Option(3, help="interleaved rounds (the median is used)"),
                confirm_rounds: int = typer.Option(
                    5, help="more rounds of the candidates the top-1 regrets hinge on (each "
                            "model's pick and the 3 fastest), among themselves; 0: none"),
                folds: int = typer.Option(5, help="folds of the correction's cross-fitting"),
                within: Optional[float] = typer.Option(
                    None, "--within", metavar="FACTOR",
                    help="draw only candidates the analytic model predicts within FACTOR x "
                         "the best named plan (default: any legal candidate)"),
                seed: int = typer.Option(0, help="seed of the draw, the order and the inputs"),
                db: Db = None,
                fmt: Format = "table",
                device: RunDevice = "cpu",
                plot: Optional[str] = typer.Option(
                    None, "--plot", metavar="FILE.png",
                    help="write predicted vs measured, analytic and corrected (needs "
                         "matplotlib)")):
    """Measure random candidates and the named plans, and report how well the cost model ranks
    them (Spearman's rho, Kendall's tau, median |log error|, top-1 regret) with and without the
    learned correction, fitted on other candidates than those it is scored on."""
    if samples < 0:
        raise CliError("--samples must be at least 0")
    if rounds < 1:
        raise CliError("--rounds must be at least 1")
    if confirm_rounds < 0:
        raise CliError("--confirm-rounds must be at least 0")
    if folds < 2:
        raise CliError("--folds must be at least 2 (a fit is never scored on its own data)")
    if within is not None and not within > 0:
        raise CliError("--within must be a positive factor")
    if plot:
        from autotune.report.plots import _figure
        _figure()           # matplotlib missing: one line now, not after the measurements
    from autotune.report.model_check import format_table, run_model_check
    w = load(workload, dims)
    check = run_model_check(w, device, db, samples, rounds, folds, seed, within,
                            log=lambda s: typer.echo(s, err=True),
                            confirm_rounds=confirm_rounds)
    if fmt == "json":
        typer.echo(json.dumps(check.to_dict(), indent=2))
    else:
        typer.echo(format_table(check))
    if plot:
        from autotune.report.plots import plot_model_check
        try:
            path = plot_model_check(check.to_dict(), plot)
        except OSError as e:
            raise CliError(f"--plot {plot}: cannot write ({e.strerror or e})") from None
        typer.echo(f"wrote {path}", err=fmt == "json")


def register(app: typer.Typer) -> None:
    """Add `model-check` to the app."""
    app.command("model-check")(model_check)
