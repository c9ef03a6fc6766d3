"""Read-only diagnosis of a plan database file (``autotune db check`` and the open guard).

Nothing here writes to the database file: the header is read with plain ``open(..., "rb")``
and SQLite is only ever opened with ``mode=ro``.  (A read-only SQLite connection to a
WAL database may create the ``-wal``/``-shm`` side files; the database file itself is
never touched.)
"""
from __future__ import annotations

import sqlite3
import urllib.parse
from pathlib import Path

from .keys import SCHEMA_VERSION, PlanKey
from .records import CONFIRMATION_SUFFIX
from .schema import stored_version

MAGIC = b"SQLite format 3\x00"


def connect_ro(path: Path) -> sqlite3.Connection:
    """A read-only connection: ``mode=ro`` makes any write an error instead of a risk."""
    uri = "file:" + urllib.parse.quote(str(Path(path).resolve())) + "?mode=ro"
    return sqlite3.connect(uri, uri=True, timeout=30.0)


def _looks_like_text(head: bytes) -> bool:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return "\x00" not in text


def header_problem(path: Path) -> str | None:
    """What is wrong with the first bytes of ``path`` (None: looks like SQLite or empty).

    The 16-byte magic never changes after creation, so this is safe to read while
    other processes write the database.
    """
    with open(path, "rb") as f:
        head = f.read(100)
    if not head:
        return None  # empty: a database nobody has written yet (or being created)
    if head[:16] == MAGIC:
        return None
    if MAGIC.startswith(head):     # before the text test: the magic itself is text
        return f"is truncated ({len(head)} bytes), not a complete SQLite database"
    if _looks_like_text(head):
        return "is a text file, not an SQLite database"
    return "is not an SQLite database (unrecognised header)"


def size_problem(path: Path) -> str | None:
    """Explain a damaged database by comparing its size with its header's page count.

    Only consulted once SQLite itself has failed on the file: during a checkpoint the
    header can legitimately run ahead of the file size for a moment.
    """
    data_len = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100:
        return f"is truncated ({data_len} bytes, less than one SQLite header)"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        return f"has a corrupt header (page size {page})"
    n_pages = int.from_bytes(head[28:32], "big")
    if head[24:28] == head[92:96] and n_pages and data_len < page * n_pages:
        return (f"is truncated: {data_len} bytes but its header says "
                f"{n_pages} pages of {page} bytes ({page * n_pages} bytes)")
    return None


def integrity(conn: sqlite3.Connection, quick: bool) -> list[str]:
    """PRAGMA quick_check / integrity_check results other than "ok"."""
    rows = conn.execute("PRAGMA quick_check" if quick else "PRAGMA integrity_check").fetchall()
    return [str(r[0]) for r in rows if str(r[0]) != "ok"]


def expected_best(conn: sqlite3.Connection, plan_key: str) -> float | None:
    """The time the best plan of ``plan_key`` must have: the fastest ok trial; after a
    confirmation, the fastest of its winner and of the ok trials written since (a
    confirmation replaces the best even where an earlier single run was faster)."""
    last = conn.execute(
        "SELECT study, created FROM trials WHERE plan_key = ? AND study LIKE ? "
        "ORDER BY created DESC LIMIT 1", (plan_key, "%" + CONFIRMATION_SUFFIX)).fetchone()
    if last is None:
        return conn.execute("SELECT MIN(measured_s) FROM trials WHERE plan_key = ? AND "
                            "status = 'ok'", (plan_key,)).fetchone()[0]
    study, created = last
    times = [r[0] for r in conn.execute(
        "SELECT MIN(measured_s) FROM trials WHERE plan_key = ? AND status = 'ok' AND "
        "study = ? AND created = ? UNION ALL SELECT MIN(measured_s) FROM trials WHERE "
        "plan_key = ? AND status = 'ok' AND created > ?",
        (plan_key, study, created, plan_key, created)) if r[0] is not None]
    return min(times, default=None)


def consistency(conn: sqlite3.Connection) -> list[str]:
    """Check the invariants add_trial and add_confirmation maintain: best = min over the ok
    trials of each key (or the winner of its last confirmation, see :func:`expected_best`),
    every best row names a real trial, and every key matches its stored parts."""
    problems = []
    keys = [r[0] for r in conn.execute(
        "SELECT DISTINCT plan_key FROM trials WHERE status = 'ok'")]
    mins = {k: expected_best(conn, k) for k in keys}
    best = {r[0]: r for r in conn.execute(
        "SELECT plan_key, measured_s, study, trial_number FROM best_plans")}
    for k, m in mins.items():
        if m is None:
            continue
        if k not in best:
            problems.append(f"key {k[:12]}: {m:.6g} s ok trials but no best plan")
        elif best[k][1] != m:
            problems.append(f"key {k[:12]}: best plan {best[k][1]:.6g} s but the fastest "
                            f"ok trial took {m:.6g} s")
    for k, (_, m, study, number) in best.items():
        hit = conn.execute(
            "SELECT 1 FROM trials WHERE plan_key = ? AND study = ? AND number = ? "
            "AND status = 'ok' AND measured_s = ?", (k, study, number, m)).fetchone()
        if not hit:
            problems.append(f"key {k[:12]}: best plan names trial {study}#{number}, "
                            "which is not an ok trial with that time")
    cols = "plan_key, workload_hash, space_version, device_json, libraries_json, schema_version"
    for table in ("trials", "best_plans"):
        cur = conn.execute(f"SELECT DISTINCT {cols} FROM {table}")
        names = [d[0] for d in cur.description]
        for row in cur:
            r = dict(zip(names, row))
            if PlanKey.from_row(r).key != r["plan_key"]:
                problems.append(f"{table}: key {r['plan_key'][:12]} does not match its "
                                "stored parts")
    return problems


def check_file(path) -> list[str]:
    """Everything wrong with the plan database at ``path``; [] when it is fine.

    Never modifies the file.  An older schema is not a problem (opening migrates it).
    """
    path = Path(path).expanduser()
    if not path.exists():
        return [f"{path}: does not exist"]
    if not path.is_file():
        return [f"{path}: is not a regular file"]
    if (p := header_problem(path)) is not None:
        return [f"{path}: {p}"]
    if path.stat().st_size == 0:
        return []
    try:
        conn = connect_ro(path)
    except sqlite3.Error as e:
        return [f"{path}: cannot be opened read-only ({e})"]
    try:
        found = integrity(conn, quick=False)
        if found:
            return [f"{path}: integrity: {p}" for p in found]
        version = stored_version(conn)
        if version is None:
            return [f"{path}: is an SQLite database but not an autotune plan database"]
        if version > SCHEMA_VERSION:
            return [f"{path}: was written by a newer autotune "
                    f"(schema {version} > {SCHEMA_VERSION})"]
        if version < SCHEMA_VERSION:
            return []  # opening it will migrate; nothing to compare yet
        return [f"{path}: {p}" for p in consistency(conn)]
    except sqlite3.DatabaseError as e:
        return [f"{path}: {size_problem(path) or f'is damaged ({e})'}"]
    finally:
        conn.close()
