"""`autotune workloads` and `check`: what can be tuned, and what a workload's op graph is."""
from __future__ import annotations

import json

import typer

from search_spaces import builtin_names, load_workload

from autotune.cli.common import Dims, Format, WorkloadArg, handled, load


@handled
def workloads(fmt: Format = "table"):
    """List the built-in workloads with their dims and summary."""
    rows = []
    for name in builtin_names():
        w = load_workload(name)
        rows.append({"name": name, "dims": dict(w.dims), "summary": w.summary})
    if fmt == "json":
        typer.echo(json.dumps(rows, indent=2))
        return
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        dims = ",".join(f"{k}={v}" for k, v in r["dims"].items())
        typer.echo(f"{r['name']:<{width}}  {dims:<16}  {r['summary']}")


@handled
def check(workload: WorkloadArg, dims: Dims = None):
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


def register(app: typer.Typer) -> None:
    """Add `workloads` and `check` to the app."""
    app.command()(workloads)
    app.command()(check)
