"""The typer CLI: a thin layer over the library.  Errors are one line on stderr, exit code 1."""
from __future__ import annotations

import functools
import json
import warnings
from typing import Optional

import typer

from search_spaces import WorkloadError, builtin_names, load_workload

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
        except CliError as e:
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


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
