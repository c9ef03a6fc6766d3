"""A backend that runs nothing: the cost model's predicted time times seeded noise.

For testing the search's own logic (pruning, local search, proposals, resume, the shared study)
in milliseconds, without a compiler or a measuring process.  A candidate's runs are
deterministic per (seed, candidate, run number), so two searches that measure the same
candidates see the same times in any order, in any process.  Early stops are the worker's own
(:func:`autotune.backends.base.timed_runs`).  Failures are scripted: ``fails(cand)`` returns an error
text for a candidate that should fail, ``hangs(cand)`` marks one that times out.  So is the
machine's load: ``busy(cand, run)`` marks a run taken while other processes kept the machine
busy (its time is ``busy_factor`` times longer, and the load probe says so).  A confirmation
(:meth:`FakeBackend.confirm`) draws its runs from run numbers of its own.
"""
from __future__ import annotations

import itertools
import statistics
from typing import Callable, Sequence

import numpy as np

from costmodel import estimate
from costmodel.devices import DeviceSpec
from costmodel.estimate import CostEstimate
from db.records import Status
from search_spaces.candidate import Candidate
from search_spaces.workload import Workload

from autotune.backends.base import (BackendKind, Leniency, Measurement, MeasureSettings,
                                    timed_runs)
from autotune.backends.factory import backend_kind
from autotune.backends.load import LoadWatch
from autotune.backends.worker import timeout_message

# A confirmation's round r of a candidate is its run number CONFIRM_RUNS + r: fresh noise,
# never one of the search's own runs.
CONFIRM_RUNS = 10_000


class ScriptedProbe:
    """A load probe whose answers are a script: each reading's run is busy or not in turn
    (``busy()`` is asked once per run, after it)."""

    def __init__(self, busy: Callable[[], bool]):
        self.busy = busy

    def start(self) -> object:
        return None

    def others_cores(self, since: object) -> float | None:
        return 2.0 if self.busy() else 0.0


class FakeBackend:
    """Measures ``cand`` as ``estimate(w, cand, dev).total_s`` times log-normal noise
    (``sigma``: its log's standard deviation; 0 makes measured equal predicted).

    ``calls`` lists every ``(candidate, timeout_s, best_s)`` that ``measure`` was given, in
    order, so a test can tell what the search had measured and what it did not;
    ``leniencies`` what the search said of each, ``results`` what it got back, and
    ``confirms`` every ``(candidates, rounds)`` a confirmation was asked for.  ``kind`` is
    the device kind it stands in for (its tile bounds and memory rules; the CPU's by default)."""

    name = "fake"

    def __init__(self, w: Workload, dev: DeviceSpec, seed: int = 0, sigma: float = 0.05,
                 settings: MeasureSettings = MeasureSettings(),
                 fails: Callable[[Candidate], str | None] = lambda cand: None,
                 hangs: Callable[[Candidate], bool] = lambda cand: False,
                 kind: BackendKind | None = None,
                 busy: Callable[[Candidate, int], bool] = lambda cand, run: False,
                 busy_factor: float = 3.0):
        self.w, self.dev, self.seed, self.sigma = w, dev, seed, sigma
        self.settings = settings
        self.kind = kind if kind is not None else backend_kind("cpu")
        self.fails, self.hangs = fails, hangs
        self.busy, self.busy_factor = busy, busy_factor
        self.calls: list[tuple[Candidate, float, float | None]] = []
        self.leniencies: list[Leniency] = []
        self.results: list[Measurement] = []
        self.confirms: list[tuple[tuple[Candidate, ...], int]] = []
        self.closed = False
        self.prepared_after: int | None = None   # measurements made when prepare() came
        self._predicted: dict[str, CostEstimate] = {}

    def run_time(self, cand: Candidate, run: int) -> float:
        """Seconds of run number ``run`` (0: the checked one) of ``cand`` (``busy_factor``
        times longer when the script says the machine was busy)."""
        seq = np.random.SeedSequence([self.seed, int(cand.key, 16), run])
        noise = float(np.random.default_rng(seq).lognormal(0.0, self.sigma))
        load = self.busy_factor if self.busy(cand, run) else 1.0
        return self._estimate(cand).total_s * noise * load

    def _estimate(self, cand: Candidate):
        if cand.key not in self._predicted:
            self._predicted[cand.key] = estimate(self.w, cand, self.dev)
        return self._predicted[cand.key]

    def group_times(self, cand: Candidate, seconds: float) -> tuple[tuple[str, float], ...]:
        """Each group's seconds of a run of ``seconds``: the model's shares of it."""
        est = self._estimate(cand)
        return tuple((g.anchor, g.predicted_s * seconds / est.total_s) for g in est.groups)

    def _timed(self, cand: Candidate, runs, spent: list[float], cutoff_of, repeats: int,
               warmup: int = 0) -> tuple[list[float], int]:
        """(times, runs under load) of timed_runs over run numbers drawn from ``runs``, their
        seconds added to ``spent``; the load probe answers from the same script as the times.
        ``cutoff_of(watch)`` is the cutoff to stop by."""
        last: list[int] = []

        def run() -> float:
            last[:] = [next(runs)]
            spent.append(self.run_time(cand, last[0]))
            return spent[-1]
        watch = LoadWatch(ScriptedProbe(lambda: self.busy(cand, last[0])),
                          self.settings.busy_cores)
        return timed_runs(run, run, warmup, repeats, cutoff_of(watch)), watch.loaded

    def measure(self, cand: Candidate, timeout_s: float, best_s: float | None,
                leniency: Leniency = Leniency()) -> Measurement:
        self.calls.append((cand, timeout_s, best_s))
        self.leniencies.append(leniency)
        m = self._measure(cand, timeout_s, best_s, leniency)
        self.results.append(m)
        return m

    def _measure(self, cand: Candidate, timeout_s: float, best_s: float | None,
                 leniency: Leniency) -> Measurement:
        error = self.fails(cand)
        if error:
            return Measurement(Status.FAILED, error=error)
        if self.hangs(cand):
            return Measurement(Status.FAILED, error=timeout_message(timeout_s))
        s, spent = self.settings, []
        times, loaded = self._timed(cand, itertools.count(), spent,
                                    lambda watch: s.cutoff(best_s, leniency, watch),
                                    s.repeats, s.warmup)
        if sum(spent) > timeout_s:       # warm-up runs count against the limit too
            return Measurement(Status.FAILED, error=timeout_message(timeout_s))
        median = statistics.median(times)
        return Measurement(Status.OK, median, tuple(times), 0.0, loaded_runs=loaded,
                           groups=self.group_times(cand, median))

    def confirm(self, cands: Sequence[Candidate], rounds: int, timeout_s: float
                ) -> list[Measurement]:
        """Each candidate's rounds: one run each (run numbers from CONFIRM_RUNS on; a run
        under load is made again, as the worker does), or its scripted failure.  A hang, or
        more than ``timeout_s`` in all, fails the whole confirmation, as it stops the worker."""
        self.confirms.append((tuple(cands), rounds))
        s, spent, out = self.settings, [], []
        for cand in cands:
            if error := self.fails(cand):
                out.append(Measurement(Status.FAILED, error=error))
                continue
            runs, times, loaded = itertools.count(CONFIRM_RUNS), [], 0
            for _ in range(rounds):
                got, busy = self._timed(cand, runs, spent,
                                        lambda watch: s.cutoff(None, watch=watch), 1)
                times.append(statistics.median(got))
                loaded += busy
            out.append(Measurement(Status.OK, statistics.median(times), tuple(times), 0.0,
                                   loaded_runs=loaded))
        if sum(spent) > timeout_s or any(self.hangs(c) for c in cands):
            return [Measurement(Status.FAILED, error=timeout_message(timeout_s))] * len(cands)
        return out

    def prepare(self) -> None:
        self.prepared_after = len(self.calls)    # nothing to start: noted for the tests

    def reclaimable_bytes(self) -> int:
        return 0                         # holds no memory between candidates

    def close(self) -> None:
        self.closed = True
