"""What every CLI command shares: one-line error handling, workload loading, and the options
several commands take, each defined once as a typed alias (``db: Db = None``)."""
from __future__ import annotations

import functools
import warnings
from typing import Annotated, Callable, Optional

import typer

from db.errors import DBError
from search_spaces import WorkloadError, load_workload

from autotune.environment import NoGPUError

DEFAULT_WORKLOAD = "trimul_outgoing"
FORMATS = ("table", "json")
RUN_DEVICES = ("cpu", "cuda")


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


def one_of(option: str, choices: tuple[str, ...]) -> Callable[[Optional[str]], Optional[str]]:
    """A typer callback accepting only ``choices`` for ``option``.

    typer's own choice check (an Enum or Literal type) fails with a boxed usage message and exit
    code 2; every other CLI error is one line on stderr and exit code 1, so this one is too.
    """
    allowed = " or ".join(choices) if len(choices) == 2 else f"one of {', '.join(choices)}"

    def check(value: Optional[str]) -> Optional[str]:
        if value is not None and value not in choices:
            typer.echo(f"autotune: {option} {value!r}: use {allowed}", err=True)
            raise typer.Exit(1)
        return value
    return check


def choice(option: str, choices: tuple[str, ...], help: str):
    """An option taking one of ``choices``: listed as ``<a|b>`` in --help (as typer lists an
    Enum's values), checked at parse time by :func:`one_of`."""
    return typer.Option(option, metavar=f"<{'|'.join(choices)}>",
                        callback=one_of(option, choices), help=help)


# ---- the shared arguments and options --------------------------------------------------------
WorkloadArg = Annotated[str, typer.Argument(help="built-in name or path to a .toml")]
CachedWorkloadArg = Annotated[Optional[str], typer.Argument(
    help="built-in name or path (default: every cached)")]
Dims = Annotated[Optional[str], typer.Option(help="override dims, e.g. N=64,C=16")]
DimsList = Annotated[Optional[str], typer.Option(
    help="override dims, e.g. N=64,C=16; a list tunes each shape in turn: N=256,384,C=64")]
Db = Annotated[Optional[str], typer.Option(
    help="plan database (default: $AUTOTUNE_DB or the user cache dir)")]
Format = Annotated[str, choice("--format", FORMATS, "print a table or JSON")]
RunDevice = Annotated[str, choice("--device", RUN_DEVICES, "the device the plan runs on")]


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


def parse_dims_list(text: Optional[str]) -> list[dict[str, int]]:
    """``"N=256,384,C=64"`` -> [{"N": 256, "C": 64}, {"N": 384, "C": 64}]: a bare integer adds a
    value to the dim before it, and the shapes are every combination, the first dim's values
    outermost (in the order given).  Without lists it is :func:`parse_dims`'s one shape."""
    if not text:
        return [{}]
    values: dict[str, list[int]] = {}
    last = None
    for part in text.split(","):
        k, sep, v = part.partition("=")
        if not sep and last is not None and k.strip().isdigit():
            values[last].append(int(k))
            continue
        if not sep or not k.strip() or not v.strip().lstrip("-").isdigit():
            raise CliError(f"--dims: {part!r} is not NAME=INTEGER or a further INTEGER "
                           f"(example: --dims N=256,384,C=64)")
        last = k.strip()
        if last in values:
            raise CliError(f"--dims: {last} given twice (list its values after one {last}=)")
        values[last] = [int(v)]
    shapes = [{}]
    for k, vs in values.items():
        shapes = [{**s, k: v} for s in shapes for v in vs]
    return shapes


def load(workload: str, dims: Optional[str] | dict[str, int]):
    """Load a workload for a command (``dims`` as the option's text, or parsed); warnings are
    printed as single lines."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        w = load_workload(workload, dims if isinstance(dims, dict) else parse_dims(dims))
    for c in caught:
        typer.echo(str(c.message), err=True)
    return w


def _api():
    # Imported on first use: it pulls in optuna and the search, which `--help` never needs.
    from autotune import api
    return api
