"""A backend that runs nothing: the cost model's predicted time times seeded noise.

For testing the search's own logic (pruning, local search, proposals, resume, the shared study)
in milliseconds, without a compiler or a measuring process.  A candidate's runs are
deterministic per (seed, candidate, run number), so two searches that measure the same
candidates see the same times in any order, in any process.  Early stops are the worker's own
(:func:`autotune.backends.base.timed_runs`).  Failures are scripted: ``fails(cand)`` returns an error
text for a candidate that should fail, ``hangs(cand)`` marks one that times out.
"""
from __future__ import annotations

import itertools
import statistics
from typing import Callable

import numpy as np

from costmodel import estimate
from costmodel.devices import DeviceSpec
from db.records import Status
from search_spaces.candidate import Candidate
from search_spaces.workload import Workload

from autotune.backends.base import BackendKind, Measurement, MeasureSettings, timed_runs
from autotune.backends.factory import backend_kind
from autotune.backends.worker import timeout_message


class FakeBackend:
    """Measures ``cand`` as ``estimate(w, cand, dev).total_s`` times log-normal noise
    (``sigma``: its log's standard deviation; 0 makes measured equal predicted).

    ``calls`` lists every ``(candidate, timeout_s, best_s)`` that ``measure`` was given, in
    order, so a test can tell what the search had measured and what it did not.  ``kind`` is
    the device kind it stands in for (its tile bounds and memory rules; the CPU's by default)."""

    name = "fake"

    def __init__(self, w: Workload, dev: DeviceSpec, seed: int = 0, sigma: float = 0.05,
                 settings: MeasureSettings = MeasureSettings(),
                 fails: Callable[[Candidate], str | None] = lambda cand: None,
                 hangs: Callable[[Candidate], bool] = lambda cand: False,
                 kind: BackendKind | None = None):
        self.w, self.dev, self.seed, self.sigma = w, dev, seed, sigma
        self.settings = settings
        self.kind = kind if kind is not None else backend_kind("cpu")
        self.fails, self.hangs = fails, hangs
        self.calls: list[tuple[Candidate, float, float | None]] = []
        self.closed = False
        self._predicted: dict[str, float] = {}

    def run_time(self, cand: Candidate, run: int) -> float:
        """Seconds of run number ``run`` (0: the checked one) of ``cand``."""
        if cand.key not in self._predicted:
            self._predicted[cand.key] = estimate(self.w, cand, self.dev).total_s
        seq = np.random.SeedSequence([self.seed, int(cand.key, 16), run])
        return self._predicted[cand.key] * float(np.random.default_rng(seq).lognormal(
            0.0, self.sigma))

    def measure(self, cand: Candidate, timeout_s: float, best_s: float | None) -> Measurement:
        self.calls.append((cand, timeout_s, best_s))
        error = self.fails(cand)
        if error:
            return Measurement(Status.FAILED, error=error)
        if self.hangs(cand):
            return Measurement(Status.FAILED, error=timeout_message(timeout_s))
        runs = itertools.count()
        spent = [self.run_time(cand, next(runs))]

        def run() -> float:
            spent.append(self.run_time(cand, next(runs)))
            return spent[-1]
        s = self.settings
        times = tuple(timed_runs(spent[0], run, s.warmup, s.repeats, s.cutoff(best_s)))
        if sum(spent) > timeout_s:       # warm-up runs count against the limit too
            return Measurement(Status.FAILED, error=timeout_message(timeout_s))
        return Measurement(Status.OK, statistics.median(times), times, 0.0)

    def reclaimable_bytes(self) -> int:
        return 0                         # holds no memory between candidates

    def close(self) -> None:
        self.closed = True
