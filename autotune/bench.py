"""``autotune bench``: the tuned plan against the named plans and other frameworks, in one process.

    result = run_bench(load_workload("trimul_outgoing", {"N": 256}), peers=("jax", "iree"))
    print(format_table(result))

Contenders, all run on the same inputs (``seed``) and checked against the float64 reference
(relative L2 error within the workload's ``rtol``) before any timing; a wrong one is reported and
not timed:

* ``best``: the plan cached for (workload, device, library versions); with no cached plan, a
  search of ``search_budget`` trials runs first (and the result says so);
* ``heuristic`` and ``unfused``: the named plans;
* ``greedy`` (the 2023 IREE rule, per-element tiles): one run in a spawned subprocess under a
  timeout, reported as "timed out after X s" with its cost-model prediction when it does not end;
* peers generated from the workload's IR (:mod:`autotune.peers`): ``jax`` (XLA, ``jax.jit``,
  default precision), ``torch`` (eager), ``inductor`` (``torch.compile``) and ``iree`` (the JAX
  function lowered to StableHLO, compiled by ``iree.compiler`` for ``llvm-cpu`` or ``cuda``, run
  through ``iree.runtime``).  A peer whose framework is not installed is reported as skipped,
  with the reason; it is never fatal.

Timing is in interleaved rounds: every round runs each contender once, in a shuffled order; the
median and the minimum are reported, with ratios to XLA's median and to the floor
``max(useful flops / peak FMA rate, compulsory bytes / bandwidth)`` of the calibrated device
spec (the machine's limit; the same flops at the library GEMM rate are reported too).
The JSON record (:meth:`BenchResult.to_dict`) goes to ``out_dir`` with the command line, the
machine, the versions and every time.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import multiprocessing as mp
import os
import platform
import random
import shlex
import statistics
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from search_spaces.workload import Workload

from .peers import PeerUnavailable   # a builder raises it when its framework is missing

PEER_NAMES = ("jax", "torch", "inductor", "iree")
PLAN_NAMES = ("best", "heuristic", "unfused", "greedy")
ORDER = PLAN_NAMES + PEER_NAMES
LABELS = {"jax": "jax (XLA)", "inductor": "inductor (torch.compile)", "torch": "torch (eager)"}
DEFAULT_OUT = Path("bench") / "results"
VERSION_DISTS = ("numpy", "jax", "jaxlib", "torch", "iree-base-compiler", "iree-base-runtime",
                 "optuna", "cupy-cuda12x", "matplotlib")


class BenchError(ValueError):
    """A benchmark that cannot run at all (no plan cached and no search budget, bad peer name)."""


@dataclass(frozen=True)
class Contender:
    """One row of the benchmark."""
    name: str
    kind: str                          # "plan" | "peer"
    status: str                        # ok | wrong | failed | skipped | timed_out
    median_s: float | None = None
    min_s: float | None = None
    times_s: tuple[float, ...] = ()
    ratio_to_xla: float | None = None  # median / XLA's median
    ratio_to_floor: float | None = None
    predicted_s: float | None = None   # the cost model's prediction (plans only)
    rel_err: float | None = None
    build_s: float | None = None       # construction (compiles of plans, lowering of peers)
    first_call_s: float | None = None  # the checked run (JIT compiles of peers happen here)
    error: str = ""
    note: str = ""
    detail: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return LABELS.get(self.name, self.name)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["times_s"] = list(self.times_s)
        return d


@dataclass(frozen=True)
class BenchResult:
    """Everything one benchmark run found; ``to_dict()`` is its JSON record."""
    workload: str
    dims: dict
    dtype: str
    workload_hash: str
    device: str                        # "cpu" | "cuda"
    device_name: str
    rtol: float
    seed: int
    rounds: int
    command: str
    date: str
    machine: dict
    versions: dict
    db: str
    best_plan: dict
    search: dict | None
    reference_s: float
    floor: dict
    contenders: tuple[Contender, ...]
    json_path: str | None = None

    def contender(self, name: str) -> Contender | None:
        return next((c for c in self.contenders if c.name == name), None)

    @property
    def xla_median_s(self) -> float | None:
        c = self.contender("jax")
        return c.median_s if c is not None else None

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "contenders"}
        d["xla_median_s"] = self.xla_median_s
        d["contenders"] = {c.name: c.to_dict() for c in self.contenders}
        return d


# ---- helpers ----------------------------------------------------------------------------------
def first_line(e: BaseException) -> str:
    return (f"{type(e).__name__}: {e}".splitlines() or [type(e).__name__])[0]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def fmt_s(t: float | None) -> str:
    """Seconds with a readable unit ('-' for None)."""
    if t is None:
        return "-"
    if t >= 1:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.2f} ms"
    return f"{t * 1e6:.1f} us"


def dims_tag(w: Workload) -> str:
    """``N256-C128``: the dims in a file name."""
    return "-".join(f"{k}{v}" for k, v in w.dims)


def result_name(w: Workload, device: str) -> str:
    return f"bench-{w.name}-{dims_tag(w)}-{device}.json"


def compulsory_bytes(w: Workload) -> int:
    """Inputs read once and outputs written once."""
    item = np.dtype(w.dtype).itemsize
    return item * (sum(math.prod(s) for _, s in w.inputs)
                   + sum(math.prod(w.shapes[o]) for o in w.outputs))


def floor_of(w: Workload, spec, calibrated: bool | None = None) -> dict:
    """The roofline floor of ``w`` on a cost-model device spec: useful flops at the peak FMA
    rate (the machine's limit) or compulsory bytes at the copy bandwidth, whichever is longer.
    The same flops at the library GEMM rate are reported beside it (``gemm_floor_s``): what a
    plan whose every flop ran in BLAS would take."""
    flops = w.flops()
    nbytes = compulsory_bytes(w)
    compute = flops / spec.f32_flops
    memory = nbytes / spec.bandwidth
    return {"useful_flops": flops, "compulsory_bytes": nbytes, "peak_flops": spec.f32_flops,
            "gemm_flops": spec.gemm_flops, "bandwidth": spec.bandwidth, "compute_s": compute,
            "memory_s": memory, "floor_s": max(compute, memory),
            "gemm_floor_s": max(flops / spec.gemm_flops, memory),
            "bound": "compute" if compute >= memory else "memory",
            "spec": spec.name, "calibrated": calibrated}


# ---- runners ----------------------------------------------------------------------------------
@dataclass
class Runner:
    """A contender ready to run: ``call()`` runs once (synchronised) and returns its outputs;
    ``to_host`` turns them into ``{name: ndarray}`` for the check."""
    call: Callable[[], Any]
    to_host: Callable[[Any], dict]
    detail: dict = field(default_factory=dict)


@dataclass
class Context:
    """What a runner builder gets."""
    w: Workload
    inputs: dict                 # host NumPy arrays
    kind: str                    # "cpu" | "cuda"
    cache_root: Path
    compute_capability: str = ""


def _np_outputs(outs) -> dict:
    return {k: np.asarray(v) for k, v in outs.items()}


def plan_runner(ctx: Context, cand) -> Runner:
    """A plan of ours: the C/OpenMP executor, or the CUDA one (inputs uploaded once)."""
    from .api import make_executable
    plan = make_executable(ctx.w, cand, ctx.kind, ctx.cache_root)
    if ctx.kind == "cpu":
        inputs = ctx.inputs
        return Runner(lambda: plan(**inputs), _np_outputs)
    dev = plan.upload(ctx.inputs)

    def call():
        outs = plan.run_device(**dev)
        plan.rt.synchronize()
        return outs
    return Runner(call, lambda outs: {k: plan.rt.to_host(v) for k, v in outs.items()})


def _import_jax():
    try:
        import jax
    except Exception as e:
        raise PeerUnavailable(f"JAX is not installed ({first_line(e)}); install it with "
                              f"`pip install 'jax[cpu]'`") from None
    return jax


def _x64(jax, w: Workload):
    import contextlib
    return jax.enable_x64(True) if w.dtype == "float64" else contextlib.nullcontext()


def jax_runner(ctx: Context) -> Runner:
    """XLA through ``jax.jit`` at default precision; inputs placed on the device once."""
    jax = _import_jax()
    from .peers import jax_function
    fn = jax_function(ctx.w, "default")
    jdev = jax.devices("gpu" if ctx.kind == "cuda" else "cpu")[0]
    with _x64(jax, ctx.w):
        jin = {k: jax.device_put(v, jdev) for k, v in ctx.inputs.items()}
    return Runner(lambda: jax.block_until_ready(fn(**jin)), _np_outputs,
                  {"precision": "default", "device": str(jdev)})


def _torch_runner(ctx: Context, compile: bool) -> Runner:
    try:
        import torch
    except Exception as e:
        raise PeerUnavailable(f"PyTorch is not installed ({first_line(e)}); install it with "
                              f"`pip install torch`") from None
    from .peers import torch_function
    fn = torch_function(ctx.w, compile=compile)
    tdev = "cuda" if ctx.kind == "cuda" else "cpu"
    tin = {k: torch.as_tensor(v).to(tdev) for k, v in ctx.inputs.items()}
    sync = torch.cuda.synchronize if tdev == "cuda" else (lambda: None)

    def call():
        outs = fn(**tin)
        sync()
        return outs
    return Runner(call, lambda outs: {k: v.detach().cpu().numpy() for k, v in outs.items()},
                  {"torch": torch.__version__, "device": tdev, "compile": compile})


def torch_runner(ctx: Context) -> Runner:
    """PyTorch eager."""
    return _torch_runner(ctx, compile=False)


def inductor_runner(ctx: Context) -> Runner:
    """``torch.compile`` (TorchInductor); compiled on the checked call."""
    return _torch_runner(ctx, compile=True)


def stablehlo_text(w: Workload) -> str:
    """The workload's JAX peer lowered to StableHLO: ``main(*inputs in declaration order)``
    returning the outputs in declaration order."""
    jax = _import_jax()
    from .peers import jax_function
    fn = jax_function(w, "default")
    jitted = getattr(fn, "jitted", fn)
    names, outs = w.input_names, w.outputs

    def positional(*xs):
        r = jitted(**dict(zip(names, xs)))
        return tuple(r[o] for o in outs)
    positional.__name__ = f"{w.name}_peer"
    specs = [jax.ShapeDtypeStruct(shape, np.dtype(w.dtype)) for _, shape in w.inputs]
    with _x64(jax, w):
        lowered = jax.jit(positional).lower(*specs)
        try:
            return str(lowered.compiler_ir("stablehlo"))
        except Exception:
            return lowered.as_text()


def iree_runner(ctx: Context) -> Runner:
    """IREE: StableHLO from JAX, compiled for llvm-cpu (host CPU) or cuda, run by iree.runtime
    on inputs placed on its device once."""
    try:
        import iree.compiler as ireec
        import iree.runtime as ireert
    except Exception as e:
        raise PeerUnavailable(f"IREE is not installed ({first_line(e)}); install it with "
                              f"`pip install iree-base-compiler iree-base-runtime`") from None
    text = stablehlo_text(ctx.w)
    if ctx.kind == "cuda":
        target, driver = "cuda", "cuda"
        cc = ctx.compute_capability.replace(".", "")
        extra = [f"--iree-cuda-target=sm_{cc}"] if cc else []
    else:
        target, driver = "llvm-cpu", "local-task"
        extra = ["--iree-llvmcpu-target-cpu=host"]
    vmfb = ireec.compile_str(text, target_backends=[target], input_type="stablehlo",
                             extra_args=extra)
    config = ireert.Config(driver)
    sysctx = ireert.SystemContext(config=config)
    vm_module = ireert.VmModule.copy_buffer(sysctx.instance, vmfb)
    sysctx.add_vm_module(vm_module)
    main = sysctx.modules[vm_module.name]["main"]
    args = [ireert.asdevicearray(config.device, np.ascontiguousarray(ctx.inputs[n]))
            for n in ctx.w.input_names]
    outs = ctx.w.outputs

    def call():
        r = main(*args)
        r = tuple(r) if isinstance(r, (tuple, list)) else (r,)
        return dict(zip(outs, r))

    def to_host(res):
        return {k: (v.to_host() if hasattr(v, "to_host") else np.asarray(v))
                for k, v in res.items()}
    return Runner(call, to_host, {"target": target, "driver": driver, "flags": extra,
                                  "module": vm_module.name, "vmfb_bytes": len(vmfb)})


PEER_BUILDERS: dict[str, Callable[[Context], Runner]] = {
    "jax": jax_runner, "torch": torch_runner, "inductor": inductor_runner, "iree": iree_runner}


# ---- the greedy plan, in a spawned subprocess ---------------------------------------------------
def _greedy_child(spec: str, dims: dict, seed: int, kind: str, cache_dir: str, out_dir: str,
                  conn) -> None:
    """Compile and run the greedy plan once; report through ``conn``; outputs to ``out_dir``."""
    try:
        from autotune.api import make_executable, space_for
        from search_spaces import load_workload
        from search_spaces.plans import named_plan
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            w = load_workload(spec, dims)
        inputs = w.random_inputs(seed=seed)
        t0 = time.perf_counter()
        fn = make_executable(w, named_plan(space_for(w, kind), "greedy"), kind, Path(cache_dir))
        conn.send(("compiled", time.perf_counter() - t0))
        t0 = time.perf_counter()
        outs = fn(**inputs)
        elapsed = time.perf_counter() - t0
        np.savez(os.path.join(out_dir, "greedy.npz"), **outs)
        conn.send(("done", elapsed))
    except BaseException as e:  # reported to the parent
        conn.send(("error", first_line(e)))


def run_greedy(w: Workload, seed: int, kind: str, cache_dir: Path, timeout_s: float, ref,
               compile_timeout_s: float = 600.0) -> dict:
    """One run of the greedy plan in a spawned process: its time, or that it timed out."""
    from .measure import verify
    spec = w.source.removeprefix("builtin:")
    if not spec:
        return {"status": "skipped", "error": "the workload has no source a subprocess can load"}
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="greedy-") as tmp:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_greedy_child,
                           args=(spec, w.dim_dict, seed, kind, str(cache_dir), tmp, child),
                           daemon=True)
        proc.start()
        child.close()
        res: dict = {"status": "failed", "timeout_s": timeout_s}
        try:
            if not parent.poll(compile_timeout_s):
                res["error"] = f"no compiled plan after {compile_timeout_s:g} s"
                return res
            msg = parent.recv()
            if msg[0] == "error":
                res["error"] = msg[1]
                return res
            res["build_s"] = msg[1]
            if not parent.poll(timeout_s):
                res["status"] = "timed_out"
                return res
            msg = parent.recv()
            if msg[0] == "error":
                res["error"] = msg[1]
                return res
            res["time_s"] = msg[1]
            with np.load(os.path.join(tmp, "greedy.npz")) as z:
                err, why = verify({k: z[k] for k in z.files}, ref, w.rtol)
            res["rel_err"] = err
            res["status"] = "wrong" if why else "ok"
            if why:
                res["error"] = why
            return res
        except EOFError:
            res["error"] = f"the subprocess died (exit code {proc.exitcode})"
            return res
        finally:
            if proc.is_alive():
                proc.kill()
            proc.join(10)
            parent.close()


# ---- the benchmark ------------------------------------------------------------------------------
def _parse_peers(peers) -> tuple[str, ...]:
    if isinstance(peers, str):
        peers = [p for p in (s.strip() for s in peers.split(",")) if p]
    peers = tuple(dict.fromkeys(peers))
    bad = [p for p in peers if p not in PEER_NAMES]
    if bad:
        raise BenchError(f"unknown peer {bad[0]!r}: choose from {', '.join(PEER_NAMES)}")
    return peers


def _device_spec(env) -> tuple[Any, bool | None]:
    """The cost-model device and whether it is calibrated (None for GPU presets)."""
    from .backends import device_spec
    if env.kind != "cpu":
        return device_spec(env), None
    from .calibrate import CalibrationWarning, calibration_path
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CalibrationWarning)
        spec = device_spec(env)
    ok = calibration_path().exists() and not any(
        issubclass(c.category, CalibrationWarning) for c in caught)
    return spec, ok


def run_bench(w: Workload, device: str = "cpu", peers=PEER_NAMES, rounds: int = 5, db=None,
              search_budget: int | None = None, greedy_timeout_s: float | None = 60.0,
              seed: int = 1, out_dir: str | os.PathLike | None = DEFAULT_OUT,
              command: str | None = None, log: Callable[[str], None] | None = None
              ) -> BenchResult:
    """Benchmark ``w`` on ``device`` (see the module doc).  ``greedy_timeout_s=None`` skips the
    greedy plan; ``out_dir=None`` writes no JSON; ``log`` receives progress lines."""
    from costmodel import estimate
    from db.store import default_db_path
    from search_spaces.plans import named_plan

    from . import __version__
    from .api import best_candidate, cache_root, run_search, space_for
    from .backends import resolve
    from .measure import verify
    from .reference import reference
    from .report import plan_summary

    say = log or (lambda s: None)
    peers = _parse_peers(peers)
    if rounds < 1:
        raise BenchError("rounds must be at least 1")
    if device == "cuda":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU
    env = resolve(device)
    spec, calibrated = _device_spec(env)
    db_path = Path(db).expanduser() if db is not None else default_db_path()
    dims_txt = ",".join(f"{k}={v}" for k, v in w.dims)
    say(f"{w.name}  dims {dims_txt}  dtype {w.dtype}  on {env.name} ({env.cores} "
        f"{'cores' if env.kind == 'cpu' else 'SMs'});  plan database {db_path}")

    # -- the cached best plan (searching first when asked to) --------------------------------
    cand, row = best_candidate(w, device, db_path) if db_path.exists() else (None, None)
    searched = None
    if cand is None:
        if not search_budget:
            raise BenchError(
                f"no plan cached for {w.name} ({dims_txt}) on this {env.kind} in {db_path}; "
                f"run `autotune search {w.source.removeprefix('builtin:') or w.name} --dims "
                f"{dims_txt} --device {device} --db {db_path}` first, or pass --search-budget N")
        from .search import SearchConfig
        say(f"no plan cached: searching {search_budget} trials first ...")
        t0 = time.perf_counter()

        def on_trial(p):
            if p.done % 5 == 0 or p.done == search_budget:
                say(f"  trial {p.done}/{search_budget}: best {fmt_s(p.best_s)} "
                    f"({p.best_name or '-'}); {p.pruned} pruned, {p.failed} failed")
        res = run_search(w, device, db_path, SearchConfig(budget=search_budget),
                         on_trial=on_trial)
        p = res.progress
        searched = {"budget": search_budget, "wall_s": time.perf_counter() - t0,
                    "measured": p.measured, "pruned": p.pruned, "failed": p.failed}
        cand, row = best_candidate(w, device, db_path)
        if cand is None:
            raise BenchError(f"the search of {search_budget} trials found no verified plan "
                             f"for {w.name}")
        say(f"searched {search_budget} trials in {searched['wall_s']:.1f} s: best "
            f"{fmt_s(row['measured_s'])} in the search")

    inputs = w.random_inputs(seed=seed)
    t0 = time.perf_counter()
    ref = reference(w, inputs)
    ref_s = time.perf_counter() - t0
    say(f"float64 reference: {ref_s:.2f} s")

    root = cache_root(db_path)
    space = space_for(w, env.kind)
    plans = {"best": cand, "heuristic": named_plan(space, "heuristic"),
             "unfused": named_plan(space, "unfused")}
    greedy = named_plan(space, "greedy")
    predicted = {k: estimate(w, c, spec).total_s for k, c in {**plans, "greedy": greedy}.items()}
    ctx = Context(w, inputs, env.kind, root, env.compute_capability)

    rows: dict[str, dict] = {}
    runners: dict[str, Runner] = {}

    def build(name: str, kind: str, make) -> None:
        info = rows[name] = {"kind": kind, "detail": {}}
        try:
            t0 = time.perf_counter()
            runners[name] = make()
            info["build_s"] = time.perf_counter() - t0
            info["detail"] = dict(runners[name].detail)
        except PeerUnavailable as e:
            info.update(status="skipped", error=str(e))
            say(f"{name}: skipped ({e})")
        except Exception as e:
            info.update(status="failed", error=first_line(e))
            say(f"{name}: FAILED to build: {info['error']}")

    for name, c in plans.items():
        build(name, "plan", lambda c=c: plan_runner(ctx, c))
        rows[name]["predicted_s"] = predicted[name]
        if name != "best" and c.key == cand.key:
            rows[name]["note"] = "the same plan as best"
    for name in peers:
        build(name, "peer", lambda name=name: PEER_BUILDERS[name](ctx))

    # -- every contender's outputs against the reference, before any timing -------------------
    for name in list(runners):
        r, info = runners[name], rows[name]
        try:
            t0 = time.perf_counter()
            outs = r.call()
            info["first_call_s"] = time.perf_counter() - t0
            err, why = verify(r.to_host(outs), ref, w.rtol)
            del outs
            r.call()                            # one more untimed warm-up run
        except Exception as e:
            info.update(status="failed", error=first_line(e))
            say(f"{name}: FAILED: {info['error']}")
            del runners[name]
            continue
        info["rel_err"] = err
        if why:
            info.update(status="wrong", error=why)
            say(f"{name}: WRONG ({why}); not timed")
            del runners[name]
            continue
        info["status"] = "ok"
        say(f"{name}: rel err {err:.2g}  (first call {fmt_s(info['first_call_s'])})")

    # -- interleaved rounds --------------------------------------------------------------------
    times: dict[str, list[float]] = {n: [] for n in runners}
    rng = random.Random(seed)
    for k in range(rounds):
        order = list(runners)
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            out = runners[name].call()
            times[name].append(time.perf_counter() - t0)
            del out
        say(f"round {k + 1}/{rounds}: " + "  ".join(f"{n} {fmt_s(times[n][-1])}" for n in order))
    runners.clear()

    # -- the greedy plan: once, in a subprocess, after the rounds (no contention) -------------
    if greedy_timeout_s is None:
        rows["greedy"] = {"kind": "plan", "status": "skipped", "error": "not asked for"}
    else:
        say(f"greedy: one run in a subprocess (timeout {greedy_timeout_s:g} s) ...")
        g = run_greedy(w, seed, env.kind, root, greedy_timeout_s, ref)
        rows["greedy"] = {"kind": "plan", **{k: v for k, v in g.items()
                                             if k not in ("time_s", "timeout_s")}}
        if g["status"] in ("ok", "wrong") and "time_s" in g:
            rows["greedy"]["note"] = "one run"
            if g["status"] == "ok":
                times["greedy"] = [g["time_s"]]
        elif g["status"] == "timed_out":
            rows["greedy"]["note"] = (f"timed out after {greedy_timeout_s:g} s (one run; "
                                      f"compiled in {g['build_s']:.1f} s)")
            rows["greedy"]["detail"] = {"timeout_s": greedy_timeout_s}
    rows["greedy"]["predicted_s"] = predicted["greedy"]

    # -- ratios, the floor ------------------------------------------------------------------------
    floor = floor_of(w, spec, calibrated)
    xla = statistics.median(times["jax"]) if times.get("jax") else None
    contenders = []
    for name in ORDER:
        if name not in rows:
            continue
        info = rows[name]
        ts = times.get(name, [])
        med = statistics.median(ts) if ts else None
        contenders.append(Contender(
            name=name, kind=info["kind"], status=info.get("status", "failed"),
            median_s=med, min_s=min(ts) if ts else None, times_s=tuple(ts),
            ratio_to_xla=med / xla if (med is not None and xla) else None,
            ratio_to_floor=med / floor["floor_s"] if med is not None else None,
            predicted_s=info.get("predicted_s"), rel_err=info.get("rel_err"),
            build_s=info.get("build_s"), first_call_s=info.get("first_call_s"),
            error=info.get("error", ""), note=info.get("note", ""),
            detail=info.get("detail", {})))

    if command is None:
        command = shlex.join([sys.executable, *sys.argv])
    best_plan = {"plan_key": row["plan_key"], "study": row.get("study"),
                 "trial_number": row.get("trial_number"),
                 "measured_s_in_search": row.get("measured_s"),
                 "predicted_s": row.get("predicted_s"), "summary": plan_summary(cand),
                 "candidate": json.loads(row["candidate_json"])}
    path = Path(out_dir) / result_name(w, env.kind) if out_dir is not None else None
    result = BenchResult(
        workload=w.name, dims=dict(w.dims), dtype=w.dtype, workload_hash=w.hash,
        device=env.kind, device_name=env.name, rtol=w.rtol, seed=seed, rounds=rounds,
        command=command,
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        machine={"device": env.name, "cores": env.cores, "platform": platform.platform(),
                 "python": platform.python_version(), "cc": env.library_dict().get("cc", ""),
                 **({"compute_capability": env.compute_capability, "driver": env.driver,
                     "cuda_runtime": env.cuda_runtime} if env.kind == "cuda" else {})},
        versions={"autotune": __version__, **{d: _version(d) for d in VERSION_DISTS}},
        db=str(db_path), best_plan=best_plan, search=searched, reference_s=ref_s,
        floor=floor, contenders=tuple(contenders), json_path=str(path) if path else None)
    if path is not None:
        save_result(result, path)
        say(f"wrote {path}")
    return result


def save_result(result: BenchResult, path: str | os.PathLike) -> Path:
    """Write the JSON record (atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=2, default=float) + "\n")
    os.replace(tmp, path)
    return path


def load_result(path: str | os.PathLike) -> dict:
    """A saved record, as the dict :meth:`BenchResult.to_dict` made."""
    return json.loads(Path(path).read_text())


# ---- the table --------------------------------------------------------------------------------
def _rows(result) -> tuple[dict, list[dict]]:
    d = result.to_dict() if isinstance(result, BenchResult) else result
    return d, [d["contenders"][n] for n in ORDER if n in d["contenders"]]


def format_table(result) -> str:
    """The human-readable table of a BenchResult (or its saved dict)."""
    d, rows = _rows(result)
    fl = d["floor"]
    dims = ",".join(f"{k}={v}" for k, v in d["dims"].items())
    lines = [f"{d['workload']}  dims {dims}  {d['dtype']}  on {d['device_name']}  "
             f"({d['rounds']} interleaved rounds, median)"]
    if d.get("search"):
        s = d["search"]
        lines.append(f"no plan was cached: searched {s['budget']} trials first ({s['measured']} "
                     f"measured, {s['pruned']} pruned, {s['failed']} failed; "
                     f"{s['wall_s']:.0f} s)")
    lines.append(f"{'contender':<25} {'median':>10} {'min':>10} {'vs XLA':>7} {'vs floor':>8} "
                 f"{'predicted':>10}  note")
    for c in rows:
        label = LABELS.get(c["name"], c["name"])
        pred = fmt_s(c.get("predicted_s"))
        if c["median_s"] is not None:
            rx = f"{c['ratio_to_xla']:.2f}x" if c.get("ratio_to_xla") else "-"
            rf = f"{c['ratio_to_floor']:.1f}x" if c.get("ratio_to_floor") else "-"
            note = "; ".join(filter(None, [c.get("note"), f"rel err {c['rel_err']:.2g}"
                                           if c.get("rel_err") is not None else ""]))
            mn = fmt_s(c["min_s"]) if len(c["times_s"]) > 1 else "-"
            lines.append(f"{label:<25} {fmt_s(c['median_s']):>10} {mn:>10} {rx:>7} {rf:>8} "
                         f"{pred:>10}  {note}")
        elif c["status"] == "timed_out":
            t = c.get("detail", {}).get("timeout_s")
            med = "> " + fmt_s(t) if t else "-"
            lines.append(f"{label:<25} {med:>10} {'-':>10} {'-':>7} {'-':>8} {pred:>10}  "
                         f"{c.get('note', 'timed out')}")
        else:
            why = {"wrong": "WRONG, not timed", "skipped": "skipped", "failed": "FAILED"}.get(
                c["status"], c["status"])
            lines.append(f"{label:<25} {'-':>10} {'-':>10} {'-':>7} {'-':>8} {pred:>10}  "
                         f"{why}: {c.get('error', '')}")
    cal = {True: "calibrated", False: "NOT calibrated: run `autotune calibrate`",
           None: "datasheet"}[fl.get("calibrated")]
    peak = fl.get("peak_flops")
    if peak:     # results written before the peak rate was measured lack it
        lines.append(f"floor {fmt_s(fl['floor_s'])} ({fl['bound']}-bound) = max("
                     f"{fl['useful_flops']:.4g} useful flops / {peak / 1e9:.1f} GFLOP/s peak = "
                     f"{fmt_s(fl['compute_s'])}, {fl['compulsory_bytes']:.4g} bytes / "
                     f"{fl['bandwidth'] / 1e9:.1f} GB/s = {fmt_s(fl['memory_s'])}) "
                     f"[{fl['spec']}, {cal}]")
        lines.append(f"  at the library GEMM rate ({fl['gemm_flops'] / 1e9:.1f} GFLOP/s) the "
                     f"same flops take {fmt_s(fl['gemm_floor_s'])}")
    else:
        lines.append(f"floor {fmt_s(fl['floor_s'])} ({fl['bound']}-bound) = max("
                     f"{fl['useful_flops']:.4g} useful flops / {fl['gemm_flops'] / 1e9:.1f} "
                     f"GFLOP/s = {fmt_s(fl['compute_s'])}, {fl['compulsory_bytes']:.4g} bytes / "
                     f"{fl['bandwidth'] / 1e9:.1f} GB/s = {fmt_s(fl['memory_s'])}) "
                     f"[{fl['spec']}, {cal}]")
    bp = d.get("best_plan") or {}
    if bp.get("summary"):
        lines.append(f"best plan: {bp['summary']}")
    return "\n".join(lines)
