"""A make_plan for the measuring worker whose every run is a long compiled call
(``"tests.support.slow_plans:SlowPlan"``), for the tests that a worker never outlives its search
and stops itself at its run timeout.

When it runs, the plan writes its process id to ``<cache_dir>/running-<pid>`` (so a test knows
the worker is inside a candidate, and which process it is), then calls libc's ``sleep(1000)``
through :class:`ctypes.PyDLL`, which keeps the GIL for the whole call: no Python code, no
Python signal handler and no other Python thread of the worker runs until it returns, as in a
long generated kernel.
"""
from __future__ import annotations

import ctypes
import os
from pathlib import Path

SLEEP_S = 1000


def running_markers(cache_dir) -> list[Path]:
    """The marker files of workers that are running a SlowPlan now (or were)."""
    return sorted(Path(cache_dir).glob("running-*"))


class SlowPlan:
    """A :class:`autotune.backends.base.Plan` like CompiledPlan whose every run never returns
    in a test's lifetime."""

    def __init__(self, w, cand, cache_dir, pool=None):
        self.cache_dir = Path(cache_dir)

    def timed_call(self, inputs, warmup=0, repeats=3, check=None, cutoff=None):
        return self(**inputs), []

    def group_seconds(self) -> dict[str, float]:
        return {}

    def release(self) -> None:
        pass

    def __call__(self, **inputs):
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        (self.cache_dir / f"running-{os.getpid()}").write_text(str(os.getpid()))
        ctypes.PyDLL(None).sleep(SLEEP_S)          # holds the GIL throughout
        raise RuntimeError("slept through")


class SlowSecondRun(SlowPlan):
    """Its checked first run takes 10 ms; every run after it is SlowPlan's endless call: the
    shape of a candidate whose repeats a per-run cap must stop."""

    def timed_call(self, inputs, warmup=0, repeats=3, check=None, cutoff=None):
        from autotune.backends.base import timed_runs
        return {}, timed_runs(lambda: 0.01, lambda: self(**inputs), warmup, repeats, cutoff)
