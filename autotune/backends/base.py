"""What every backend shares: the Backend and Plan protocols, the measurement record, the host
buffer pool (:mod:`autotune.backends.buffers`), and the check of outputs against the float64
reference.

A backend kind (:class:`BackendKind`: CPU, CUDA, one object each, looked up by CLI name in
:mod:`autotune.backends.factory`) says what a device accepts and costs, builds plans for it and
starts its measuring :class:`Backend`.  A :class:`Plan` is one compiled candidate: it runs, and
it runs checked and timed.  A backend measures a candidate by compiling it, running it on fresh
random inputs, comparing every output with the float64 reference under the workload's tolerance,
and timing it.  Failures come back as data (status and error text), never as exceptions that
stop a search.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from costmodel.devices import DeviceSpec
from db.records import Status
from search_spaces.candidate import Candidate
from search_spaces.space import TileBounds
from search_spaces.workload import Workload

from autotune.backends.bound import BoundPlan
from autotune.backends.buffers import BufferPool
from autotune.backends.load import LoadWatch
from autotune.environment import Environment

Arrays = dict[str, np.ndarray]          # tensor name -> array


@dataclass(frozen=True)
class Measurement:
    """Outcome of measuring one candidate."""
    status: Status                 # OK or FAILED (a wrong result is FAILED, its error says so)
    median_s: float | None = None
    times: tuple[float, ...] = ()  # the trusted runs (those under load only when none was not)
    rel_err: float | None = None   # worst relative L2 error over the outputs
    error: str = ""
    loaded_runs: int = 0           # runs taken while other processes kept the machine busy
    # (group anchor, median seconds) of each group, where the plan times its groups
    groups: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        # a bare "ok"/"failed" (a plan of a test, say) becomes its member; anything else is a bug
        object.__setattr__(self, "status", Status(self.status))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["times"] = list(self.times)
        d["groups"] = [list(g) for g in self.groups]
        return d


@dataclass(frozen=True)
class Leniency:
    """What the search knows of a candidate beyond the best time, to keep an early stop from
    discarding it on noise: ``spread``, the run-to-run spread it has observed (the median
    absolute log ratio of repeated runs to their median), and ``favourite``, whether the cost
    model ranks the candidate among its best few predictions (never given up on one run)."""
    spread: float = 0.0
    favourite: bool = False


@dataclass(frozen=True)
class Cutoff:
    """When a plan's timed runs stop: early when it cannot be the best so far any more, later
    when runs were taken under load.  Without ``best_s`` (nothing measured yet) every run is
    made.  ``watch`` (None: every run trusted) times each run and says whether other processes
    kept the machine busy meanwhile; such a run is made again, ``reruns`` times at most."""
    best_s: float | None = None
    give_up_factor: float = math.inf
    contend_factor: float = math.inf
    watch: LoadWatch | None = None
    reruns: int = 0

    def gives_up(self, first_s: float) -> bool:
        """A checked first run this far off the best: it is the only sample."""
        return self.best_s is not None and first_s > self.give_up_factor * self.best_s

    def out_of_contention(self, times: list[float]) -> bool:
        """Both of the first two runs this far off the best: more repeats only cost time."""
        return self.best_s is not None and len(times) == 2 and \
            min(times) > self.contend_factor * self.best_s

    def time(self, run: Callable[[], float | None]) -> tuple[float | None, bool]:
        """``run()``'s seconds and whether it ran under load."""
        return self.watch.time(run) if self.watch is not None else (run(), False)


# A plan of a few milliseconds, called after the host sat idle (a compile, a pause), runs slow
# for some tens of milliseconds of calls, however many calls that is: on the shared 2-core VM,
# attention's heuristic plan (2.9 ms steady) ran its first 1-3 calls at 8-37 ms, then ~3.8 ms
# for ten more, then 2.9 ms; the search's worker, measuring each candidate right after its
# compile, read attention's best plan at 4.2 ms where it runs 1.55 ms.  Untimed calls for this
# long before the samples take that away (the bench: 4.42 -> 3.14 ms mean over 6 x 25 calls).
WARM_UP_S = 0.1

# A plan faster than this is called several times in a row where a figure of it decides
# something (a bench round, a confirmation round), and the figure comes from those calls: one
# call of a few milliseconds, alone after a pause, read anything from 1x to 2x its steady time
# on a shared 2-core host (gelu_mlp, T=512: the same plan 9.8 and 15.7 ms medians as
# "heuristic" and "best" in one bench, minimums 8.4 and 8.1 ms).  Seconds-long plans keep one
# call a round.
MIN_ROUND_S = 0.1
MAX_CALLS = 50


def calls_per_round(seconds: float, min_round_s: float = MIN_ROUND_S) -> int:
    """Calls in one round of a plan whose call takes ``seconds``."""
    if not seconds > 0:
        return MAX_CALLS
    return max(1, min(MAX_CALLS, int(min_round_s / seconds)))


def warm_up(call: Callable[[], object], seconds: float = WARM_UP_S) -> int:
    """Untimed ``call()``s, back to back, until ``seconds`` have passed (at least one); their
    count."""
    t0, n = time.perf_counter(), 0
    while n == 0 or time.perf_counter() - t0 < seconds:
        call()
        n += 1
    return n


def timed_runs(first: Callable[[], float | None], run: Callable[[], float], warmup: int,
               repeats: int, cutoff: Cutoff) -> list[float]:
    """Seconds of every trusted timed run of a candidate.  ``first()`` makes the checked run
    and returns its seconds (None: the check failed, nothing more runs, no times); ``run()``
    runs it once more.  The checked run is a sample too (plans pre-fault their buffers, so it
    is steady-state).  A run under load does not count and decides nothing: it is made again,
    ``cutoff.reruns`` times at most over the measurement; when every run was under load, their
    times are all there is.  The first trusted run far off the best is the only one; two
    trusted runs out of contention end the repeats.  One loop for every plan and for the
    test fake, so that their early stops cannot drift apart."""
    seconds, busy = cutoff.time(first)
    if seconds is None:
        return []
    trusted, loaded = ([], [seconds]) if busy else ([seconds], [])
    if trusted and cutoff.gives_up(seconds):
        return trusted
    for _ in range(warmup):
        run()
    while len(trusted) < repeats and len(trusted) + len(loaded) < repeats + cutoff.reruns:
        seconds, busy = cutoff.time(run)
        if busy:
            loaded.append(seconds)
            continue
        trusted.append(seconds)
        if len(trusted) == 1 and cutoff.gives_up(seconds):
            break
        if cutoff.out_of_contention(trusted):
            break
    return trusted or loaded


def group_medians(anchors: Sequence[str], runs: Sequence[tuple[float, Sequence[float]]],
                  trusted: Sequence[float]) -> dict[str, float]:
    """Each group's median seconds over the trusted runs: ``runs`` holds every run's
    (seconds, seconds of each group in ``anchors`` order), ``trusted`` the seconds
    :func:`timed_runs` kept (a run under load is left out of its groups' times too)."""
    kept = [g for s, g in runs if s in trusted and len(g) == len(anchors)]
    if not kept:
        return {}
    return {a: float(np.median([g[i] for g in kept])) for i, a in enumerate(anchors)}


@dataclass(frozen=True)
class MeasureSettings:
    """How hard to measure: runs after the checked one, and when to stop early."""
    warmup: int = 0                # the checked run already warms caches and code
    repeats: int = 3
    # A checked run this much slower than the best: no repeats (pre-faulted buffers make the
    # first run steady-state; 1.15 for 1.3 cut an N=702 search's runs from 268 to 218, same
    # best).  Both first runs slower than the best: no third, whose median could not beat it
    # (33 of 219 runs, 45 s, at N=702 with contend_factor 1.05).
    give_up_factor: float = 1.15
    contend_factor: float = 1.0
    # ... and a first run within the noise band the search has seen is no reason to give up:
    # the factor is at least exp(noise_k x spread).  A median absolute deviation is ~0.67
    # standard deviations, so 6 is ~4 sigma: a run that far off is slow, not unlucky.  The
    # floor: a spread measured on few repeats may read near zero.
    noise_k: float = 6.0
    noise_floor: float = 0.01
    # A run during which other processes kept more than busy_cores cores busy on average is
    # under load: made again (load_reruns times at most per measurement), never trusted.
    busy_cores: float = 0.5
    load_reruns: int = 3
    # One run this many times the best so far (and at least run_floor_s) is stopped where it
    # is: the candidate is out of the race, and waiting for it is waste (an N=702 search on
    # this machine ran three candidates predicted 3.6-4.5 s for 15, 39 and 57 s, against a
    # best of 1.5 s).  The whole measurement's timeout still covers the compile.
    run_factor: float = 10.0
    run_floor_s: float = 1.0

    def give_up_at(self, leniency: Leniency) -> float:
        """The factor over the best past which one run is enough (inf: never)."""
        if leniency.favourite:
            return math.inf
        return max(self.give_up_factor,
                   math.exp(self.noise_k * max(leniency.spread, self.noise_floor)))

    def run_cap(self, best_s: float | None) -> float | None:
        """The seconds one timed run may take (None: no best yet, no cap)."""
        if best_s is None or not best_s > 0:
            return None
        return max(self.run_floor_s, self.run_factor * best_s)

    def cutoff(self, best_s: float | None, leniency: Leniency = Leniency(),
               watch: LoadWatch | None = None) -> Cutoff:
        """The early stop for a candidate measured against the best time so far."""
        return Cutoff(best_s, self.give_up_at(leniency), self.contend_factor, watch,
                      self.load_reruns if watch is not None else 0)


@dataclass(frozen=True)
class EmittedSources:
    """A plan's generated sources as files a user can read and compile by hand: ``files``
    (file name -> text) and ``notes``, the README lines that say what each file holds."""
    files: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()


class Plan(Protocol):
    """One candidate compiled for a device: ``plan(**inputs) -> {output: host array}``."""

    def __call__(self, **inputs: Any) -> Arrays: ...

    def timed_call(self, inputs: Mapping[str, Any], warmup: int, repeats: int,
                   check: Callable[[Arrays], bool] | None = None,
                   cutoff: Cutoff = Cutoff()) -> tuple[Arrays, list[float]]:
        """Run, check and time: (outputs of a run, seconds of each timed run).

        ``check`` gets the first run's outputs before any further run; when it returns False
        nothing more runs and the times are empty.  The plan may stop timing early when
        ``cutoff`` says it cannot be the best.  How runs are timed (host clock or device
        events, whether the first run counts) is the plan's to say.
        """
        ...

    def group_seconds(self) -> dict[str, float]:
        """Each group's median seconds over the trusted runs of the last :meth:`timed_call`,
        by the group's anchor; empty where the plan does not time its groups.  What the
        learned correction is fitted on, group by group."""
        ...

    def release(self) -> None:
        """Give back what the plan holds (buffers to its pool); it is unusable afterwards."""
        ...

    def bind(self, params: Mapping[str, Any]) -> "BoundPlan":
        """The plan with ``params`` (some of its inputs, a model's weights) bound: what depends
        only on them is prepared once (:mod:`autotune.backends.bound`)."""
        ...


class PlanFactory(Protocol):
    """Compiles a candidate into a :class:`Plan`; kernels are cached under ``cache_dir``.
    ``pool``: host buffers shared with the plans before and after (a plan that keeps its
    buffers on a device ignores it)."""

    def __call__(self, w: Workload, cand: Candidate, cache_dir: Path,
                 pool: BufferPool | None = None) -> Plan: ...


class Backend(Protocol):
    """Measures candidates for one device kind (in an isolated process, for the real ones)."""
    kind: "BackendKind"
    settings: MeasureSettings

    def measure(self, cand: Candidate, timeout_s: float, best_s: float | None,
                leniency: Leniency = Leniency()) -> Measurement:
        """Compile, run, verify and time ``cand``; ``best_s`` (the best time so far) lets the
        backend stop timing a candidate that cannot beat it, ``leniency`` how far off it may
        be before one run is enough."""
        ...

    def confirm(self, cands: Sequence[Candidate], rounds: int, timeout_s: float
                ) -> list[Measurement]:
        """Re-measure finalists side by side, one measurement per candidate (in order):
        each is compiled and verified, then ``rounds`` rounds run each once, in a shuffled
        order, in one process.  ``timeout_s`` bounds the whole confirmation."""
        ...

    def prepare(self) -> None:
        """Start what the first measurement needs (a worker, its inputs, the float64
        reference) in the background, so that it overlaps the caller's own work."""
        ...

    def reclaimable_bytes(self) -> int:
        """Memory the backend holds for the next candidate: free for it, though the OS counts
        it as used."""
        ...

    def close(self) -> None: ...


class BackendKind(Protocol):
    """Everything the pipeline needs to know about one kind of device, by its CLI name."""
    name: str                      # "cpu", "cuda": the --device value and Environment.kind
    tile_bounds: TileBounds        # tile sizes the generated code accepts
    units: str                     # what Environment.cores counts ("cores", "SMs")
    # the floor of a candidate's timeout on the device's own time scale (it also covers the
    # compile and the first candidate, before there is a best to scale from)
    min_timeout_s: float

    def device_spec(self, env: Environment) -> DeviceSpec:
        """The cost model's view of the device."""
        ...

    def calibrated(self) -> bool | None:
        """Whether the device spec was measured on this machine (None: a datasheet preset)."""
        ...

    def memory_probe(self) -> Callable[[], int | None]:
        """``() -> bytes a candidate can allocate now`` (None: unknown) for the search's
        memory check."""
        ...

    def memory_threads(self, dev: DeviceSpec) -> int:
        """Copies of a fused group's tile buffers in the memory a candidate allocates (one
        per host thread; 0 when tiles live in on-chip memory)."""
        ...

    def make_plan(self, w: Workload, cand: Candidate, cache_dir: Path,
                  pool: BufferPool | None = None) -> Plan:
        """The :class:`PlanFactory` of this kind."""
        ...

    def resident(self, plan: Plan, inputs: Mapping[str, np.ndarray]
                 ) -> tuple[Callable[[], Any], Callable[[Any], Arrays]]:
        """``(run, to_host)``: ``run()`` runs ``plan`` once, synchronised, on ``inputs`` placed
        on the device once, and returns its outputs where they live; ``to_host`` brings them
        back as NumPy arrays (for benchmarks that time the device work alone)."""
        ...

    def emit(self, w: Workload, cand: Candidate) -> EmittedSources:
        """The sources this kind generates for ``cand``, for reading and compiling by hand."""
        ...

    def backend(self, w: Workload, seed: int, cache_dir: Path,
                settings: MeasureSettings = MeasureSettings()) -> Backend:
        """The measuring backend for ``w`` (inputs from ``seed``; kernels and references
        cached under ``cache_dir``)."""
        ...


def first_line(e: BaseException) -> str:
    """The first line of ``Type: message``: a failure as one line of data (a table, a log, a
    record's error field)."""
    return (f"{type(e).__name__}: {e}".splitlines() or [type(e).__name__])[0]


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """Relative L2 error; inf when the output holds NaN or inf or has the wrong shape."""
    if out.shape != ref.shape:
        return math.inf
    # in float64 chunks: no 500 MB temporaries for a 250 MB output, and a NaN or inf anywhere
    # makes the sum non-finite
    o, r = np.ravel(out), np.ravel(ref)
    num = den = 0.0
    step = 1 << 20
    for i in range(0, o.size, step):
        d = o[i:i + step].astype(np.float64) - r[i:i + step]
        num += float(np.dot(d, d))
        rr = r[i:i + step].astype(np.float64, copy=False)
        den += float(np.dot(rr, rr))
    if not math.isfinite(num):
        return math.inf
    return math.sqrt(num / den) if den > 0 else math.sqrt(num)


def verify(outs: dict[str, np.ndarray], ref: dict[str, np.ndarray], rtol: float
           ) -> tuple[float, str]:
    """(worst relative error, error text or "") of a candidate's outputs against the reference."""
    worst = 0.0
    for name, r in ref.items():
        if name not in outs:
            return math.inf, f"output {name!r} missing"
        e = relative_error(outs[name], r)
        worst = max(worst, e)
        if not e <= rtol:
            what = "non-finite values" if e == math.inf else f"relative L2 error {e:.3g}"
            return worst, f"wrong result in {name!r}: {what} > rtol {rtol:g}"
    return worst, ""
