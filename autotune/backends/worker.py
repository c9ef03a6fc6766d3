"""An isolated measuring process: a crash, hang or out-of-memory in one candidate kills only it.

The worker builds its inputs from the seed, loads (or computes and caches) the float64 reference
once, then serves measure requests over a pipe.  It never outlives its search: it dies with its
parent however the parent ends, and it stops itself when a candidate runs past the request's
timeout or one run past its cap (:mod:`autotune.backends.stops`); the parent kills it too, a little
later, should that fail, and starts a new one for the next candidate.  What crosses the pipe are
records: requests (:class:`MeasureRequest`, :class:`~autotune.backends.confirm.ConfirmRequest`,
:class:`Shutdown`) one way, replies (:class:`Ready`, :class:`WorkerError`,
:class:`MeasureReply`, :class:`~autotune.backends.confirm.ConfirmReply`) the other.
"""
from __future__ import annotations

import importlib
import math
import multiprocessing as mp
import os
import signal
import statistics
import time
import traceback
from pathlib import Path

from db.records import Status
from search_spaces.candidate import Candidate
from search_spaces.workload import Workload

from autotune.backends.base import (Arrays, BackendKind, BufferPool, Leniency, Measurement,
                                    MeasureSettings, Plan, PlanFactory, verify)
from autotune.backends.confirm import ConfirmReply, ConfirmRequest, run_confirmation
from autotune.backends.load import LoadProbe, LoadWatch, NoProbe, machine_probe
from autotune.backends.pipe import (MeasureReply, MeasureRequest, Ready, Shutdown,  # noqa: F401
                                    WorkerError, WorkerSpec)
from autotune.backends.stops import (CappedWatch, arm_run_timeout, crash_message,  # noqa: F401
                                     die_with_parent, run_cap_message, timeout_message)
from autotune.cache_dirs import kernels_dir
from autotune.reference import load_or_compute_reference


# The parent waits this much longer than the worker's own run timeout before it kills the worker
# itself: the worker's alarm normally ends a hung candidate first.
PARENT_GRACE_S = 5.0


def _serve(conn, spec: WorkerSpec, make_plan: PlanFactory) -> None:
    from search_spaces.loader import load_workload
    name = spec.workload.removeprefix("builtin:")
    w = load_workload(name, dict(spec.dims))
    inputs = w.random_inputs(spec.seed)
    ref = load_or_compute_reference(w, inputs, Path(spec.cache_dir), spec.seed)
    # host buffers pass from one candidate to the next instead of being faulted in anew
    pool = BufferPool()
    probe = machine_probe()          # is the machine busy during a run?
    kernels = kernels_dir(Path(spec.cache_dir))
    conn.send(Ready())
    while True:
        req = conn.recv()
        if isinstance(req, Shutdown):
            return
        arm_run_timeout(req.timeout_s)
        deadline = time.monotonic() + (req.timeout_s if req.timeout_s is not None else 1e9)
        if isinstance(req, ConfirmRequest):
            ms = run_confirmation(w, req, inputs, ref, kernels, make_plan, pool, probe)
            reply = ConfirmReply(ms, pool.nbytes)
        else:
            reply = MeasureReply(_measure_one(w, req, inputs, ref, kernels, make_plan, pool,
                                              probe, deadline), pool.nbytes)
        arm_run_timeout(None)
        conn.send(reply)


def _measure_one(w: Workload, req: MeasureRequest, inputs: Arrays, ref: Arrays,
                 kernels: Path, make_plan: PlanFactory, pool: BufferPool,
                 probe: LoadProbe, deadline: float = math.inf) -> Measurement:
    plan = None
    try:
        plan = make_plan(w, req.candidate, kernels, pool=pool)
        return _run(w, plan, inputs, ref, req.settings, req.best_s, req.leniency, probe,
                    deadline)
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
         best_s: float | None, leniency: Leniency = Leniency(),
         probe: LoadProbe = NoProbe(), deadline: float = math.inf) -> Measurement:
    """Verify the first run, then time repeats until the candidate cannot be the best (runs
    under load, as ``probe`` tells, made again rather than trusted).  With a best so far and
    a ``deadline`` (time.monotonic), each run is stopped at ``settings.run_cap(best_s)``."""
    check = _Check(ref, w.rtol)
    cap = settings.run_cap(best_s)
    watch = LoadWatch(probe, settings.busy_cores) if cap is None or deadline == math.inf \
        else CappedWatch(probe, settings.busy_cores, cap, deadline)
    outs, times = plan.timed_call(inputs, settings.warmup, settings.repeats, check,
                                  settings.cutoff(best_s, leniency, watch))
    if check.verdict is None:      # a plan that skipped the check: verify what it returned
        check(outs)
    del outs
    err, msg = check.verdict
    if msg:
        return Measurement(Status.FAILED, rel_err=err, error=msg, loaded_runs=watch.loaded)
    return Measurement(Status.OK, statistics.median(times), tuple(times), err,
                       loaded_runs=watch.loaded, groups=tuple(plan.group_seconds().items()))


def plan_factory(spec: WorkerSpec, make_plan_path: str | None) -> PlanFactory:
    """``module:attr`` when given (tests' misbehaving plans), else the kind's own."""
    if make_plan_path:
        module, _, attr = make_plan_path.partition(":")
        return getattr(importlib.import_module(module), attr)
    from autotune.backends.factory import backend_kind
    return backend_kind(spec.device).make_plan


def worker_main(conn, spec: WorkerSpec, make_plan_path: str | None,
                parent_pid: int | None = None) -> None:
    die_with_parent(parent_pid)
    try:
        _serve(conn, spec, plan_factory(spec, make_plan_path))
    except EOFError:
        return
    except Exception as e:
        try:
            conn.send(WorkerError(f"worker failed to start: {type(e).__name__}: {e}"))
        except Exception:
            pass


class WorkerHandle:
    """A measuring subprocess with a pipe; restarted after crashes and timeouts."""

    def __init__(self, spec: WorkerSpec, make_plan_path: str | None = None,
                 start_timeout_s: float = 600.0):
        self.spec, self.path, self.start_timeout_s = spec, make_plan_path, start_timeout_s
        self.proc = None
        self.conn = None
        self.ready = False         # the running worker has said Ready
        self.pooled_bytes = 0      # bytes the worker's buffer pool holds for the next candidate

    def launch(self) -> None:
        """Spawn the worker without waiting for it: it builds its inputs and loads or computes
        the float64 reference (13-18 s at trimul N=702) while the caller goes on; the first
        request waits for it to be ready."""
        if self.proc is not None:
            return
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker_main, args=(child, self.spec, self.path, os.getpid()),
                           daemon=True)
        proc.start()
        self.proc = proc      # only a started process: kill() joins it
        child.close()
        self.conn = parent
        self.ready = False

    def _start(self) -> str | None:
        """Launch the worker if it is not running and wait until it is ready (an error text
        if it does not get there)."""
        if self.proc is not None and self.ready and not self.proc.is_alive():
            self.kill()       # died after serving: a new one (one that died starting says why)
        self.launch()
        if self.ready:
            return None
        parent = self.conn
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
        self.ready = True
        return None

    def measure(self, cand: Candidate, settings: MeasureSettings, timeout_s: float,
                best_s: float | None, leniency: Leniency = Leniency()) -> Measurement:
        start = time.monotonic()
        reply = self._ask(MeasureRequest(cand, settings, best_s, timeout_s, leniency),
                          timeout_s, MeasureReply)
        if not isinstance(reply, Measurement):
            return reply.measurement
        cap = settings.run_cap(best_s)
        if reply.error == timeout_message(timeout_s) and cap is not None and \
                time.monotonic() - start < timeout_s:
            # the worker's alarm fired before the request's timeout: a run passed its cap
            return Measurement(Status.FAILED, error=run_cap_message(cap, settings.run_factor))
        return reply

    def confirm(self, req: ConfirmRequest) -> list[Measurement]:
        """The measurements of a confirmation (each failed, with the reason, when the worker
        does not answer)."""
        reply = self._ask(req, req.timeout_s, ConfirmReply)
        if isinstance(reply, Measurement):
            return [reply] * len(req.candidates)
        return list(reply.measurements)

    def _ask(self, req, timeout_s: float | None, expect: type):
        """Send ``req`` and wait for its reply of type ``expect``; a failed Measurement when
        the worker cannot start, crashes, times out or answers otherwise."""
        if self.proc is None or not self.proc.is_alive() or not self.ready:
            err = self._start()
            if err:
                return Measurement(Status.FAILED, error=err)
        try:
            # the worker stops itself at timeout_s; the parent's wait is the backstop
            self.conn.send(req)
            if not self.conn.poll(None if timeout_s is None else timeout_s + PARENT_GRACE_S):
                self.kill()
                return Measurement(Status.FAILED, error=timeout_message(timeout_s))
            reply = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError):
            code = (self.proc.join(5) or self.proc.exitcode) if self.proc else None  # reap first
            self.kill()
            if code == -signal.SIGALRM:
                return Measurement(Status.FAILED, error=timeout_message(timeout_s))
            return Measurement(Status.FAILED, error=crash_message(code))
        if not isinstance(reply, expect):
            self.kill()
            return Measurement(Status.FAILED, error=reply.error if isinstance(reply, WorkerError)
                               else f"worker sent {type(reply).__name__}, not a measurement")
        self.pooled_bytes = reply.pooled_bytes
        return reply

    def kill(self) -> None:
        self.pooled_bytes = 0
        if self.proc is not None:
            if self.proc.is_alive():
                self.proc.kill()
            self.proc.join(5)
        self.proc = None
        self.conn = None
        self.ready = False

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

    def measure(self, cand: Candidate, timeout_s: float, best_s: float | None,
                leniency: Leniency = Leniency()) -> Measurement:
        return self.worker.measure(cand, self.settings, timeout_s, best_s, leniency)

    def confirm(self, cands, rounds: int, timeout_s: float) -> list[Measurement]:
        """Finalists re-measured side by side in the worker (see autotune.backends.confirm);
        the order of each round is drawn from the search's seed."""
        return self.worker.confirm(ConfirmRequest(tuple(cands), rounds, self.settings,
                                                  self.worker.spec.seed, timeout_s))

    def prepare(self) -> None:
        """Start the worker now, in the background (see :meth:`WorkerHandle.launch`)."""
        self.worker.launch()

    def reclaimable_bytes(self) -> int:
        """Memory the worker holds for the next candidate (its buffer pool): free for it."""
        return self.worker.pooled_bytes

    def close(self) -> None:
        self.worker.close()
