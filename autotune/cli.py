"""The typer CLI: a thin layer over the library.  Errors are one line on stderr, exit code 1."""
from __future__ import annotations

import functools
import json
import warnings
from typing import Optional

import typer

from db.errors import DBError
from search_spaces import WorkloadError, builtin_names, load_workload

from .environment import NoGPUError

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
        prune_factor: float = typer.Option(3.0, help="skip candidates predicted this many "
                                                     "times slower than the best"),
        repeats: int = typer.Option(3, help="timed runs per candidate (median)")):
    """Search for the fastest verified plan and cache it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, \
        TimeElapsedColumn

    from .measure import MeasureSettings
    from .search import SAMPLERS, SearchConfig
    if sampler not in SAMPLERS:
        raise CliError(f"--sampler {sampler!r}: choose one of {', '.join(SAMPLERS)}")
    if budget < 1:
        raise CliError("--budget must be at least 1")
    w = load(workload, dims)
    config = SearchConfig(budget=budget, sampler=sampler, seed=seed, prune_factor=prune_factor)
    settings = MeasureSettings(repeats=max(1, repeats))
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                  transient=False) as bar:
        task = bar.add_task(f"search {w.name}", total=budget, status="starting (reference...)")

        def on_trial(p):
            best = f"best {p.best_s:.4g} s ({p.best_name})" if p.best_s else "best -"
            bar.update(task, completed=p.done, status=f"{best}  pruned {p.pruned}  "
                                                     f"failed {p.failed}")
        result = _api().run_search(w, device, db, config, settings, on_trial)
    p = result.progress
    if result.best is None:
        raise CliError(f"no candidate of {w.name} passed verification in {p.done} trials; "
                       f"see `autotune show-best {workload}`")
    typer.echo(f"{w.name}: {p.done} trials ({p.measured} measured, {p.pruned} pruned, "
               f"{p.failed} failed); best {result.best['measured_s']:.4g} s, plan key "
               f"{result.key.key[:16]}")


@app.command("show-best")
@handled
def show_best(workload: Optional[str] = typer.Argument(None, help="built-in name or path "
                                                                   "(default: every cached)"),
              dims: Optional[str] = typer.Option(None, help="override dims"),
              db: Optional[str] = typer.Option(None, help="plan database"),
              fmt: str = typer.Option("table", "--format", help="table or json")):
    """Show the best cached plan per key: time, prediction, speedups, trial counts."""
    from .report import best_report
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
            typer.echo(f"  vs {base:<9} " + (f"{v:.2f}x faster" if v else "not measured"))
        c = r["trials"]
        typer.echo(f"  trials: {c.get('ok', 0)} ok, {c.get('pruned', 0)} pruned, "
                   f"{c.get('failed', 0)} failed;  {r['stale'] or 'current'}")
        typer.echo(f"  plan: {r['plan']}")


def _api():
    from . import api
    return api


EXPLAIN_PLANS = ("unfused", "greedy", "heuristic")
EXPLAIN_DEVICES = ("h200", "h100", "a100", "cpu")


def _fmt_s(t: float) -> str:
    """Seconds with a readable unit."""
    if t >= 1:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3f} ms"
    return f"{t * 1e6:.1f} us"


def _device_spec(device: str):
    """A cost-model device: a datasheet preset, or the calibrated cpu spec."""
    import costmodel
    if device not in EXPLAIN_DEVICES:
        raise CliError(f"--device {device!r}: use one of {', '.join(EXPLAIN_DEVICES)}")
    if device != "cpu":
        return costmodel.preset(device)
    from autotune.calibrate import load_cpu_spec
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = load_cpu_spec()
    for c in caught:
        typer.echo(f"autotune: warning: {c.message}", err=True)
    return spec


@app.command()
@handled
def explain(workload: str = typer.Argument(DEFAULT_WORKLOAD,
                                           help="built-in name or path to a .toml"),
            dims: Optional[str] = typer.Option(None, help="override dims, e.g. N=64,C=16"),
            plan: str = typer.Option("heuristic", help="unfused, greedy or heuristic"),
            device: str = typer.Option("h200", help="h200, h100, a100 or cpu (calibrated)"),
            fmt: str = typer.Option("table", "--format", help="table or json"),
            dot: Optional[str] = typer.Option(None, "--dot", metavar="FILE",
                                              help="write the dispatch graph as Graphviz DOT")):
    """Predict a named plan's time group by group, and show why (recompute, bytes, bound)."""
    import costmodel
    from search_spaces.plans import named_plan
    from search_spaces.space import SearchSpace

    if plan not in EXPLAIN_PLANS:
        raise CliError(f"--plan {plan!r}: use one of {', '.join(EXPLAIN_PLANS)}")
    if fmt not in ("table", "json"):
        raise CliError(f"--format {fmt!r}: use table or json")
    spec = _device_spec(device)
    w = load(workload, dims)
    cand = named_plan(SearchSpace(w), plan)
    est = costmodel.estimate(w, cand, spec)
    if dot:
        from autotune.dot import dispatch_dot
        try:
            with open(dot, "w") as f:
                f.write(dispatch_dot(w, cand, f"{w.name} - {plan} plan on {device}: "
                                              f"{_fmt_s(est.total_s)} predicted"))
        except OSError as e:
            raise CliError(f"--dot {dot}: cannot write ({e.strerror or e})") from None
    if fmt == "json":
        d = est.to_dict()
        d["plan"] = plan
        for g, gd in zip(est.groups, d["groups"]):
            op = w.op(g.anchor)
            gd["domain"] = {"parallel": dict(zip(op.parallel, op.out_shape)),
                            "reduction": {r: op.extent(r) for r in op.reduction}}
        typer.echo(json.dumps(d, indent=2))
        return
    typer.echo(f"workload {w.name}  dims: " + ", ".join(f"{k}={v}" for k, v in w.dims)
               + f"  plan: {plan}  device: {spec.name}")
    for k, g in enumerate(est.groups):
        op = w.op(g.anchor)
        dom = ", ".join(f"{i}:{e}" for i, e in zip(op.parallel, op.out_shape))
        red = ", ".join(f"{r}:{op.extent(r)}" for r in op.reduction)
        tiles = "(" + ",".join(str(t) for t in g.tiles) + ")" if g.tiles else "-"
        typer.echo(f"group {k}: anchor {g.anchor}  impl {g.impl}  tiles {tiles}  "
                   f"predicted {_fmt_s(g.predicted_s)} ({g.bound}-bound)")
        typer.echo(f"  ops:    {', '.join(g.ops)}")
        typer.echo(f"  domain: {dom}" + (f" | reduce {red}" if red else ""))
        if g.fused:
            typer.echo("  fused:  " + ", ".join(f"{f.producer} x{f.recompute_factor:g}"
                                                 for f in g.fused))
        typer.echo(f"  flops:  {g.flops:.3e} (useful {g.flops - g.recomputed_flops:.3e}, "
                   f"recomputed {g.recomputed_flops:.3e}; transcendentals "
                   f"{g.transcendentals:.3e})")
        typer.echo(f"  bytes:  {g.bytes:.3e} (unique {g.unique_bytes:.3e})  "
                   f"launches {g.launches}")
    launches = sum(g.launches for g in est.groups)
    typer.echo(f"total: {_fmt_s(est.total_s)} predicted  groups {len(est.groups)}  "
               f"launches {launches}  flops {est.flops:.3e} (useful "
               f"{est.flops - est.recomputed_flops:.3e}, recomputed {est.recomputed_flops:.3e})"
               f"  bytes {est.bytes:.3e}")


@app.command()
@handled
def calibrate(device: str = typer.Option("cpu", help="only cpu: GPU specs are datasheet presets"),
              gemm_n: int = typer.Option(2048, "--gemm-n", min=16,
                                         help="GEMM size measured (n x n float32)"),
              copy_mb: float = typer.Option(256.0, "--copy-mb", min=0.001,
                                            help="MB per array in the copy-bandwidth test"),
              repeats: int = typer.Option(3, min=1, help="best of this many runs")):
    """Measure this machine's GEMM rate and copy bandwidth for the cpu cost-model spec."""
    from autotune.calibrate import calibrate_cpu
    if device != "cpu":
        raise CliError(f"--device {device!r}: only cpu is calibrated (GPU specs are datasheet "
                       f"presets)")
    try:
        rec, path = calibrate_cpu(gemm_n, copy_mb, repeats)
    except OSError as e:
        raise CliError(f"cannot store the calibration: {e}") from None
    typer.echo(f"gemm:       {rec['gemm_flops'] / 1e9:.1f} GFLOP/s  (np.matmul float32 "
               f"{gemm_n}x{gemm_n}, best of {repeats})")
    typer.echo(f"bandwidth:  {rec['bandwidth'] / 1e9:.2f} GB/s  (np.copyto float32 "
               f"{rec['copy_bytes'] / 1e6:.0f} MB, read+write, best of {repeats})")
    typer.echo(f"loop:       {rec['loop_flops'] / 1e9:.1f} GFLOP/s  (not measured: "
               f"max(default, 0.15 x gemm))")
    typer.echo(f"cores:      {rec['parallel_units']}"
               + (f"   last-level cache: {rec['cache_bytes'] / 2**20:.0f} MiB"
                  if "cache_bytes" in rec else ""))
    typer.echo(f"wrote {path}")


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
