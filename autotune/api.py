"""The library surface beyond loading workloads: search, load_best, named plans.

``fn = autotune.load_best(w, device="cpu")`` returns a callable ``fn(**inputs) -> {output: array}``
running the cached best plan for this workload on this device and library versions, or the
heuristic plan with a warning when nothing valid is cached.
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from db.errors import missing_db
from db.keys import PlanKey
from db.records import BestPlan
from db.store import PlanDB, default_db_path
from search_spaces.candidate import Candidate
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace
from search_spaces.workload import Workload

from autotune.backends.base import MeasureSettings, Plan
from autotune.backends.factory import backend_kind, resolve
from autotune.cache_dirs import kernels_dir
from autotune.search.config import SearchConfig, SearchResult
from autotune.search.loop import search


class NoCachedPlanWarning(UserWarning):
    """load_best found no plan for this key and fell back to the heuristic plan."""


def cache_root(db_path: Path | None = None) -> Path:
    """Where compiled kernels and cached references live: beside the plan database."""
    return (Path(db_path) if db_path else default_db_path()).expanduser().resolve().parent


def plan_db_path(db: str | os.PathLike | None = None) -> Path:
    """The plan database's path: ``db``, else the default one."""
    return Path(db if db is not None else default_db_path())


def db_exists(db: str | os.PathLike | None = None) -> bool:
    """Whether the plan database ``db`` (else the default one) is there: a lookup that finds
    none answers "nothing cached" without creating it."""
    return plan_db_path(db).expanduser().exists()


def open_db(db: str | os.PathLike | None = None, create: bool = True) -> PlanDB:
    """The plan database; ``create=False`` (commands that only read it) refuses one that does
    not exist, naming the path and the fix, instead of leaving an empty one (and its folders)
    behind a mistyped ``--db``."""
    if not create and not db_exists(db):
        raise missing_db(plan_db_path(db).expanduser(), given=db is not None)
    return PlanDB(plan_db_path(db))


def space_for(w: Workload, kind: str) -> SearchSpace:
    return SearchSpace(w, backend_kind(kind).tile_bounds)


def make_executable(w: Workload, cand: Candidate, kind: str, cache_dir: Path) -> Plan:
    """Compile ``cand`` for the device kind; returns ``fn(**inputs) -> outputs``."""
    return backend_kind(kind).make_plan(w, cand, kernels_dir(cache_dir))


def run_search(w: Workload, device: str = "cpu", db: str | os.PathLike | None = None,
               config: SearchConfig = SearchConfig(), settings: MeasureSettings = MeasureSettings(),
               on_trial=None) -> SearchResult:
    """Search, verify and cache the best plan for ``w`` on ``device``."""
    env = resolve(device)
    store = open_db(db)
    try:
        key = PlanKey.for_env(w.hash, env)
        root = cache_root(store.path)
        kind = backend_kind(env.kind)
        backend = kind.backend(w, config.seed, root, settings)
        probe = kind.memory_probe()

        def available() -> int | None:
            free = probe()
            return None if free is None else free + backend.reclaimable_bytes()
        try:
            return search(w, SearchSpace(w, kind.tile_bounds), backend, store, key,
                          kind.device_spec(env), config, on_trial, memory_available=available)
        finally:
            backend.close()
    finally:
        store.close()


def best_candidate(w: Workload, device: str = "cpu", db=None
                   ) -> tuple[Candidate | None, BestPlan | None]:
    """The cached best plan for ``w`` on ``device`` (its candidate and its record), or Nones
    (a database that does not exist is not created to say so)."""
    env = resolve(device)
    if not db_exists(db):
        return None, None
    store = open_db(db)
    try:
        best = store.best(PlanKey.for_env(w.hash, env).key)
    finally:
        store.close()
    return (best.to_candidate(), best) if best else (None, None)


def stale_reasons_for(w: Workload, device: str = "cpu", db=None) -> list[str]:
    """Why plans cached for ``w`` do not apply here: the parts of their keys that differ
    from this machine's ("device", "library versions", ...); [] if none is cached."""
    from db.keys import stale_reasons
    current = PlanKey.for_env(w.hash, resolve(device))
    if not db_exists(db):
        return []
    store = open_db(db)
    try:
        rows = store.best_rows(w.hash)
    finally:
        store.close()
    reasons: list[str] = []
    for b in rows:
        if b.plan_key != current.key:
            reasons += [x for x in stale_reasons(b.key.parts(), current) if x not in reasons]
    return reasons


def load_best(w: Workload, device: str = "cpu", db: str | os.PathLike | None = None):
    """The cached best plan for (workload, device, versions) as a callable; else the heuristic
    plan, with a NoCachedPlanWarning.  A plan cached for another device or version is never
    used: its key differs (the warning says which part changed)."""
    env = resolve(device)
    cand, _ = best_candidate(w, device, db)
    if cand is None:
        stale = stale_reasons_for(w, device, db)
        why = (f"plans cached for {w.name} do not apply here ({', '.join(stale)} changed)"
               if stale else f"no cached plan for {w.name}")
        warnings.warn(f"{why} on {env.name} with these library versions; "
                      f"using the heuristic plan (run `autotune search` to tune it)",
                      NoCachedPlanWarning, stacklevel=2)
        cand = named_plan(space_for(w, env.kind), "heuristic")
    root = cache_root(Path(db) if db else None)
    return make_executable(w, cand, env.kind, root)
