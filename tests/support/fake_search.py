"""Searches on the fake backend for the search-logic tests: a device, a plan key, cheap knobs,
and small readers of the trial rows a search leaves in the plan database."""
from __future__ import annotations

import dataclasses
import json

from costmodel import estimate
from costmodel.devices import CPU_DEFAULT
from db.keys import SCHEMA_VERSION, PlanKey, canonical_json
from db.records import BestPlan, StoredTrial
from db.store import PlanDB
from search_spaces.candidate import Candidate
from search_spaces.plans import named_plan
from search_spaces.space import SPACE_VERSION

from autotune.backends.fake import FakeBackend
from autotune.search.config import SearchConfig, SearchResult
from autotune.search.loop import search

# The model these searches run on is pinned: the tests' premises (at the small dims, some
# random candidates beat every named plan in prediction, and the named plans' order) were
# written against a per-tile overhead of 0.2 us. The cpu preset's measured 10 ns makes greedy's
# one-element tiles the favourite at these dims and would leave the tests asserting less.
# fine tiles dear: 0.2 us per tile and member, however they are dealt (the landscape these
# tests were written on: the named plans apart, greedy's one-element tiles the slowest)
DEV = dataclasses.replace(CPU_DEFAULT, tile_overhead_s=0.2e-6, tile_setup_s=0.2e-6)
NAMED = ("unfused", "heuristic", "greedy")
REUSED = "same candidate as an earlier trial"
# a small model pool, no climbing, the random sampler (TPE's own sampling costs ~20 ms a
# trial), no local search unless a test asks for it (trial numbers never reach 1 modulo
# 10**6 after the queue) and no confirmation at the end unless a test asks for one (its rows
# are tested in test_confirm.py): each search takes a few tens of milliseconds
CHEAP = SearchConfig(budget=10, sampler="random", model_pool=10, model_seeds=2, climb_rounds=0,
                     local_every=10 ** 6, confirm_rounds=0)


def unchained(w):
    """``w`` with its chains turned off (``chains = false`` in its [space]): the tests that pin
    the order of a search's first trials pin it for the named plans and the model's picks."""
    return dataclasses.replace(w, space_json=json.dumps({**w.space, "chains": False}))


def named_in_order(w, space) -> list[str]:
    """The named plans in the order a search measures them: fastest predicted first."""
    return sorted(NAMED, key=lambda n: estimate(w, named_plan(space, n), DEV).total_s)


def fake_key(w) -> PlanKey:
    """A plan key for ``w`` on the fake device (no environment detected)."""
    return PlanKey(w.hash, SPACE_VERSION, canonical_json({"name": "fake", "kind": "cpu"}),
                   canonical_json({}), SCHEMA_VERSION)


def run(w, space, db: PlanDB, config: SearchConfig, backend: FakeBackend | None = None,
        **kw) -> tuple[SearchResult, list[StoredTrial], FakeBackend]:
    """One search of ``w`` on the fake backend: (result, the key's trial rows, the backend)."""
    backend = backend if backend is not None else FakeBackend(w, DEV)
    result = search(w, space, backend, db, fake_key(w), DEV, config, **kw)
    return result, db.trials(result.key.key), backend


def cand_of(row: StoredTrial) -> Candidate:
    return row.to_candidate()


def name_of(row: StoredTrial) -> str:
    return row.name


def params_of_row(row: StoredTrial) -> dict:
    return row.params


def measured_keys(backend) -> list[str]:
    """Keys of the candidates a fake backend was asked to measure, in order."""
    return [cand.key for cand, _, _ in backend.calls]


def ran(row: StoredTrial) -> bool:
    """The trial measured its candidate (not pruned, not a repeat of an earlier one)."""
    return row.status != "pruned" and row.error != REUSED


def best_before(rows: list[StoredTrial]) -> tuple[float, float] | None:
    """(measured, predicted) seconds of the fastest ok trial among ``rows`` (the first of
    equals, as the search keeps it), or None."""
    best = None
    for r in rows:
        if r.status == "ok" and (best is None or r.measured_s < best[0]):
            best = (r.measured_s, r.predicted_s)
    return best


def assert_best_is_min_ok(db: PlanDB, key: PlanKey, rows: list[StoredTrial]) -> BestPlan:
    """The stored best plan is the fastest ok trial."""
    ok = [r for r in rows if r.status == "ok"]
    best = db.best(key.key)
    assert ok and best is not None
    assert best.measured_s == min(r.measured_s for r in ok)
    winner = next(r for r in ok if r.number == best.trial_number
                  and r.study == best.study)
    assert winner.candidate == best.candidate
    return best
