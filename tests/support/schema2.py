"""A plan database of schema 2, scripted with raw SQL (no PlanDB: today's PlanDB writes the
current schema).  Same content as the binary fixture tests/data/plans-schema2.sqlite, which
the code of schema 2 itself wrote (tests/data/make_schema2_fixture.py)."""
from __future__ import annotations

import sqlite3

from sqlite_utils import Database

from db.keys import PlanKey
from db.schema import MIGRATIONS
from tests.support import DATA
from tests.support.schema1 import ENV, FIXTURE_SPACE_VERSION, OLD_ENV

FIXTURE = DATA / "plans-schema2.sqlite"
C = '{"fused":[],"layouts":{},"name":"%s","schedules":[]}'


def key_v2(env) -> PlanKey:
    """The key schema 2 gave workload "w0" on ``env``."""
    return PlanKey(**{**PlanKey.for_env("w0", env, space_version=FIXTURE_SPACE_VERSION).parts(), "schema_version": 2})


# (env, study, number, candidate_json, status, predicted_s, measured_s, error, params,
#  options, times_json, rel_err)
TRIALS = [
    (ENV, "tpe-seed0", 0, C % "unfused", "ok", 0.5, 2.0, None, '{"f": 0}', '{"f": [0, 1]}',
     "[2.0, 2.1, 1.9]", 1e-7),
    (ENV, "tpe-seed0", 1, C % "heuristic", "failed", 0.4, None,
     "wrong result in 'out': relative L2 error 0.01 > rtol 0.0001", None, None, None, 0.01),
    (ENV, "tpe-seed0", 2, C % "greedy", "pruned", 9.0, None, "predicted 9 s > 2 x 0.5 s",
     None, None, None, None),
    (ENV, "tpe-seed0", 3, C % "", "ok", 0.3, 1.5, None, '{"f": 1}', '{"f": [0, 1]}', "[1.5]",
     0.0),
    (OLD_ENV, "tpe-seed0", 0, C % "old", "ok", 0.3, 1.0, None, None, None, "[1.0, 1.0]", 2e-7),
]
T0 = "2026-01-01T00:00:00.000000+00:00"


def make_schema2_db(path) -> None:
    """Write the schema-2 database at ``path`` (which must not exist)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        d = Database(conn, execute_plugins=False)
        MIGRATIONS[1](d)
        MIGRATIONS[2](d)
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '2')")
        conn.execute("INSERT INTO workloads VALUES ('w0', 'demo', ?, ?)",
                     ('{"dims": {"N": 4}}', T0))
        best: dict[str, tuple] = {}
        for (env, study, number, cand, status, pred, meas, err, params, options, times,
             rel_err) in TRIALS:
            cols = key_v2(env).columns()
            conn.execute(
                "INSERT INTO trials (plan_key, workload_hash, space_version, device_json, "
                "libraries_json, schema_version, study, number, candidate_json, status, "
                "predicted_s, measured_s, error, params_json, options_json, created, "
                "times_json, rel_err) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                "?, ?)",
                (*cols.values(), study, number, cand, status, pred, meas, err, params,
                 options, T0, times, rel_err))
            k = cols["plan_key"]
            if status == "ok" and (k not in best or meas < best[k][-5]):
                best[k] = (*cols.values(), "demo", cand, meas, pred, study, number, T0)
        for row in best.values():
            conn.execute("INSERT INTO best_plans VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         row)
        conn.execute("COMMIT")
    finally:
        conn.close()
