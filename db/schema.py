"""Tables, numbered migrations and the write transaction.

Why our own migration list rather than ``sqlite_utils.migrations.Migrations``: that class
records migrations by name and runs each in ``db.atomic()``, i.e. a plain (deferred)
``BEGIN``.  Two searches opening a fresh database at the same moment would both see the
migration pending, and the loser's read->write lock upgrade fails at once with
SQLITE_BUSY (the busy timeout is not consulted for upgrades).  Here the version is read
and every pending migration applied inside ONE ``BEGIN IMMEDIATE`` transaction, so the
second opener waits, then finds nothing to do.  Migration bodies still receive a
sqlite-utils ``Database`` so they can use its ``transform()``/``add_column()`` helpers.
"""
from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from typing import Callable, Iterator

from sqlite_utils import Database

from .keys import SCHEMA_VERSION

OUR_TABLES = {"meta", "workloads", "trials", "best_plans"}


@contextmanager
def immediate(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``BEGIN IMMEDIATE ... COMMIT`` (ROLLBACK on any exception).

    IMMEDIATE takes the write lock up front, where the busy timeout applies; a plain
    BEGIN takes it at the first write and can fail instantly under concurrent writers.
    sqlite-utils calls made inside nest as savepoints of this transaction.
    """
    if conn.in_transaction:
        raise RuntimeError("write transactions do not nest")
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


_V1 = [
    """CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL)""",
    """CREATE TABLE workloads (
        hash TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        canonical_json TEXT NOT NULL,
        created TEXT NOT NULL)""",
    # measured_s is set exactly when the trial is ok: a failed or pruned trial has no
    # meaningful time, and this CHECK makes "best = min over ok trials" well defined.
    """CREATE TABLE trials (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        plan_key TEXT NOT NULL,
        workload_hash TEXT NOT NULL,
        space_version TEXT NOT NULL,
        device_json TEXT NOT NULL,
        libraries_json TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        study TEXT NOT NULL,
        number INTEGER NOT NULL,
        candidate_json TEXT NOT NULL,
        status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'pruned')),
        predicted_s REAL,
        measured_s REAL,
        error TEXT,
        params_json TEXT,
        options_json TEXT,
        created TEXT NOT NULL,
        CHECK ((status = 'ok') = (measured_s IS NOT NULL)),
        UNIQUE (plan_key, study, number))""",
    "CREATE INDEX trials_workload ON trials (workload_hash)",
    """CREATE TABLE best_plans (
        plan_key TEXT PRIMARY KEY,
        workload_hash TEXT NOT NULL,
        space_version TEXT NOT NULL,
        device_json TEXT NOT NULL,
        libraries_json TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        workload_name TEXT NOT NULL,
        candidate_json TEXT NOT NULL,
        measured_s REAL NOT NULL,
        predicted_s REAL,
        study TEXT NOT NULL,
        trial_number INTEGER NOT NULL,
        updated TEXT NOT NULL)""",
    "CREATE INDEX best_plans_workload ON best_plans (workload_hash)",
]


def _to_v1(db: Database) -> None:
    for stmt in _V1:
        db.execute(stmt)


def rekey(db: Database, version: int) -> None:
    """Carry the rows of schema ``version - 1`` over to ``version``: their schema_version
    column and their plan key (a sha256 over all parts, schema version included).

    Only for migrations that leave the meaning of a stored measurement unchanged, so that
    the plans cached under the old schema stay usable after the upgrade.  Keys stay
    distinct: every old row moves by the same change of one part.
    """
    from .keys import PlanKey
    cols = "plan_key, workload_hash, space_version, device_json, libraries_json, schema_version"
    for table in ("trials", "best_plans"):
        cur = db.conn.execute(f"SELECT DISTINCT {cols} FROM {table} WHERE schema_version = ?",
                              (version - 1,))
        names = [d[0] for d in cur.description]
        for row in cur.fetchall():
            r = dict(zip(names, row))
            new = PlanKey(**{**PlanKey.from_row(r).parts(), "schema_version": version}).key
            db.conn.execute(f"UPDATE {table} SET plan_key = ?, schema_version = ? "
                            "WHERE plan_key = ?", (new, version, r["plan_key"]))


def _to_v2(db: Database) -> None:
    """Every timed run and the relative error of each trial: the median alone hides noisy
    measurements (a spread of repeats) and how close a plan came to the tolerance.

    Nullable columns: trials of schema 1, and pruned ones, have neither.  What a stored
    measurement means is unchanged, so the rows are re-keyed and cached plans stay in use.
    """
    trials = db["trials"]
    trials.add_column("times_json", str)
    trials.add_column("rel_err", float)
    rekey(db, 2)


def _to_v3(db: Database) -> None:
    """The learned correction's prediction beside the analytic one (``predicted_s``), so
    the two can be compared on every measured trial.

    Nullable: trials of older schemas have none (a search stores the analytic time here
    too while its correction falls back to the analytic model).
    What a stored measurement means is unchanged: rows are re-keyed, cached plans stay.
    """
    db["trials"].add_column("corrected_s", float)
    rekey(db, 3)


def _to_v4(db: Database) -> None:
    """Each fused group's median seconds of a measured trial (``group_times_json``, an
    object anchor -> seconds): the learned correction is fitted group by group.

    Nullable: older trials, pruned and failed ones, and those of backends that do not time
    their groups have none.  What a stored measurement means is unchanged: rows are
    re-keyed, cached plans stay.
    """
    db["trials"].add_column("group_times_json", str)
    rekey(db, 4)


# version -> function bringing a database from version-1 to version.  Version 0 is an
# empty file.  Add entries, never edit shipped ones; keep a fixture of the old schema
# in the tests for each (tests/data/plans-schema1.sqlite, plans-schema2.sqlite).
MIGRATIONS: dict[int, Callable[[Database], None]] = {1: _to_v1, 2: _to_v2, 3: _to_v3,
                                                    4: _to_v4}


def stored_version(conn: sqlite3.Connection) -> int | None:
    """meta.schema_version; 0 for an empty database; None when the file holds tables
    that are not ours (someone else's database)."""
    tables = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")}
    if not tables:
        return 0
    if "meta" not in tables:
        return None
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        return int(row[0]) if row else None
    except ValueError:
        return None


def migrate(db: Database, newer: Callable[[int], Exception],
            foreign: Callable[[], Exception]) -> int:
    """Bring the database to SCHEMA_VERSION in one IMMEDIATE transaction; returns the
    version found.  Raises ``newer(v)`` for a database from a newer autotune and
    ``foreign()`` for a database that is not ours, before changing anything."""
    with immediate(db.conn):
        found = stored_version(db.conn)
        if found is None:
            raise foreign()
        if found > SCHEMA_VERSION:
            raise newer(found)
        for v in range(found + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[v](db)
        if found < SCHEMA_VERSION:
            db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
                       [str(SCHEMA_VERSION)])
    return found
