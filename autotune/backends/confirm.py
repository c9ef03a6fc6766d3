"""A confirmation in the measuring worker: finalists re-measured side by side.

A search's single runs are each taken at their own moment; a machine that was busy for one of
them makes its candidate look slow (or, by luck, another look fast).  A confirmation measures
the finalists in one process, in interleaved rounds: every finalist is compiled once and
verified against the reference, then each round runs each of them once, in a shuffled order,
so that a slow minute of the machine falls on all of them alike.  A run under load is made
again (:func:`autotune.backends.base.timed_runs`).

Each round builds the finalist's plan anew from its compiled kernels and buffers from the
worker's pool, and gives them back after its runs: one plan's memory at a time, as in the
search.  A round's figure is taken as a bench round's is (:func:`calls_per_round`): a plan of a
few milliseconds runs back to back for MIN_ROUND_S (its first round's checked run tells how
many calls that is) and the round's figure is the median of those calls; one call of a few
milliseconds is as likely to catch a busy moment of a shared host as not (bilinear's cached
plan won a confirmation of single calls by 5 % over the unfused plan, 2.42 against 2.56 ms,
and ran 1.20x the unfused plan's time in every round of the bench that followed).
"""
from __future__ import annotations

import statistics
import traceback
from dataclasses import dataclass

import numpy as np

from db.records import Status
from search_spaces.candidate import Candidate
from search_spaces.workload import Workload

from autotune.backends.base import (Arrays, BufferPool, Measurement, MeasureSettings,
                                    PlanFactory, calls_per_round, verify)
from autotune.backends.load import LoadProbe, LoadWatch


@dataclass(frozen=True)
class ConfirmRequest:
    """Parent to worker: re-measure ``candidates`` in ``rounds`` interleaved rounds (the
    order of each round drawn from ``seed``)."""
    candidates: tuple[Candidate, ...]
    rounds: int
    settings: MeasureSettings
    seed: int = 0
    timeout_s: float | None = None      # the worker stops itself past this (None: never)


@dataclass(frozen=True)
class ConfirmReply:
    """Worker to parent: one measurement per candidate, in the request's order (ok: ``times``
    holds each round's seconds; failed: its error), and the bytes the buffer pool holds."""
    measurements: tuple[Measurement, ...]
    pooled_bytes: int


def _failure(e: BaseException) -> str:
    if isinstance(e, MemoryError):
        return "out of memory while running the candidate (MemoryError)"
    return traceback.format_exception_only(type(e), e)[-1].strip()[:500]


class _Finalist:
    """One candidate's state through the confirmation."""

    def __init__(self, cand: Candidate, watch: LoadWatch):
        self.cand, self.watch = cand, watch
        self.times: list[float] = []     # each round's figure
        self.calls = 1                   # calls a round (set by the first, checked run)
        self.rel_err: float | None = None
        self.error = ""

    def measurement(self) -> Measurement:
        if self.error:
            return Measurement(Status.FAILED, rel_err=self.rel_err, error=self.error,
                               loaded_runs=self.watch.loaded)
        return Measurement(Status.OK, statistics.median(self.times), tuple(self.times),
                           self.rel_err, loaded_runs=self.watch.loaded)


def run_confirmation(w: Workload, req: ConfirmRequest, inputs: Arrays, ref: Arrays,
                     kernels: object, make_plan: PlanFactory, pool: BufferPool,
                     probe: LoadProbe) -> tuple[Measurement, ...]:
    """The measurements of a :class:`ConfirmRequest` (``kernels``: the kernel cache folder)."""
    s = req.settings
    finalists = [_Finalist(c, LoadWatch(probe, s.busy_cores)) for c in req.candidates]
    for f in finalists:                 # compile each once: the rounds load its kernels
        plan = None
        try:
            plan = make_plan(w, f.cand, kernels, pool=pool)
        except Exception as e:  # compile errors, codegen bugs: this finalist fails
            f.error = _failure(e)
        finally:
            if plan is not None:
                plan.release()
    rng = np.random.default_rng(req.seed)
    for r in range(req.rounds):
        for i in rng.permutation(len(finalists)):
            f = finalists[i]
            if not f.error:
                _round(w, f, r == 0, inputs, ref, make_plan, kernels, pool, s)
    return tuple(f.measurement() for f in finalists)


def _round(w: Workload, f: _Finalist, checked: bool, inputs: Arrays, ref: Arrays,
           make_plan: PlanFactory, kernels, pool: BufferPool, s: MeasureSettings) -> None:
    """One round of ``f``: its calls, timed (its first run verified against the reference
    first, which also tells how many calls its rounds make)."""
    verdict: list[tuple[float, str]] = []

    def check(outs: Arrays) -> bool:
        verdict.append(verify(outs, ref, w.rtol))
        return not verdict[-1][1]
    plan = None
    try:
        plan = make_plan(w, f.cand, kernels, pool=pool)
        times: list[float] = []
        if checked:
            outs, times = plan.timed_call(inputs, 0, 1, check, s.cutoff(None, watch=f.watch))
            if not verdict:         # a plan that skipped the check
                check(outs)
            del outs
            if verdict[-1][1] or not times:
                f.rel_err, f.error = verdict[-1][0], verdict[-1][1] or "its checked run " \
                    "returned no time"
                return
            f.calls = calls_per_round(statistics.median(times))
        if not checked or f.calls > 1:
            outs, times = plan.timed_call(inputs, 0, f.calls, None,
                                          s.cutoff(None, watch=f.watch))
            del outs
    except Exception as e:
        f.error = _failure(e)
        return
    finally:
        if plan is not None:
            plan.release()
    if verdict:
        f.rel_err = verdict[-1][0]
    f.times.append(statistics.median(times))
