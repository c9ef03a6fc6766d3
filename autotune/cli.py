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
    _api().resolve(device)   # a missing GPU fails here, before any output
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


db_app = typer.Typer(help="Inspect the plan database.", no_args_is_help=True)
cache_app = typer.Typer(help="Maintain the plan cache.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(cache_app, name="cache")


@db_app.command("check")
@handled
def db_check(db: Optional[str] = typer.Option(None, help="plan database (default: the user's)")):
    """Diagnose the plan database without modifying it; exit 1 if anything is wrong."""
    from db import check_file, default_db_path
    path = db or str(default_db_path())
    problems = check_file(path)
    if not problems:
        typer.echo(f"{path}: OK")
        return
    for p in problems:
        typer.echo(p if p.startswith(path) else f"{path}: {p}", err=True)
    typer.echo("recover: move the file aside (mv PATH PATH.bad) and rerun the search, or pass "
               "--db NEW_PATH; trials in a damaged file can be read with `sqlite3 PATH .recover`",
               err=True)
    raise typer.Exit(1)


@cache_app.command("prune")
@handled
def cache_prune(db: Optional[str] = typer.Option(None, help="plan database"),
                device: str = typer.Option("cpu", help="the device whose current key is kept"),
                dry_run: bool = typer.Option(False, "--dry-run", help="list, delete nothing")):
    """Delete trials and best plans recorded under another search-space, schema, device or
    library version than this machine's current one for DEVICE."""
    from db.keys import PlanKey
    from .environment import detect
    env = detect(device)
    store = _api().open_db(db)
    try:
        stale = store.stale_rows(PlanKey.for_env("", env))
        for r in stale:
            typer.echo(f"stale {r['plan_key'][:16]}: {', '.join(r['reasons'])} changed "
                       f"({r['trials']} trials{', best plan' if r['has_best'] else ''})")
        if dry_run:
            typer.echo(f"{len(stale)} stale key(s); nothing deleted (--dry-run)")
            return
        n = store.prune(store.all_keys() - {r["plan_key"] for r in stale})
        typer.echo(f"deleted {n} row(s) under {len(stale)} stale key(s)")
    finally:
        store.close()


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


@app.command()
@handled
def emit(workload: str = typer.Argument(DEFAULT_WORKLOAD, help="built-in name or path"),
         dims: Optional[str] = typer.Option(None, help="override dims, e.g. N=64,C=16"),
         plan: str = typer.Option("heuristic", help="heuristic, greedy, unfused or best "
                                                    "(the cached best for this device)"),
         device: str = typer.Option("cuda", help="cuda or cpu"),
         out: str = typer.Option(..., "--out", help="folder for the sources and README.txt"),
         db: Optional[str] = typer.Option(None, help="plan database (for --plan best)")):
    """Write a plan's generated sources (one .cu per CUDA kernel, or the C file) and a README."""
    import os
    from pathlib import Path

    from search_spaces.plans import named_plan
    plans = ("heuristic", "greedy", "unfused", "best")
    if plan not in plans:
        raise CliError(f"--plan {plan!r}: use one of {', '.join(plans)}")
    if device not in ("cuda", "cpu"):
        raise CliError(f"--device {device!r}: use cuda or cpu")
    w = load(workload, dims)
    api = _api()
    if plan == "best":
        cand, _ = api.best_candidate(w, device, db)
        if cand is None:
            raise CliError(f"no cached plan for {w.name} on this {device} device; run "
                           f"`autotune search {workload} --device {device}` first")
    else:
        cand = named_plan(api.space_for(w, device), plan)
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"--out {out}: cannot create ({e.strerror or e})") from None
    dims_txt = ",".join(f"{k}={v}" for k, v in w.dims)
    lines = [f"workload {w.name}  dims {dims_txt}  dtype {w.dtype}  plan {plan}  device {device}",
             f"candidate {cand.to_json()}", ""]
    files: dict[str, str] = {}
    if device == "cuda":
        from costmodel.cuda_limits import DEFAULT_SHARED_BYTES, SHARED_OPTIN_BY_ARCH
        from .codegen_cuda import generate_cuda, kernel_source
        from .cuda_executor import precision_of
        from search_spaces.gemm import gemm_form
        from search_spaces.partition import groups
        src, kernels = generate_cuda(w, cand)
        by_anchor = {k.anchor: k for k in kernels}
        lines.append(f"library GEMMs: cuBLAS gemmStridedBatchedEx, precision {precision_of(w)}")
        lines.append("compile one kernel by hand: nvcc -std=c++17 -arch=sm_90 -c FILE.cu")
        lines.append("")
        for g in groups(w, cand.fused_pairs):
            k = by_anchor.get(g.anchor)
            if k is None:
                f = gemm_form(w.op(g.anchor))
                size = lambda idx: "x".join(str(w.op(g.anchor).extent(i)) for i in idx) or "1"
                lines.append(f"{g.anchor}: library GEMM (cuBLAS)  {w.op(g.anchor).text()}  "
                             f"batch {size(f.batch)} m {size(f.m)} n {size(f.n)} k {size(f.k)}")
                continue
            files[f"{k.name}.cu"] = kernel_source(src, k)
            notes = []
            if k.needs_opt_in:
                notes.append(f"needs the >{DEFAULT_SHARED_BYTES // 1024} KB opt-in")
            notes += [f"over the {lim // 1024} KB of {arch}"
                      for arch, lim in SHARED_OPTIN_BY_ARCH.items()
                      if arch in ("sm_80", "sm_90") and k.smem_bytes > lim]
            lines.append(f"{k.name}.cu: anchor {k.anchor}  members {', '.join(k.members)}  "
                         f"tiles {tuple(k.tiles)}  grid {k.grid}  block {k.block}  "
                         f"smem {k.smem_bytes} B  args ({', '.join(k.args)})"
                         + (f"  [{'; '.join(notes)}]" if notes else ""))
    else:
        from .codegen_c import generate
        from .executor import CFLAGS
        src, kernels = generate(w, cand)
        files["plan.c"] = src
        lines.append(f"compile by hand: cc {' '.join(CFLAGS)} plan.c -o plan.so -lm")
        lines.append("")
        loop = {k.anchor for k in kernels}
        for k in kernels:
            lines.append(f"plan.c: {k.name}(void **args)  anchor {k.anchor}  "
                         f"args ({', '.join(k.args)})")
        for s in cand.schedules:
            if s.anchor not in loop:
                lines.append(f"{s.anchor}: library GEMM (NumPy matmul / BLAS)  "
                             f"{w.op(s.anchor).text()}")
    files["README.txt"] = "\n".join(lines) + "\n"
    try:
        for name, text in files.items():
            tmp = folder / f".{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, folder / name)
    except OSError as e:
        raise CliError(f"--out {out}: cannot write ({e.strerror or e})") from None
    typer.echo(f"wrote {len(files)} files to {folder} ({len(files) - 1} source"
               f"{'s' if len(files) != 2 else ''} + README.txt)")


def main() -> None:
    """Console entry point."""
    app()


if __name__ == "__main__":
    main()
