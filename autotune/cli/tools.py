"""`autotune explain`, `calibrate` and `emit`: looking at plans without searching."""
from __future__ import annotations

import json
import warnings
from typing import Optional

import typer

from autotune.cli.common import DEFAULT_WORKLOAD, CliError, _api, app, handled, load

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
    from autotune.backends.cpu.calibrate import load_cpu_spec
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
        from autotune.report.dot import dispatch_dot
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
    """Measure this machine's GEMM rate, copy bandwidth and peak FMA rate for the cpu spec."""
    from autotune.backends.cpu.calibrate import calibrate_cpu
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
    if "f32_flops" in rec:
        typer.echo(f"peak:       {rec['f32_flops'] / 1e9:.1f} GFLOP/s  (float32 FMA chains on "
                   f"every core, best of {repeats})")
    else:
        typer.echo(f"peak:       not measured ({rec.get('f32_flops_error', '?')})")
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
    from autotune.backends.factory import backend_kind
    emitted = backend_kind(device).emit(w, cand)
    lines += emitted.notes
    files = dict(emitted.files)
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


@app.command("bench")
@handled
def bench_cmd(workload: str = typer.Argument(DEFAULT_WORKLOAD, help="built-in name or path"),
              dims: Optional[str] = typer.Option(None, help="override dims, e.g. N=256"),
              device: str = typer.Option("cpu", help="cpu or cuda"),
              peers: str = typer.Option("jax,torch,inductor,iree",
                                        help="comma-separated: jax, torch, inductor, iree "
                                             "(missing ones are reported and skipped)"),
              rounds: int = typer.Option(5, help="interleaved timing rounds"),
              fmt: str = typer.Option("table", "--format", help="table or json"),
              plot: Optional[str] = typer.Option(None, "--plot", metavar="FILE.png",
                                                 help="write the bar chart (needs matplotlib)"),
              search_budget: Optional[int] = typer.Option(
                  None, "--search-budget", help="with no plan cached, search this many trials "
                                                "first"),
              db: Optional[str] = typer.Option(None, help="plan database"),
              out: str = typer.Option("bench/results", "--out", help="folder for the JSON record"),
              greedy_timeout: float = typer.Option(60.0, "--greedy-timeout",
                                                   help="seconds the greedy plan's one run may "
                                                        "take (0: skip it)"),
              seed: int = typer.Option(1, help="seed of the inputs and of the round order")):
    """Time the cached best plan against the named plans, JAX/XLA, PyTorch, torch.compile and
    IREE on the same inputs, in one process (interleaved rounds, medians)."""
    import shlex
    import sys

    from autotune.bench.run import run_bench
    from autotune.bench.table import format_table
    if device not in ("cpu", "cuda"):
        raise CliError(f"--device {device!r}: use cpu or cuda")
    if fmt not in ("table", "json"):
        raise CliError(f"--format {fmt!r}: use table or json")
    if rounds < 1:
        raise CliError("--rounds must be at least 1")
    if search_budget is not None and search_budget < 1:
        raise CliError("--search-budget must be at least 1")
    w = load(workload, dims)
    command = shlex.join(["autotune", *sys.argv[1:]])
    result = run_bench(w, device, peers, rounds, db, search_budget,
                       greedy_timeout if greedy_timeout > 0 else None, seed, out, command,
                       log=lambda s: typer.echo(s, err=True))
    if fmt == "json":
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


@app.command("plot")
@handled
def plot_cmd(workload: str = typer.Argument(DEFAULT_WORKLOAD, help="built-in name or path"),
             dims: Optional[str] = typer.Option(None, help="override dims, e.g. N=256"),
             device: str = typer.Option("cpu", help="cpu or cuda"),
             db: Optional[str] = typer.Option(None, help="plan database"),
             results: str = typer.Option("bench/results", "--results",
                                         help="where `autotune bench` saved its JSON"),
             out: str = typer.Option(..., "--out", help="folder for the PNGs")):
    """Plot the search history, predicted vs measured (Spearman's rho) and, when a bench record
    exists, the bench bar chart."""
    from autotune.report.plots import plot_all
    if device not in ("cpu", "cuda"):
        raise CliError(f"--device {device!r}: use cpu or cuda")
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


@app.command("import-mlir")
@handled
def import_mlir_cmd(
        file: str = typer.Argument(..., metavar="FILE.mlir",
                                   help="linalg-on-tensors MLIR (a func.func of linalg ops)"),
        out: Optional[str] = typer.Option(None, "-o", "--out", metavar="FILE",
                                          help="write the workload TOML here (default: print it)"),
        function: Optional[str] = typer.Option(None, "--function",
                                               help="the function to import, when the file has "
                                                    "several public ones")):
    """Translate linalg-on-tensors MLIR into an equivalent workload (needs iree-base-compiler)."""
    from autotune.frontends.mlir.importer import MlirUnavailable, import_mlir_file, write_workload
    try:
        toml = import_mlir_file(file, function)
    except MlirUnavailable as e:
        raise CliError(str(e)) from None
    if out is None:
        typer.echo(toml, nl=False)
        return
    try:
        write_workload(toml, out)
    except OSError as e:
        raise CliError(f"-o {out}: cannot write ({e.strerror or e})") from None
    w = load(out, None)   # prints any warning (an argument the program never reads)
    typer.echo(f"wrote {out}: workload {w.name}, {len(w.inputs)} inputs, {len(w.ops)} "
               f"statements, outputs {', '.join(w.outputs)}", err=True)
