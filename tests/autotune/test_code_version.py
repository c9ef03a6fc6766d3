"""The code version in every plan key: a digest of the generators' sources that changes with
any of them (and nothing else), detected into the environment's libraries."""
from __future__ import annotations

import shutil

from autotune.code_version import (LIBRARY, ROOT, SOURCES, code_version, digest,
                                   stored_code_version)
from autotune.environment import detect_cpu


def _tree(tmp_path):
    for rel in ("autotune/backends/cpu/codegen.py", "autotune/backends/loops.py",
                "search_spaces/footprint.py", "autotune/search/loop.py", "autotune/threads.py"):
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# {rel}\n")
    return tmp_path


def test_the_digest_follows_the_generators_sources_and_nothing_else(tmp_path):
    root = _tree(tmp_path)
    base = digest(root)
    assert len(base) == 16 and digest(root) == base
    (root / "autotune/search/loop.py").write_text("# the search, not a generator\n")
    (root / "autotune/backends/README.md").write_text("not Python\n")
    assert digest(root) == base
    gen = root / "autotune/backends/cpu/codegen.py"
    gen.write_text(gen.read_text() + "PRAGMA = False\n")
    changed = digest(root)
    assert changed != base
    (root / "search_spaces/footprint.py").rename(root / "search_spaces/orders.py")
    assert digest(root) not in (base, changed)          # a path is part of it too
    shutil.copy(root / "search_spaces/orders.py", root / "search_spaces/new.py")
    assert len({base, changed, digest(root)}) == 3
    # the thread pools' settings, a single file among the sources
    before = digest(root)
    (root / "autotune/threads.py").write_text("GOMP_SPINCOUNT = 1\n")
    assert digest(root) != before


def test_this_processes_code_is_in_the_environment():
    assert all((ROOT / s).exists() for s in SOURCES)
    assert code_version() == digest(ROOT)
    assert dict(detect_cpu().libraries)[LIBRARY] == code_version()


def test_a_stored_row_names_its_code_version_or_none():
    assert stored_code_version('{"codegen": "abc", "numpy": "2"}') == "abc"
    assert stored_code_version('{"numpy": "2"}') == ""          # rows from before it
    assert stored_code_version("not json") == ""
