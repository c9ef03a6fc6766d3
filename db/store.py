"""The plan cache and trial history: :class:`PlanDB` over one SQLite file.

Every write runs in ``BEGIN IMMEDIATE`` (see ``db.schema.immediate``) on a WAL database
with a 30 s busy timeout, so concurrent searches on one file serialise their writes
instead of losing them.  A trial and the best-plan update it causes commit together.
"""
from __future__ import annotations

import json
import math
import os
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from sqlite_utils import Database

from .check import consistency, integrity
from .errors import DBError
from .keys import PlanKey, stale_reasons
from .opening import (BUSY_TIMEOUT_S, enable_wal, foreign, guard, newer, one_line, refuse,
                      sqlite_failure)
from .records import (TRIAL_STATUSES, BestPlan, Status, StoredTrial, TrialOutcome,
                      confirmation_study)
from .schema import immediate, migrate


def default_db_path() -> Path:
    """$AUTOTUNE_DB, else $XDG_CACHE_HOME/autotune/plans.sqlite, else ~/.cache/...

    The only place the environment is read: everything deeper takes a path.
    """
    if os.environ.get("AUTOTUNE_DB"):
        return Path(os.environ["AUTOTUNE_DB"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "autotune" / "plans.sqlite"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


class PlanDB:
    """Workloads, every trial of every search, and the best plan per plan key."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = Path(path).expanduser() if path is not None else default_db_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise DBError(f"{self.path}: cannot create its folder ({one_line(e)}); "
                          "pass --db PATH in a writable place") from None
        guard(self.path)
        try:
            # isolation_level=None: the driver never opens transactions behind our back;
            # writes go through immediate(), sqlite-utils' own calls nest as savepoints.
            conn = sqlite3.connect(str(self.path), timeout=BUSY_TIMEOUT_S,
                                   isolation_level=None)
        except sqlite3.Error as e:
            raise refuse(self.path, f"cannot be opened ({one_line(e)})") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            enable_wal(conn)
            self.db = Database(conn, execute_plugins=False)
            self.migrated_from = migrate(self.db, lambda v: newer(self.path, v),
                                         lambda: foreign(self.path))
        except sqlite3.DatabaseError as e:
            conn.close()
            raise sqlite_failure(self.path, e) from None
        except BaseException:
            conn.close()
            raise

    # -- lifecycle ---------------------------------------------------------------
    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "PlanDB":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- writes ------------------------------------------------------------------
    def add_workload(self, hash: str, name: str, canonical_json: str) -> None:
        """Record a workload; a second call with the same hash changes nothing."""
        with immediate(self.db.conn):
            self.db["workloads"].insert({"hash": hash, "name": name,
                                         "canonical_json": canonical_json,
                                         "created": _now()}, ignore=True)

    def add_trial(self, key: PlanKey, study: str, number: int, outcome: TrialOutcome) -> bool:
        """Insert ``outcome`` as trial ``number`` of ``study``; False if it was already there.

        An ok trial also updates best_plans in the same transaction, replacing the
        stored plan only when strictly faster.  measured_s is dropped for non-ok
        trials (a failed candidate's time is meaningless).  ``times`` and ``rel_err`` are
        kept for any status that has them: a wrong result's error says how wrong.
        """
        with immediate(self.db.conn):
            return self._insert(key, study, int(number), outcome)

    def append_trial(self, key: PlanKey, study: str, outcome: TrialOutcome) -> int:
        """Like add_trial, numbering the trial max+1 inside the transaction (so
        concurrent writers to one study never collide); returns the number used."""
        with immediate(self.db.conn):
            number = self._next(key.key, study)
            self._insert(key, study, number, outcome)
            return number

    def add_confirmation(self, key: PlanKey, study: str, outcomes: list[TrialOutcome]
                         ) -> int | None:
        """Store a confirmation of search ``study``: ``outcomes`` (one per finalist, ok with
        every round's time in ``times`` and their median as ``measured_s``, or failed) as
        trials of ``confirmation_study(study)`` numbered after its last, sharing one
        ``created`` time, and make the winner (the fastest ok outcome) the best plan of the
        key, in the same transaction.  The winner replaces the stored best even where an
        earlier single run measured faster: that is what a confirmation is for.  Returns
        the winner's trial number; None, and nothing stored, when no outcome is ok."""
        ok = [i for i, o in enumerate(outcomes) if o.status == Status.OK]
        if not ok:
            return None
        win = min(ok, key=lambda i: outcomes[i].measured_s)
        name = confirmation_study(study)
        with immediate(self.db.conn):
            first, created = self._next(key.key, name), _now()
            for i, o in enumerate(outcomes):
                self._insert(key, name, first + i, o, created, keep_best=False)
            self._set_best(key, outcomes[win], name, first + win, created, replace=True)
        return first + win

    def _insert(self, key: PlanKey, study: str, number: int, o: TrialOutcome,
                created: str | None = None, keep_best: bool = True) -> bool:
        status, measured_s = o.status, o.measured_s
        if status not in TRIAL_STATUSES:
            raise ValueError(f"trial status {status!r}: expected one of "
                             f"{', '.join(TRIAL_STATUSES)}")
        if status != Status.OK:
            measured_s = None
        elif measured_s is None or not math.isfinite(measured_s) or measured_s <= 0:
            # SQLite stores NaN as NULL; an ok trial needs a real positive time.
            raise ValueError(f"an ok trial needs a finite positive measured_s, "
                             f"got {measured_s!r}")
        candidate_json = o.candidate.to_json()
        cols = key.columns()
        row = {**cols, "study": study, "number": number, "candidate_json": candidate_json,
               "status": str(status), "predicted_s": o.predicted_s, "measured_s": measured_s,
               "error": o.error,
               "params_json": None if o.params is None else json.dumps(o.params,
                                                                       sort_keys=True),
               "options_json": None if o.options is None else json.dumps(o.options,
                                                                         sort_keys=True),
               "times_json": json.dumps(list(o.times)) if o.times else None,
               "rel_err": None if o.rel_err is None else float(o.rel_err),
               "corrected_s": None if o.corrected_s is None else float(o.corrected_s),
               "group_times_json": json.dumps(dict(o.groups)) if o.groups else None,
               "created": created or _now()}
        names = ", ".join(row)
        cur = self.db.conn.execute(
            f"INSERT INTO trials ({names}) VALUES ({', '.join(':' + n for n in row)}) "
            "ON CONFLICT (plan_key, study, number) DO NOTHING", row)
        if cur.rowcount != 1:
            return False
        if status == Status.OK and keep_best:
            self._set_best(key, o, study, number, row["created"], replace=False)
        return True

    def _set_best(self, key: PlanKey, o: TrialOutcome, study: str, number: int, updated: str,
                  replace: bool) -> None:
        """Make ok trial ``study``#``number`` the key's best plan: only when strictly faster
        than the stored one (keep-best), or whatever it stores (``replace``)."""
        cols = key.columns()
        w = self.db.conn.execute("SELECT name FROM workloads WHERE hash = ?",
                                 (key.workload_hash,)).fetchone()
        best = {**cols, "workload_name": w[0] if w else "",
                "candidate_json": o.candidate.to_json(), "measured_s": o.measured_s,
                "predicted_s": o.predicted_s, "study": study, "trial_number": number,
                "updated": updated}
        changing = [c for c in best if c not in cols]
        # Keep-best: the conflict branch fires only for a strictly faster plan.
        self.db.conn.execute(
            f"INSERT INTO best_plans ({', '.join(best)}) "
            f"VALUES ({', '.join(':' + n for n in best)}) ON CONFLICT (plan_key) "
            f"DO UPDATE SET {', '.join(f'{c} = excluded.{c}' for c in changing)} "
            + ("" if replace else "WHERE excluded.measured_s < best_plans.measured_s"), best)

    def prune(self, keep_keys: set[str]) -> int:
        """Delete best plans and trials whose key is not in ``keep_keys``; returns the
        number of rows deleted.  The caller decides what is current."""
        with immediate(self.db.conn):
            doomed = [(k,) for k in self.all_keys() if k not in keep_keys]
            n = 0
            for table in ("trials", "best_plans"):
                before = self.db.conn.total_changes
                self.db.conn.executemany(f"DELETE FROM {table} WHERE plan_key = ?", doomed)
                n += self.db.conn.total_changes - before
            return n

    # -- reads -------------------------------------------------------------------
    def _next(self, plan_key: str, study: str) -> int:
        row = self.db.conn.execute(
            "SELECT COALESCE(MAX(number) + 1, 0) FROM trials WHERE plan_key = ? AND study = ?",
            (plan_key, study)).fetchone()
        return int(row[0])

    def next_number(self, plan_key: str, study: str) -> int:
        """1 + the highest trial number of ``study`` under ``plan_key`` (0 if none)."""
        return self._next(plan_key, study)

    def workload(self, hash: str) -> dict | None:
        return next(self.db.query("SELECT * FROM workloads WHERE hash = ?", [hash]), None)

    def trials(self, plan_key: str, study: str | None = None) -> list[StoredTrial]:
        """Trials of a key (optionally one study), ordered by number."""
        where, args = "plan_key = ?", [plan_key]
        if study is not None:
            where, args = where + " AND study = ?", args + [study]
        return [StoredTrial.from_row(r) for r in self.db.query(
            f"SELECT * FROM trials WHERE {where} ORDER BY number, study, id", args)]

    def measured_trials(self, device_json: str, limit: int = 5000) -> list[StoredTrial]:
        """The ok trials of every key measured on one device (any workload, space or library
        versions), newest first, at most ``limit``: what the learned correction fits."""
        return [StoredTrial.from_row(r) for r in self.db.query(
            "SELECT * FROM trials WHERE device_json = ? AND status = 'ok' "
            "ORDER BY created DESC, id DESC LIMIT ?", [device_json, int(limit)])]

    def trial_counts(self, plan_key: str) -> dict[Status, int]:
        """{"ok": n, "failed": n, "pruned": n} over every study of the key."""
        counts = dict.fromkeys(TRIAL_STATUSES, 0)
        counts.update((Status(s), n) for s, n in self.db.conn.execute(
            "SELECT status, COUNT(*) FROM trials WHERE plan_key = ? GROUP BY status",
            (plan_key,)))
        return counts

    def best(self, plan_key: str) -> BestPlan | None:
        """The best plan stored under ``plan_key``; None when no trial of it was ok."""
        row = next(self.db.query("SELECT * FROM best_plans WHERE plan_key = ?",
                                 [plan_key]), None)
        return None if row is None else BestPlan.from_row(row)

    def best_rows(self, workload_hash: str | None = None) -> list[BestPlan]:
        """Best plans of every key (of one workload if given)."""
        where, args = ("WHERE workload_hash = ?", [workload_hash]) if workload_hash else ("", [])
        return [BestPlan.from_row(r) for r in self.db.query(
            f"SELECT * FROM best_plans {where} ORDER BY workload_name, updated", args)]

    def all_keys(self) -> set[str]:
        return {r[0] for r in self.db.conn.execute(
            "SELECT plan_key FROM trials UNION SELECT plan_key FROM best_plans")}

    def stale_rows(self, current) -> list[dict]:
        """One row per stored key whose space, device, libraries or schema differ from
        ``current`` (a PlanKey, or a dict of those parts); ``reasons`` says which."""
        cols = "plan_key, workload_hash, space_version, device_json, libraries_json, schema_version"
        rows = {r["plan_key"]: {**r, "trials": 0, "has_best": False} for r in self.db.query(
            f"SELECT {cols} FROM trials UNION SELECT {cols} FROM best_plans")}
        for k, n in self.db.conn.execute(
                "SELECT plan_key, COUNT(*) FROM trials GROUP BY plan_key"):
            rows[k]["trials"] = n
        for (k,) in self.db.conn.execute("SELECT plan_key FROM best_plans"):
            rows[k]["has_best"] = True
        out = []
        for k in sorted(rows):
            if reasons := stale_reasons(rows[k], current):
                out.append({**rows[k], "reasons": reasons})
        return out

    def check(self) -> list[str]:
        """Integrity and consistency problems of the open database; [] when fine."""
        return [f"integrity: {p}" for p in integrity(self.db.conn, quick=False)] + \
            consistency(self.db.conn)
