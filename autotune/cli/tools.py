"""`autotune explain`, `calibrate` and `emit`: looking at plans without searching."""
from __future__ import annotations

import dataclasses

import json
from typing import Annotated, Optional

import typer

from autotune.backends.cpu.kernel_probe import DEFAULT_SAMPLES
from autotune.cli.common import (DEFAULT_WORKLOAD, CliError, Db, Dims, Format, RunDevice,
                                 WorkloadArg, _api, choice, handled, load)
from autotune.report.units import fmt_s

EXPLAIN_PLANS = ("unfused", "greedy", "heuristic", "chained", "best")
EXPLAIN_DEVICES = ("h200", "h100", "a100", "cpu")


def _cost_model_device(device: str):
    """A cost-model device: a datasheet preset, or the calibrated cpu spec (its warnings shown
    as one line each)."""
    import costmodel
    if device != "cpu":
        return costmodel.preset(device)
    from autotune.backends.cpu.calibrate import cpu_spec_status
    spec, _, notes = cpu_spec_status()
    for note in notes:
        typer.echo(f"autotune: warning: {note}", err=True)
    return spec


def _cached_best(w, workload: str, device: str, db, preset: str = ""):
    """The cached best plan of ``w`` for the run device ``device`` (cpu or cuda) in ``db``;
    ``preset``: the cost-model device the user named, for the error where no GPU is here."""
    from autotune.environment import NoGPUError
    try:
        cand, _ = _api().best_candidate(w, device, db)
    except NoGPUError as e:
        # the plan cached for a GPU is keyed by that GPU, which must be here to be named
        why = str(e).split(": ", 1)[-1].split("; use --device cpu")[0]
        raise CliError(f"--plan best --device {preset}: the cached best plan for a GPU is "
                       f"looked up by this machine's GPU, and there is {why}; `--device cpu` "
                       f"explains the plan cached for this CPU") from None
    if cand is None:
        raise CliError(f"no cached plan for {w.name} on this {device} device; run "
                       f"`autotune search {workload} --device {device}` first")
    return cand


@handled
def explain(workload: WorkloadArg = DEFAULT_WORKLOAD,
            dims: Dims = None,
            plan: Annotated[str, choice("--plan", EXPLAIN_PLANS,
                                        "a named plan, or best: the cached best plan in --db "
                                        "for the device (cpu, or cuda for a GPU preset)")
                            ] = "heuristic",
            device: Annotated[str, choice("--device", EXPLAIN_DEVICES,
                                          "a datasheet preset, or cpu (calibrated)")] = "h200",
            fmt: Format = "table",
            dot: Optional[str] = typer.Option(None, "--dot", metavar="FILE",
                                              help="write the dispatch graph as Graphviz DOT"),
            db: Db = None):
    """Predict a plan's time group by group, and show why (recompute, bytes, bound)."""
    import costmodel
    from search_spaces.plans import chained_plan, named_plan
    from search_spaces.space import SearchSpace

    from search_spaces.orders import describe
    from search_spaces.rewrite import rewritten
    from search_spaces.trees import tree_text

    spec = _cost_model_device(device)
    w = load(workload, dims)
    space = SearchSpace(w)
    if plan == "best":
        cand = _cached_best(w, workload, "cpu" if device == "cpu" else "cuda", db, device)
    else:
        cand = chained_plan(space) if plan == "chained" else named_plan(space, plan)
    est = costmodel.estimate(w, cand, spec)
    chosen = dict(cand.orders)
    orders = [(ch, chosen.get(stmt)) for stmt, ch in sorted(space.order_choices.items())]
    rw = rewritten(w, cand)           # the groups' anchors are ops of the rewritten workload
    if dot:
        from autotune.report.dot import dispatch_dot
        try:
            with open(dot, "w") as f:
                f.write(dispatch_dot(w, cand, f"{w.name} - {plan} plan on {device}: "
                                              f"{fmt_s(est.total_s, 3)} predicted"))
        except OSError as e:
            raise CliError(f"--dot {dot}: cannot write ({e.strerror or e})") from None
    if fmt == "json":
        d = est.to_dict()
        d["plan"] = plan
        d["inlined"] = list(cand.inlined)
        d["orders"] = [{"statement": ch.stmt, "order": tree_text(t) if t is not None else "none",
                        "text": describe(ch, t, w.dtype), "rank": ch.rank(t) if t else None,
                        "offered": [tree_text(o.tree) for o in ch.orders],
                        "unsplit_flops": ch.unsplit_flops} for ch, t in orders]
        for g, gd in zip(est.groups, d["groups"]):
            op = rw.op(g.anchor)
            gd["domain"] = {"parallel": dict(zip(op.parallel, op.out_shape)),
                            "reduction": {r: op.extent(r) for r in op.reduction}}
            if g.impl == "kernel" and spec.kind == "cpu":
                p, gathered = _kernel_facts(rw, cand, g.anchor)
                gd["kernel"] = {"params": dataclasses.asdict(p) if p else None,
                                "gathered": list(gathered)}
        typer.echo(json.dumps(d, indent=2))
        return
    typer.echo(f"workload {w.name}  dims: " + ", ".join(f"{k}={v}" for k, v in w.dims)
               + f"  plan: {plan}  device: {spec.name}")
    for ch, t in orders:
        typer.echo(f"order: {describe(ch, t, w.dtype)}")
    if cand.inlined:
        typer.echo(f"inlined: {', '.join(cand.inlined)} (recomputed in each consumer, "
                   f"never stored)")
    for k, g in enumerate(est.groups):
        op = rw.op(g.anchor)
        dom = ", ".join(f"{i}:{e}" for i, e in zip(op.parallel, op.out_shape))
        red = ", ".join(f"{r}:{op.extent(r)}" for r in op.reduction)
        tiles = "(" + ",".join(str(t) for t in g.tiles) + ")" if g.tiles else "-"
        prec = next((f" ({s.precision})" for s in cand.schedules
                     if s.anchor == g.anchor and s.precision), "")
        typer.echo(f"group {k}: anchor {g.anchor}  impl {g.impl}{prec}  tiles {tiles}  "
                   f"predicted {fmt_s(g.predicted_s, 3)} ({g.bound}-bound)")
        typer.echo(f"  ops:    {', '.join(g.ops)}")
        if g.chain:
            typer.echo(f"  chain:  {g.chain}")
        typer.echo(f"  domain: {dom}" + (f" | reduce {red}" if red else ""))
        if g.impl == "kernel" and spec.kind == "cpu":
            p, gathered = _kernel_facts(rw, cand, g.anchor)
            typer.echo("  kernel: " + (f"{p.mr}x{p.nr} tiles, MC {p.mc}, KC {p.kc}, NC {p.nc}, "
                                       f"outer {p.outer}" if p else "default parameters")
                       + (f"; {', '.join(gathered)} packed through offset tables (no copy)"
                          if gathered else ""))
        if g.fused:
            typer.echo("  fused:  " + ", ".join(f"{f.producer} x{f.recompute_factor:g}"
                                                 for f in g.fused))
        typer.echo(f"  flops:  {g.flops:.3e} (useful {g.flops - g.recomputed_flops:.3e}, "
                   f"recomputed {g.recomputed_flops:.3e}; transcendentals "
                   f"{g.transcendentals:.3e})")
        typer.echo(f"  bytes:  {g.bytes:.3e} (unique {g.unique_bytes:.3e})  "
                   f"launches {g.launches}")
    launches = sum(g.launches for g in est.groups)
    typer.echo(f"total: {fmt_s(est.total_s, 3)} predicted  groups {len(est.groups)}  "
               f"launches {launches}  flops {est.flops:.3e} (useful "
               f"{est.flops - est.recomputed_flops:.3e}, recomputed {est.recomputed_flops:.3e})"
               f"  bytes {est.bytes:.3e}")


def _kernel_facts(w, cand, anchor: str):
    """A CPU kernel group's parameters (None: a hand-written candidate's defaults) and the
    tensors it packs through offset tables."""
    from search_spaces.kernel_fusion import kernel_parts
    from search_spaces.kernel_reads import gathered_tensors
    layout_of = lambda t: cand.layout(t, len(w.shapes[t]))
    return (cand.schedule(anchor).kernel,
            gathered_tensors(w, layout_of, kernel_parts(w, cand.fused_pairs, anchor)))


@handled
def calibrate(device: str = typer.Option("cpu", help="cpu (every term) or cuda (the GPU's "
                                                      "rates over its datasheet preset)"),
              gemm_n: int = typer.Option(2048, "--gemm-n", min=16,
                                         help="GEMM size measured (n x n float32)"),
              copy_mb: float = typer.Option(256.0, "--copy-mb", min=0.001,
                                            help="MB per array in the bandwidth tests"),
              repeats: int = typer.Option(3, min=1, help="at least this many runs per probe (the "
                                                           "best counts)"),
              kernel_samples: int = typer.Option(
                  DEFAULT_SAMPLES, "--kernel-samples", min=0,
                  help="random configurations of the generated kernel timed per shape class "
                       "(0: its terms are not measured)")):
    """Measure every term of this machine's cpu cost model (GEMM rates by shape class,
    bandwidth by access pattern, peak FMA rate, transcendental costs, launch overheads), or
    with --device cuda the GPU's copy bandwidth, SGEMM and TF32 rates, the generated
    tensor-core kernel's share and the launch cost."""
    from autotune.backends.cpu.calibrate import calibrate_cpu
    from autotune.backends.cpu.calibration_terms import report_lines
    if device == "cuda":
        _calibrate_cuda()
        return
    if device != "cpu":
        raise CliError(f"--device {device!r}: use cpu or cuda")
    try:
        rec, path = calibrate_cpu(gemm_n, copy_mb, repeats, kernel_samples=kernel_samples)
    except OSError as e:
        raise CliError(f"cannot store the calibration: {e}") from None
    for line in report_lines(rec):
        typer.echo(line)
    typer.echo(f"wrote {path}")


def _calibrate_cuda() -> None:
    from autotune.backends.cuda.calibrate import calibrate_cuda
    from autotune.backends.cuda.kind import CudaBackendKind
    from autotune.backends.cuda.runtime import CupyRuntime
    from autotune.environment import NoGPUError, detect_cuda
    try:
        env = detect_cuda()
    except NoGPUError as e:
        raise CliError(str(e)) from None
    base = CudaBackendKind.preset_for(env.name)
    try:
        rec, path = calibrate_cuda(CupyRuntime(), env.name, base)
    except OSError as e:
        raise CliError(f"cannot store the calibration: {e}") from None
    typer.echo(f"{env.name} (over the {base.name} preset):")
    typer.echo(f"  copy bandwidth   {rec['bandwidth'] / 1e9:8.0f} GB/s   "
               f"(preset {base.bandwidth / 1e9:.0f})")
    typer.echo(f"  SGEMM            {rec['gemm_flops'] / 1e12:8.1f} TFLOP/s (preset "
               f"{base.gemm_flops / 1e12:.1f})")
    typer.echo(f"  TF32 share       {rec['tensor_share']:8.3f}   (preset {base.tensor_share})")
    typer.echo(f"  kernel's share   {rec['mma_share']:8.3f}   (preset {base.mma_share})")
    typer.echo(f"  launch           {rec['launch_s'] * 1e6:8.1f} us  (preset "
               f"{base.launch_s * 1e6:.1f})")
    typer.echo(f"wrote {path}")


@handled
def emit(workload: WorkloadArg = DEFAULT_WORKLOAD,
         dims: Dims = None,
         plan: str = typer.Option("heuristic", help="heuristic, greedy, unfused, chained or best "
                                                    "(the cached best for this device in --db)"),
         device: RunDevice = "cuda",
         out: str = typer.Option(..., "--out", help="folder for the sources and README.txt"),
         db: Db = None):
    """Write a plan's generated sources (one .cu per CUDA kernel, or the C file) and a README."""
    import os
    from pathlib import Path

    from search_spaces.plans import chained_plan, named_plan
    plans = ("heuristic", "greedy", "unfused", "chained", "best")
    if plan not in plans:
        raise CliError(f"--plan {plan!r}: use one of {', '.join(plans)}")
    if device not in ("cuda", "cpu"):
        raise CliError(f"--device {device!r}: use cuda or cpu")
    w = load(workload, dims)
    api = _api()
    if plan == "best":
        cand = _cached_best(w, workload, device, db)
    elif plan == "chained":
        cand = chained_plan(api.space_for(w, device))
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


def register(app: typer.Typer) -> None:
    """Add `explain`, `calibrate` and `emit` to the app."""
    app.command()(explain)
    app.command()(calibrate)
    app.command()(emit)
