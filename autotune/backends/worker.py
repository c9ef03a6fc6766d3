"""An isolated measuring process: a crash, hang or out-of-memory in one candidate kills only it.

The worker builds its inputs from the seed, loads (or computes and caches) the float64 reference
once, then serves measure requests over a pipe.  The parent kills it on timeout and starts a new
one for the next candidate.  What crosses the pipe are the records below: requests
(:class:`MeasureRequest`, :class:`Shutdown`) one way, replies (:class:`Ready`,
:class:`WorkerError`, :class:`MeasureReply`) the other.
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import statistics
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from db.records import Status
from search_spaces.candidate import Candidate
from search_spaces.workload import Workload

from autotune.backends.base import (Arrays, BackendKind, BufferPool, Measurement,
                                    MeasureSettings, Plan, PlanFactory, verify)


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to rebuild the workload and its data on its own."""
    workload: str                  # built-in name or path
    dims: tuple[tuple[str, int], ...]
    seed: int
    cache_dir: str
    device: str = "cpu"            # the backend kind's name: whose plans the worker builds


@dataclass(frozen=True)
class MeasureRequest:
    """Parent to worker: measure one candidate against the best time so far."""
    candidate: Candidate
    settings: MeasureSettings
    best_s: float | None


@dataclass(frozen=True)
class Shutdown:
    """Parent to worker: exit."""


@dataclass(frozen=True)
class Ready:
    """Worker to parent, once: inputs and reference are in place, requests are served."""


@dataclass(frozen=True)
class WorkerError:
    """Worker to parent: it failed (to start, or later) and exits."""
    error: str


@dataclass(frozen=True)
class MeasureReply:
    """Worker to parent: a candidate's measurement, and the bytes the worker's buffer pool
    now holds for the next candidate (the parent's memory check counts them as free)."""
    measurement: Measurement
    pooled_bytes: int


def reference_path(cache_dir: Path, whash: str, seed: int) -> Path:
    return cache_dir / "refs" / f"{whash[:32]}-seed{seed}"


def load_or_compute_reference(w, inputs, cache_dir: Path, seed: int) -> dict[str, np.ndarray]:
    """The float64 reference for (workload, dims, seed), cached as .npy files (no pickle)."""
    from autotune.reference import reference
    folder = reference_path(cache_dir, w.hash, seed)
    try:
        return {o: np.load(folder / f"{o}.npy", allow_pickle=False) for o in w.outputs}
    except (OSError, ValueError):
        pass
    ref = reference(w, inputs)
    folder.mkdir(parents=True, exist_ok=True)
    for o, arr in ref.items():
        tmp = folder / f".{o}.{os.getpid()}.npy"
        np.save(tmp, arr, allow_pickle=False)
        os.replace(tmp, folder / f"{o}.npy")
    return ref


def _serve(conn, spec: WorkerSpec, make_plan: PlanFactory) -> None:
    from search_spaces.loader import load_workload
    name = spec.workload.removeprefix("builtin:")
    w = load_workload(name, dict(spec.dims))
    inputs = w.random_inputs(spec.seed)
    ref = load_or_compute_reference(w, inputs, Path(spec.cache_dir), spec.seed)
    # host buffers pass from one candidate to the next instead of being faulted in anew
    pool = BufferPool()
    conn.send(Ready())
    while True:
        req = conn.recv()
        if isinstance(req, Shutdown):
            return
        m = _measure_one(w, req, inputs, ref, Path(spec.cache_dir), make_plan, pool)
        conn.send(MeasureReply(m, pool.nbytes))


def _measure_one(w: Workload, req: MeasureRequest, inputs: Arrays, ref: Arrays,
                 cache_dir: Path, make_plan: PlanFactory, pool: BufferPool) -> Measurement:
    plan = None
    try:
        plan = make_plan(w, req.candidate, cache_dir / "kernels", pool=pool)
        return _run(w, plan, inputs, ref, req.settings, req.best_s)
    except MemoryError:
        # the frames holding the candidate's arrays are gone once we return: the worker
        # serves the next candidate with its memory back
        return Measurement(Status.FAILED, error="out of memory while running the candidate "
                                           "(MemoryError)")
    except Exception as e:  # compile errors, codegen bugs: the trial fails, the search goes on
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        return Measurement(Status.FAILED, error=last[:500])
    finally:
        if plan is not None:
            plan.release()


class _Check:
    """The check a plan's first run goes through: its outputs against the reference."""

    def __init__(self, ref: Arrays, rtol: float):
        self.ref, self.rtol = ref, rtol
        self.verdict: tuple[float, str] | None = None     # (worst relative error, error text)

    def __call__(self, outs: Arrays) -> bool:
        self.verdict = verify(outs, self.ref, self.rtol)
        return not self.verdict[1]


def _run(w: Workload, plan: Plan, inputs: Arrays, ref: Arrays, settings: MeasureSettings,
         best_s: float | None) -> Measurement:
    """Verify the first run, then time repeats until the candidate cannot be the best."""
    check = _Check(ref, w.rtol)
    outs, times = plan.timed_call(inputs, settings.warmup, settings.repeats, check,
                                  settings.cutoff(best_s))
    if check.verdict is None:      # a plan that skipped the check: verify what it returned
        check(outs)
    del outs
    err, msg = check.verdict
    if msg:
        return Measurement(Status.FAILED, rel_err=err, error=msg)
    return Measurement(Status.OK, statistics.median(times), tuple(times), err)


def plan_factory(spec: WorkerSpec, make_plan_path: str | None) -> PlanFactory:
    """``module:attr`` when given (tests' misbehaving plans), else the kind's own."""
    if make_plan_path:
        module, _, attr = make_plan_path.partition(":")
        return getattr(importlib.import_module(module), attr)
    from autotune.backends.factory import backend_kind
    return backend_kind(spec.device).make_plan


def worker_main(conn, spec: WorkerSpec, make_plan_path: str | None) -> None:
    try:
        _serve(conn, spec, plan_factory(spec, make_plan_path))
    except EOFError:
        return
    except Exception as e:
        try:
            conn.send(WorkerError(f"worker failed to start: {type(e).__name__}: {e}"))
        except Exception:
            pass


def crash_message(code: int | None) -> str:
    """What a dead worker's exit code says.  SIGKILL from nobody we know of is how the
    kernel's out-of-memory killer ends a process: say so, since the candidate is then the
    likely cause."""
    if code == -signal.SIGKILL:
        return (f"worker crashed (exit code {code}: killed by SIGKILL, as the out-of-memory "
                "killer does; the candidate may need more memory than is free)")
    return f"worker crashed (exit code {code})"


class WorkerHandle:
    """A measuring subprocess with a pipe; restarted after crashes and timeouts."""

    def __init__(self, spec: WorkerSpec, make_plan_path: str | None = None,
                 start_timeout_s: float = 600.0):
        self.spec, self.path, self.start_timeout_s = spec, make_plan_path, start_timeout_s
        self.proc = None
        self.conn = None
        self.pooled_bytes = 0      # bytes the worker's buffer pool holds for the next candidate

    def _start(self) -> str | None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker_main, args=(child, self.spec, self.path), daemon=True)
        proc.start()
        self.proc = proc      # only a started process: kill() joins it
        child.close()
        self.conn = parent
        if not parent.poll(self.start_timeout_s):
            self.kill()
            return "worker did not start in time (reference computation too slow?)"
        try:
            reply = parent.recv()
        except EOFError:
            self.kill()
            return "worker died while starting"
        if not isinstance(reply, Ready):
            self.kill()
            return reply.error if isinstance(reply, WorkerError) else \
                f"worker sent {type(reply).__name__} while starting"
        return None

    def measure(self, cand: Candidate, settings: MeasureSettings, timeout_s: float,
                best_s: float | None) -> Measurement:
        if self.proc is None or not self.proc.is_alive():
            err = self._start()
            if err:
                return Measurement(Status.FAILED, error=err)
        try:
            self.conn.send(MeasureRequest(cand, settings, best_s))
            if not self.conn.poll(timeout_s):
                self.kill()
                return Measurement(Status.FAILED, error=f"timeout: no result within {timeout_s:.0f} s")
            reply = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = (self.proc.join(5) or self.proc.exitcode) if self.proc else None  # reap first
            self.kill()
            return Measurement(Status.FAILED, error=crash_message(code))
        if not isinstance(reply, MeasureReply):
            self.kill()
            return Measurement(Status.FAILED, error=reply.error if isinstance(reply, WorkerError)
                               else f"worker sent {type(reply).__name__}, not a measurement")
        self.pooled_bytes = reply.pooled_bytes
        return reply.measurement

    def kill(self) -> None:
        self.pooled_bytes = 0
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(5)
        self.proc = None
        self.conn = None

    def close(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send(Shutdown())
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        self.kill()


class WorkerBackend:
    """A :class:`autotune.backends.base.Backend` whose candidates run in an isolated worker
    process.  ``make_plan``: a ``module:attr`` plan factory instead of the kind's own."""

    def __init__(self, kind: BackendKind, w: Workload, seed: int, cache_dir: Path,
                 settings: MeasureSettings = MeasureSettings(), make_plan: str | None = None):
        self.kind = kind
        self.settings = settings
        source = w.source.removeprefix("builtin:")
        spec = WorkerSpec(source, w.dims, seed, str(cache_dir), kind.name)
        self.worker = WorkerHandle(spec, make_plan)

    def measure(self, cand: Candidate, timeout_s: float, best_s: float | None) -> Measurement:
        return self.worker.measure(cand, self.settings, timeout_s, best_s)

    def reclaimable_bytes(self) -> int:
        """Memory the worker holds for the next candidate (its buffer pool): free for it."""
        return self.worker.pooled_bytes

    def close(self) -> None:
        self.worker.close()
