"""Which plan runs a workload at the dims of a call.

The plan cached for exactly these dims; else the plan tuned at the nearest shape of the same
program, adapted (:mod:`autotune.interop.adapt`) and verified once against the float64
reference; else the heuristic plan.  Each but the first comes with a warning that says which
plan runs and the command that tunes this shape.  A resolved plan is kept for the rest of the
process, so a call costs no database query (:func:`forget` drops them, after a search in the
same process say).
"""
from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from db.keys import PlanKey
from db.store import default_db_path
from search_spaces.plans import named_plan
from search_spaces.workload import Workload

from autotune.api import (NoCachedPlanWarning, cache_root, db_exists, make_executable, open_db,
                          space_for, stale_reasons_for)
from autotune.backends.base import Plan
from autotune.backends.factory import resolve
from autotune.interop.adapt import adapt, tuned_shapes, verified
from autotune.interop.dims import at_dims


class PlanSource(StrEnum):
    """Where the plan that runs came from."""
    EXACT = "exact"           # tuned at exactly these dims
    NEAREST = "nearest"       # tuned at the nearest shape, adapted, verified here
    HEURISTIC = "heuristic"   # nothing usable was tuned: the cost model's heuristic plan


class AdaptedPlanWarning(UserWarning):
    """A plan tuned at other dims runs these (its tiles clamped, verified once)."""


@dataclass(frozen=True)
class Resolution:
    """Which plan runs ``workload`` at ``dims`` on ``device``, and why: its candidate (JSON),
    the dims it was tuned at (an adapted plan), its verification error (an adapted plan) and
    the warning given ("" for an exact plan)."""
    source: PlanSource
    workload: str
    dims: tuple[tuple[str, int], ...]
    device: str
    candidate: dict
    tuned_dims: tuple[tuple[str, int], ...] = ()
    rel_err: float | None = None
    note: str = ""


_CACHE: dict[tuple[str, str, str], tuple[Plan, Resolution]] = {}
_LOCK = threading.Lock()


def db_path(db) -> str:
    """The database a lookup reads, as one string for cache keys."""
    return str(Path(db if db is not None else default_db_path()).expanduser().resolve())


def plan_for(w: Workload, device: str = "cpu", db=None) -> tuple[Plan, Resolution]:
    """The plan for ``w`` (at its dims) on ``device``: resolved and compiled on the first
    call for this (workload, device, database), then the same one."""
    key = (w.hash, device, db_path(db))
    with _LOCK:      # two threads asking for one shape compile and verify it once
        if key not in _CACHE:
            _CACHE[key] = _resolve(w, device, db)
        return _CACHE[key]


def forget() -> None:
    """Drop every resolved plan: the next call looks in the database again."""
    with _LOCK:
        _CACHE.clear()


def _text(dims) -> str:
    return ",".join(f"{d}={v}" for d, v in dims)


def _resolve(w: Workload, device: str, db) -> tuple[Plan, Resolution]:
    env = resolve(device)
    root = cache_root(Path(db) if db is not None else None)
    key = PlanKey.for_env(w.hash, env)
    best, shapes = None, []
    if db_exists(db):     # a lookup leaves no empty database behind
        store = open_db(db)
        try:
            best = store.best(key.key)
            shapes = [] if best else tuned_shapes(w, key, store)
        finally:
            store.close()
    if best is not None:
        cand = best.to_candidate()
        return make_executable(w, cand, env.kind, root), \
            Resolution(PlanSource.EXACT, w.name, w.dims, env.name, cand.to_dict())
    tune = (f"tune it with `autotune search {w.source.removeprefix('builtin:') or w.name} "
            f"--dims {_text(w.dims)} --device {env.kind}`")
    failed = ""
    if shapes:
        near = shapes[0]
        cand = adapt(near.best.to_candidate(), at_dims(w, dict(near.dims)), w)
        try:
            plan = make_executable(w, cand, env.kind, root)
            err, why = verified(plan, w)
        except Exception as e:    # compiling the adapted plan failed: the heuristic runs
            err, why = float("inf"), f"{type(e).__name__}: {e}".splitlines()[0]
        if not why:
            note = (f"{w.name}: no plan tuned at {_text(w.dims)} on {env.name}; running the "
                    f"plan tuned at {_text(near.dims)}, adapted to these extents (tiles "
                    f"clamped, layouts kept) and verified (relative error {err:.1e}); {tune}")
            warnings.warn(note, AdaptedPlanWarning, stacklevel=2)
            return plan, Resolution(PlanSource.NEAREST, w.name, w.dims, env.name,
                                    cand.to_dict(), near.dims, err, note)
        failed = (f"the plan tuned at {_text(near.dims)} failed verification at these dims "
                  f"({why}); ")
    stale = stale_reasons_for(w, device, db)
    why_none = f"plans cached for it do not apply here ({', '.join(stale)} changed)" if stale \
        else "no plan tuned for it at any dims" if not failed else ""
    note = (f"{w.name} at {_text(w.dims)} on {env.name}: {failed}{why_none}"
            f"{'; ' if why_none else ''}using the heuristic plan; {tune}")
    warnings.warn(note, NoCachedPlanWarning, stacklevel=2)
    cand = named_plan(space_for(w, env.kind), "heuristic")
    return make_executable(w, cand, env.kind, root), \
        Resolution(PlanSource.HEURISTIC, w.name, w.dims, env.name, cand.to_dict(), note=note)
