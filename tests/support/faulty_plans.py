"""A make_plan for the measuring worker that misbehaves on purpose (used by the search and
worker tests as ``"faulty_plans:FaultyPlan"``).

It wraps the real CPU plan and, depending on the candidate:

* ``unfused``   -> the process dies (``os._exit(3)``) when the plan runs: a crash;
* ``greedy``    -> it sleeps 1000 s: a hang the parent must kill on its timeout;
* ``heuristic`` -> it returns every output multiplied by 1.01: a wrong result;
* ``nan``, and the first unnamed candidate it is given -> NaN in an output;
* anything else -> the real outputs.

"The first unnamed candidate" survives worker restarts: its key is claimed in a marker file
(:data:`MARKER`) in the kernel cache folder.  :func:`behaviour` is the single source of truth,
so the tests predict each trial's fate with it and :func:`nan_key`.
"""
from __future__ import annotations

import os
import time

import numpy as np

from pathlib import Path

from autotune.backends.cpu.executor import CompiledPlan

BY_NAME = {"unfused": "crash", "greedy": "hang", "heuristic": "wrong", "nan": "nan"}
MARKER = "faulty_nan_key"


def behaviour(cand, nan_candidate_key: str | None = None) -> str:
    """"crash" | "hang" | "wrong" | "nan" | "ok" for a candidate."""
    if cand.name in BY_NAME:
        return BY_NAME[cand.name]
    if not cand.name and cand.key == nan_candidate_key:
        return "nan"
    return "ok"


def nan_key(cache_dir) -> str | None:
    """The key of the unnamed candidate chosen to return NaN (None before any was seen)."""
    try:
        return (Path(cache_dir) / MARKER).read_text()
    except FileNotFoundError:
        return None


def _claim(cache_dir, cand) -> str | None:
    if not cand.name:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
        try:
            with open(Path(cache_dir) / MARKER, "x") as f:
                f.write(cand.key)
        except FileExistsError:
            pass
    return nan_key(cache_dir)


class FaultyPlan(CompiledPlan):
    """A CompiledPlan (a plan factory with the same signature) whose runs misbehave: the
    inherited ``timed_call`` runs them through :meth:`__call__`."""

    def __init__(self, w, cand, cache_dir, pool=None):
        super().__init__(w, cand, cache_dir, pool)
        self.mode = behaviour(cand, _claim(cache_dir, cand))

    def __call__(self, **inputs):
        if self.mode == "crash":
            os._exit(3)
        if self.mode == "hang":
            time.sleep(1000)
        outs = super().__call__(**inputs)
        if self.mode == "wrong":
            return {k: v * v.dtype.type(1.01) for k, v in outs.items()}
        if self.mode == "nan":
            bad = {}
            for k, v in outs.items():
                v = v.copy()
                v.flat[0] = np.nan
                bad[k] = v
            return bad
        return outs
