"""What every CLI command shares: the typer app, one-line error handling, workload loading."""
from __future__ import annotations

import functools
import warnings
from typing import Optional

import typer

from db.errors import DBError
from search_spaces import WorkloadError, load_workload

from autotune.environment import NoGPUError

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Declarative, cost-model-driven fusion autotuner for einsum-heavy programs.")

DEFAULT_WORKLOAD = "trimul_outgoing"


class CliError(Exception):
    """A user-facing failure: printed as one line, exit code 1."""


def handled(fn):
    """Run a command, turning expected failures into one line on stderr and exit code 1."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except WorkloadError as e:
            typer.echo(str(e), err=True)
        except (CliError, DBError, NoGPUError, ValueError) as e:
            typer.echo(f"autotune: {e}", err=True)
        raise typer.Exit(1)
    return wrapper


def parse_dims(text: Optional[str]) -> dict[str, int]:
    """``"N=64,C=16"`` -> {"N": 64, "C": 16}."""
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        k, sep, v = part.partition("=")
        if not sep or not k.strip() or not v.strip().lstrip("-").isdigit():
            raise CliError(f"--dims: {part!r} is not NAME=INTEGER (example: --dims N=64,C=16)")
        out[k.strip()] = int(v)
    return out


def load(workload: str, dims: Optional[str]):
    """Load a workload for a command; warnings are printed as single lines."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = load_workload(workload, parse_dims(dims))
    for c in caught:
        typer.echo(str(c.message), err=True)
    return w


def _api():
    from autotune import api
    return api
