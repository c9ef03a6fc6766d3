"""The contenders of a benchmark, ready to run: our plans (C/OpenMP or CUDA), the peers built
from the workload's IR (JAX/XLA, torch eager, torch.compile, IREE), and the greedy plan, which
may run for minutes, once in a spawned subprocess under a timeout."""
from __future__ import annotations

import multiprocessing as mp
import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from db.records import Status
from search_spaces.workload import Workload

from autotune.backends.base import first_line   # the bench modules import it from here too
from autotune.bench.peers import PeerUnavailable   # a builder raises it when its framework is missing


# ---- runners ----------------------------------------------------------------------------------
@dataclass
class Runner:
    """A contender ready to run: ``call()`` runs once (synchronised) and returns its outputs;
    ``to_host`` turns them into ``{name: ndarray}`` for the check.  A contender that runs
    elsewhere (a peer in a process of its own: :mod:`autotune.bench.isolated`) times itself
    there (``timed``) and is shut down by ``close``."""
    call: Callable[[], Any]
    to_host: Callable[[Any], dict]
    detail: dict = field(default_factory=dict)
    timed: Callable[[int, float | None], float] | None = None
    close: Callable[[], None] = lambda: None

    def seconds_per_call(self, n: int, warm_s: float | None = None) -> float:
        """Mean seconds of ``n`` calls back to back, after untimed calls for ``warm_s`` seconds
        when it is not None (:func:`autotune.backends.base.warm_up`)."""
        if self.timed is not None:
            return self.timed(n, warm_s)
        return seconds_per_call(self.call, n, warm_s)


def seconds_per_call(call: Callable[[], Any], n: int, warm_s: float | None = None) -> float:
    """Mean seconds of ``n`` calls of ``call`` back to back, after untimed calls for ``warm_s``
    seconds when it is not None."""
    from autotune.backends.base import warm_up
    if warm_s is not None:
        warm_up(call, warm_s)
    t0 = time.perf_counter()
    for _ in range(n):
        out = call()
        del out
    return (time.perf_counter() - t0) / n


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
    """A plan of ours on its backend kind, on inputs placed on its device once."""
    from autotune.api import make_executable
    from autotune.backends.factory import backend_kind
    plan = make_executable(ctx.w, cand, ctx.kind, ctx.cache_root)
    return Runner(*backend_kind(ctx.kind).resident(plan, ctx.inputs))


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
    from autotune.bench.peers import jax_function
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
    from autotune.bench.peers import torch_function
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
    from autotune.bench.peers import jax_function
    fn = jax_function(w, "default")
    jitted = getattr(fn, "jitted", fn)
    names, outs = w.input_names, w.outputs

    def positional(*xs):
        r = jitted(**dict(zip(names, xs)))
        return tuple(r[o] for o in outs)
    positional.__name__ = f"{w.name}_peer"
    with _x64(jax, w):
        specs = [jax.ShapeDtypeStruct(shape, np.dtype(w.dtype)) for _, shape in w.inputs]
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
    if ctx.w.dtype == "float64":
        # IREE demotes float64 to float32 by default: the module then refuses float64 inputs
        # and a float64 workload would be timed in float32 against plans that are not
        extra.append("--iree-input-demote-f64-to-f32=false")
    compile_with = lambda args: ireec.compile_str(text, target_backends=[target],
                                                  input_type="stablehlo", extra_args=args)
    try:
        vmfb = compile_with(extra)
    except ireec.CompilerToolError as e:
        # IREE's embedded linker has no libm: a float64 tanh (which it calls, not expands)
        # fails to link ("undefined symbol: tanh"); a system library links libm
        if target != "llvm-cpu" or "undefined symbol" not in str(e):
            raise
        vmfb = compile_with(extra + ["--iree-llvmcpu-link-embedded=false"])
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
    spec = w.source.removeprefix("builtin:")
    if not spec:
        return {"status": Status.SKIPPED,
                "error": "the workload has no source a subprocess can load"}
    return run_once_in_subprocess(_greedy_child, (spec, w.dim_dict, seed, kind, str(cache_dir)),
                                  timeout_s, ref, w.rtol, compile_timeout_s)


def run_once_in_subprocess(target, args: tuple, timeout_s: float, ref, rtol: float,
                           compile_timeout_s: float = 600.0) -> dict:
    """Run ``target(*args, out_dir, conn)`` in a spawned process and check what it computed.

    The child sends ``("compiled", seconds)`` once its plan is built, then ``("done",
    seconds)`` after one run with the outputs saved to ``out_dir/greedy.npz`` (or ``("error",
    text)``).  Returns ``status`` (ok, wrong, timed_out, failed), ``build_s``, ``time_s``,
    ``rel_err`` and ``error`` as far as it got; a plan that runs past ``timeout_s`` is killed.
    """
    from autotune.backends.base import verify
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="greedy-") as tmp:
        parent, child = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=target, args=(*args, tmp, child), daemon=True)
        proc.start()
        child.close()
        res: dict = {"status": Status.FAILED, "timeout_s": timeout_s}
        try:
            for step, limit in (("build_s", compile_timeout_s), ("time_s", timeout_s)):
                if not parent.poll(limit):
                    if step == "time_s":
                        res["status"] = Status.TIMED_OUT
                    else:
                        res["error"] = f"no compiled plan after {limit:g} s"
                    return res
                msg = parent.recv()
                if msg[0] == "error":
                    res["error"] = msg[1]
                    return res
                res[step] = msg[1]
            with np.load(os.path.join(tmp, "greedy.npz")) as z:
                err, why = verify({k: z[k] for k in z.files}, ref, rtol)
            res["rel_err"] = err
            res["status"] = Status.WRONG if why else Status.OK
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
