"""The folders kept beside a plan database (``autotune.api.cache_root``): compiled kernels and
cached float64 references.  Both are keyed by content (a source's hash, a workload's hash and
seed), so any database's searches may share them (tests link one session's folders into each
test's own root: tests/support/caches.py)."""
from __future__ import annotations

from pathlib import Path

KERNELS = "kernels"     # compiled loop groups, generated kernels: k_<source hash>.so
REFS = "refs"           # float64 references: <workload hash>-seed<k>/<output>.npy
CACHE_DIRS = (KERNELS, REFS)


def kernels_dir(root: Path) -> Path:
    return Path(root) / KERNELS


def refs_dir(root: Path) -> Path:
    return Path(root) / REFS
