"""Where several workers of one search meet: Optuna storage by URL, and the shared study's name."""
from __future__ import annotations

import random
import time

import optuna

from db.keys import PlanKey

from autotune.search.config import SearchConfig


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """``journal:PATH`` -> a journal file (any shared file system with working locks);
    anything else is an RDB URL (``postgresql://user:pw@host/db``, ``sqlite:///file.db``)."""
    what = ("--storage {!r}: {}; use journal:PATH or an RDB URL such as "
            "postgresql://user:password@host/database")
    if url.startswith("journal:"):
        path = url[len("journal:"):]
        if not path:
            raise ValueError(what.format(url, "no path after journal:"))
        from optuna.storages.journal import JournalFileBackend
        try:
            return optuna.storages.JournalStorage(JournalFileBackend(path))
        except OSError as e:
            raise ValueError(what.format(url, f"cannot open the journal file ({e})")) from None
    if "://" not in url:
        raise ValueError(what.format(url, "not a storage URL"))
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    for attempt in range(3):
        try:
            # wrapped as optuna.load_study would wrap it, so that our atomic claims and the
            # study's reads go through one object
            return optuna.storages._CachedStorage(optuna.storages.RDBStorage(
                url, engine_kwargs=kwargs))
        except Exception as e:  # driver missing, server down, bad URL: one line for the CLI
            if attempt < 2 and "already exists" in str(e):
                # workers starting together all create the tables; the losers retry
                time.sleep(0.5 + random.random())
                continue
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ValueError(what.format(url, f"cannot open it ({type(e).__name__}: {first})")
                             ) from None
    raise AssertionError("unreachable")


def shared_study_name(key: PlanKey, config: SearchConfig) -> str:
    """The Optuna study every worker of one search joins (and its study in the plan DB)."""
    return f"autotune-{key.key[:16]}-{config.sampler}-seed{config.seed}"
