"""The version of the code that runs a plan: a digest of the sources that generate and execute
it, one part of every plan key (``Environment.libraries["codegen"]``) and of every group
signature the learned correction memorises (``costmodel.group_features.group_signature``).

Why: a measured time describes the code the backend emitted when it was taken, not the
candidate alone.  A change of code generation moves plans' times by large factors (dropping
``omp simd`` from gathering updates made attention's projections 20-30x faster, 2026-12-05,
bench/results/cpu-s37-9b7e75f) without changing the candidate encoding (``SPACE_VERSION``) or
any library's version, so a plan cached before it, and the group times stored with its trials,
would be trusted as if measured with today's code.  A digest of the sources cannot be
forgotten the way a hand-bumped number can; its cost is that any edit of those files, even a
comment, starts a fresh cache (the stale plans stay in the database, listed by ``autotune cache
prune --dry-run``, and still teach the correction through its features).

The sources: every Python file of ``autotune/backends`` (code generation, compilation,
execution on every device) and of ``search_spaces`` (the rewrites and loop orders the
generators follow), and ``autotune/threads.py`` (how long the two thread pools spin between
groups: it moved whole plans' times up to 1.9x), by path relative to the package root and by
content.
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("autotune/backends", "search_spaces", "autotune/threads.py")
LIBRARY = "codegen"          # its name among Environment.libraries


def digest(root: Path, sources: tuple[str, ...] = SOURCES) -> str:
    """sha256 (16 hex digits) over the relative path and bytes of every ``*.py`` under
    ``root``'s ``sources`` (folders, or single files), in sorted order."""
    h = hashlib.sha256()
    for src in sources:
        top = root / src
        for path in [top] if top.is_file() else sorted(top.rglob("*.py")):
            h.update(path.relative_to(root).as_posix().encode("utf-8") + b"\0")
            h.update(path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """The digest of the code running in this process (read once)."""
    return digest(ROOT)


def stored_code_version(libraries_json: str) -> str:
    """The code version a stored row was measured with ("" for rows from before it was
    recorded, which match no code)."""
    try:
        return str(json.loads(libraries_json).get(LIBRARY, ""))
    except (ValueError, AttributeError):
        return ""
