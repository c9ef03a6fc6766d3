"""An isolated measuring process: a crash, hang or out-of-memory in one candidate kills only it.

The worker builds its inputs from the seed, loads (or computes and caches) the float64 reference
once, then serves measure requests over a pipe.  It never outlives its search: it dies with its
parent however the parent ends (:func:`die_with_parent`), and it stops itself when a candidate
runs past the request's timeout (:func:`arm_run_timeout`); the parent kills it too, a little
later, should that fail, and starts a new one for the next candidate.
"""
from __future__ import annotations

import functools
import inspect
import multiprocessing as mp
import os
import signal
import statistics
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from search_spaces.candidate import Candidate

from autotune.backends.base import Measurement, MeasureSettings, verify


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to rebuild the workload and its data on its own."""
    workload: str                  # built-in name or path
    dims: tuple[tuple[str, int], ...]
    seed: int
    cache_dir: str
    device: str = "cpu"


# The parent waits this much longer than the worker's own run timeout before it kills the worker
# itself: the worker's alarm normally ends a hung candidate first.
PARENT_GRACE_S = 5.0
PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int | None) -> None:
    """Make this process die when its parent does, however the parent ends (``kill -9``
    included).  Linux: the kernel sends SIGKILL on the parent's death (``PR_SET_PDEATHSIG``),
    which also holds while a compiled call runs.  Elsewhere: a thread polls the parent's pid.
    (The signal follows the parent *thread* that started us: WorkerHandle starts workers from
    the search's own thread.)"""
    armed = False
    if sys.platform.startswith("linux"):
        try:
            import ctypes
            libc = ctypes.CDLL(None, use_errno=True)
            armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
        except (OSError, AttributeError):
            armed = False
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)        # the parent died before the signal was armed: nobody to serve
    if armed or parent_pid is None:
        return

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(0.5)
        os._exit(1)
    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def arm_run_timeout(seconds: float | None) -> None:
    """Stop this process ``seconds`` from now (wall clock) unless disarmed with ``None``.

    SIGALRM at its default disposition: the kernel ends the process, so this holds even while
    a compiled call that keeps the GIL runs (no Python handler has to run)."""
    if seconds is None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))


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


def _serve(conn, spec: WorkerSpec, make_plan) -> None:
    from search_spaces.loader import load_workload
    name = spec.workload.removeprefix("builtin:")
    w = load_workload(name, dict(spec.dims))
    inputs = w.random_inputs(spec.seed)
    ref = load_or_compute_reference(w, inputs, Path(spec.cache_dir), spec.seed)
    pool = None
    if "pool" in inspect.signature(make_plan).parameters:
        # host buffers pass from one candidate to the next instead of being faulted in anew
        from autotune.backends.cpu.executor import BufferPool
        pool = BufferPool()
        make_plan = functools.partial(make_plan, pool=pool)
    conn.send(("ready", None))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        cand_json, settings, best_s, timeout_s = msg
        arm_run_timeout(timeout_s)
        m = _measure_one(w, Candidate.from_json(cand_json), inputs, ref, settings, best_s, spec,
                         make_plan)
        arm_run_timeout(None)
        # what the pool holds is memory the next candidate gets back: the parent's memory
        # check counts it as available
        conn.send(("result", m.to_dict(), pool.nbytes if pool is not None else 0))


def _measure_one(w, cand, inputs, ref, settings: MeasureSettings, best_s, spec, make_plan
                 ) -> Measurement:
    plan = None
    try:
        plan = make_plan(w, cand, Path(spec.cache_dir) / "kernels")
        return _run(w, plan, inputs, ref, settings, best_s)
    except MemoryError:
        # the frames holding the candidate's arrays are gone once we return: the worker
        # serves the next candidate with its memory back
        return Measurement("failed", error="out of memory while running the candidate "
                                           "(MemoryError)")
    except Exception as e:  # compile errors, codegen bugs: the trial fails, the search goes on
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        return Measurement("failed", error=last[:500])
    finally:
        if plan is not None and hasattr(plan, "release"):
            plan.release()


def _run(w, plan, inputs, ref, settings: MeasureSettings, best_s) -> Measurement:
    """Verify the first run, then time repeats until the candidate cannot be the best."""
    if hasattr(plan, "timed_call"):
        # device plans: inputs uploaded once, runs timed with device events, so host
        # transfers (250 MB each way at N=702) do not swamp kernels of a few ms
        give_up = settings.give_up_factor * best_s if best_s is not None else None
        outs, times = plan.timed_call(inputs, settings.warmup, settings.repeats, give_up)
        err, msg = verify(outs, ref, w.rtol)
        if msg:
            return Measurement("failed", rel_err=err, error=msg)
        return Measurement("ok", statistics.median(times), tuple(times), err)
    t0 = time.perf_counter()
    outs = plan(**inputs)
    first = time.perf_counter() - t0
    err, msg = verify(outs, ref, w.rtol)
    if msg:
        return Measurement("failed", rel_err=err, error=msg)
    del outs
    if best_s is not None and first > settings.give_up_factor * best_s:
        return Measurement("ok", first, (first,), err)  # far off the best: one run tells
    for _ in range(settings.warmup):
        plan(**inputs)
    # the checked run is a timed sample too (the plan pre-faults its buffers)
    times = [first]
    for _ in range(settings.repeats - 1):
        t0 = time.perf_counter()
        plan(**inputs)
        times.append(time.perf_counter() - t0)
        # not in contention for the best after two runs: more repeats only cost time
        if best_s is not None and len(times) == 2 and \
                min(times) > settings.contend_factor * best_s:
            break
    return Measurement("ok", statistics.median(times), tuple(times), err)


def worker_main(conn, spec: WorkerSpec, make_plan_path: str, parent_pid: int | None = None
                ) -> None:
    die_with_parent(parent_pid)
    try:
        import importlib
        module, _, attr = make_plan_path.partition(":")
        make_plan = getattr(importlib.import_module(module), attr)
        _serve(conn, spec, make_plan)
    except EOFError:
        return
    except Exception as e:
        try:
            conn.send(("error", f"worker failed to start: {type(e).__name__}: {e}"))
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


def timeout_message(timeout_s: float) -> str:
    return f"timeout: no result within {timeout_s:.0f} s"


class WorkerHandle:
    """A measuring subprocess with a pipe; restarted after crashes and timeouts."""

    def __init__(self, spec: WorkerSpec, make_plan_path: str, start_timeout_s: float = 600.0):
        self.spec, self.path, self.start_timeout_s = spec, make_plan_path, start_timeout_s
        self.proc = None
        self.conn = None
        self.pooled_bytes = 0      # bytes the worker's buffer pool holds for the next candidate

    def _start(self) -> str | None:
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker_main, args=(child, self.spec, self.path, os.getpid()),
                           daemon=True)
        proc.start()
        self.proc = proc      # only a started process: kill() joins it
        child.close()
        self.conn = parent
        if not parent.poll(self.start_timeout_s):
            self.kill()
            return "worker did not start in time (reference computation too slow?)"
        try:
            kind, payload = parent.recv()
        except EOFError:
            self.kill()
            return "worker died while starting"
        if kind != "ready":
            self.kill()
            return payload
        return None

    def measure(self, cand: Candidate, settings: MeasureSettings, timeout_s: float,
                best_s: float | None) -> Measurement:
        if self.proc is None or not self.proc.is_alive():
            err = self._start()
            if err:
                return Measurement("failed", error=err)
        try:
            # the worker stops itself at timeout_s; the parent's wait is the backstop
            self.conn.send((cand.to_json(), settings, best_s, timeout_s))
            if not self.conn.poll(timeout_s + PARENT_GRACE_S):
                self.kill()
                return Measurement("failed", error=timeout_message(timeout_s))
            kind, payload, self.pooled_bytes = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = (self.proc.join(5) or self.proc.exitcode) if self.proc else None  # reap first
            self.kill()
            if code == -signal.SIGALRM:
                return Measurement("failed", error=timeout_message(timeout_s))
            return Measurement("failed", error=crash_message(code))
        d = dict(payload)
        d["times"] = tuple(d["times"])
        return Measurement(**d)

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
                self.conn.send(None)
                self.proc.join(5)
            except (BrokenPipeError, OSError):
                pass
        self.kill()
