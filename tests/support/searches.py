"""A short real CPU search and the trial rows it stored, for the tests that check every trial
of a search on a workload they wrote (chains, where() conditions)."""
from __future__ import annotations

from autotune.api import run_search
from autotune.search.config import SearchConfig
from db.records import StoredTrial
from db.store import PlanDB


def search_rows(w, path, budget: int):
    """(result, trial rows) of a ``budget``-trial CPU search of ``w`` into the database at
    ``path`` (a small model pool: the trials, not the proposals, are what is tested)."""
    result = run_search(w, "cpu", db=path, config=SearchConfig(budget=budget, model_pool=30,
                                                                model_seeds=2))
    with PlanDB(path) as db:
        rows: list[StoredTrial] = db.trials(result.key.key)
    return result, rows
