"""Compiled kernels and float64 references shared by the suite's searches.

A search keeps both beside its plan database (``autotune.api.cache_root``), keyed by content
(the kernel's source and flags; the workload's hash and the seed), so databases in one folder
share them.  Tests each get a database of their own, and many search the same small workloads
with the same seeds: compiling the same candidates again in every test cost minutes of
compiler time per run of the suite (the four reliability tests alone ~3 minutes).  A test that
links its folder's ``kernels`` and ``refs`` to the session's reuses what an earlier test built,
exactly as one user's databases in one folder do.
"""
from __future__ import annotations

from pathlib import Path

from autotune.cache_dirs import CACHE_DIRS


def make_shared(root: Path) -> Path:
    for name in CACHE_DIRS:
        (root / name).mkdir(parents=True, exist_ok=True)
    return root


def link_caches(folder: Path, shared: Path) -> Path:
    """``folder`` with its ``kernels`` and ``refs`` linked to ``shared``'s; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in CACHE_DIRS:
        (folder / name).symlink_to(shared / name, target_is_directory=True)
    return folder
