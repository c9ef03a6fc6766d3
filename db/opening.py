"""Opening a plan database safely: refuse what we must not write to, then enable WAL.

Everything before the read-write open looks at the file read-only (see ``db.check``), so
a file we refuse is never modified.  Every refusal is one line: path, problem, way out.
"""
from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path

from .check import connect_ro, header_problem, integrity, size_problem
from .errors import RECOVERY_HINT, DBError
from .keys import SCHEMA_VERSION
from .schema import stored_version

BUSY_TIMEOUT_S = 30.0


def one_line(e: BaseException) -> str:
    return " ".join(str(e).split()) or type(e).__name__


def refuse(path: Path, what: str) -> DBError:
    return DBError(f"{path}: {what}; {RECOVERY_HINT}")


def newer(path: Path, version: int) -> DBError:
    return DBError(f"{path} was written by a newer autotune (schema {version} > "
                   f"{SCHEMA_VERSION}); upgrade autotune or use another --db")


def foreign(path: Path) -> DBError:
    return refuse(path, "is an SQLite database but not an autotune plan database")


def is_busy(e: sqlite3.Error) -> bool:
    # SQLITE_BUSY (5) / SQLITE_LOCKED (6), extended codes included: contention, not damage.
    return (getattr(e, "sqlite_errorcode", 0) & 0xFF) in (5, 6) or "locked" in str(e)


def sqlite_failure(path: Path, e: sqlite3.Error) -> DBError:
    """Turn an SQLite error met while opening into one line that says what to do."""
    if is_busy(e):
        return DBError(f"{path}: still locked by another process after {BUSY_TIMEOUT_S:.0f} s "
                       f"({one_line(e)}); try again when it has finished")
    return refuse(path, size_problem(path) or f"is damaged ({one_line(e)})")


def enable_wal(conn: sqlite3.Connection) -> None:
    """Switch to WAL mode (persistent in the file), retrying while others hold locks.

    Changing the journal mode needs an exclusive lock, and when several processes
    create the same database at once SQLite reports SQLITE_BUSY for it immediately,
    without consulting the busy timeout (measured: ~1 in 2 runs with 8 openers).
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as e:
            if not is_busy(e) or time.monotonic() > deadline:
                raise
            time.sleep(random.uniform(0.002, 0.05))


def guard(path: Path) -> None:
    """Refuse a file we must not write to, looking at it only read-only."""
    if not path.exists():
        return
    if not path.is_file():
        raise refuse(path, "is not a regular file")
    if (p := header_problem(path)) is not None:
        raise refuse(path, p)
    if path.stat().st_size == 0:
        return  # empty: a new database (perhaps being created by another process)
    try:
        conn = connect_ro(path)
        try:
            bad = integrity(conn, quick=True)
            if bad:
                raise refuse(path, size_problem(path) or f"fails quick_check ({bad[0]})")
            version = stored_version(conn)
        finally:
            conn.close()
    except sqlite3.DatabaseError as e:
        raise sqlite_failure(path, e) from None
    if version is None:
        raise foreign(path)
    if version > SCHEMA_VERSION:
        raise newer(path, version)
