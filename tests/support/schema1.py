"""A plan database of schema 1, scripted with raw SQL (no PlanDB: today's PlanDB writes the
current schema).  Same content as the binary fixture tests/data/plans-schema1.sqlite, which
the code of schema 1 itself wrote (tests/data/make_schema1_fixture.py)."""
from __future__ import annotations

import sqlite3

from sqlite_utils import Database

from autotune.environment import Environment
from db.keys import PlanKey
from db.schema import MIGRATIONS
from tests.support import DATA

FIXTURE = DATA / "plans-schema1.sqlite"

ENV = Environment(kind="cpu", name="Test CPU 9000", cores=2,
                  libraries=(("autotune", "0.1.0"), ("cc", "cc 12"), ("numpy", "2.0"),
                             ("optuna", "5.0"), ("python", "3.11.7")))
OLD_ENV = Environment.from_dict({**ENV.to_dict(), "libraries": {**ENV.library_dict(),
                                                                 "numpy": "1.26"}})


# The search-space encoding of the fixture's plans (search_spaces.space.SPACE_VERSION when the
# schema-1 code wrote it): a migration re-keys plans under their own space version, so today's
# key (a later SPACE_VERSION) does not find them, as intended.
FIXTURE_SPACE_VERSION = "1"


def key_v1(env: Environment) -> PlanKey:
    """The key schema 1 gave workload "w0" on ``env``."""
    return PlanKey(**{**PlanKey.for_env("w0", env, space_version=FIXTURE_SPACE_VERSION).parts(),
                      "schema_version": 1})


# (env, study, number, candidate_json, status, predicted_s, measured_s, error)
TRIALS = [
    (ENV, "tpe-seed0", 0, '{"name": "unfused"}', "ok", 0.5, 2.0, None),
    (ENV, "tpe-seed0", 1, '{"name": "heuristic"}', "failed", 0.4, None,
     "wrong result in 'out': relative L2 error 0.01 > rtol 0.0001"),
    (ENV, "tpe-seed0", 2, '{"name": "greedy"}', "pruned", 9.0, None,
     "predicted 9 s > 3 x 0.5 s"),
    (ENV, "tpe-seed0", 3, '{"name": ""}', "ok", 0.3, 1.5, None),
    (OLD_ENV, "tpe-seed0", 0, '{"name": "old"}', "ok", 0.3, 1.0, None),
]
PARAMS = {0: ('{"f": 0}', '{"f": [0, 1]}'), 3: ('{"f": 1}', '{"f": [0, 1]}')}
T0 = "2026-01-01T00:00:00.000000+00:00"


def make_schema1_db(path) -> None:
    """Write the schema-1 database at ``path`` (which must not exist)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("BEGIN IMMEDIATE")
        MIGRATIONS[1](Database(conn, execute_plugins=False))
        conn.execute("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
        conn.execute("INSERT INTO workloads VALUES ('w0', 'demo', ?, ?)",
                     ('{"dims": {"N": 4}}', T0))
        best: dict[str, tuple] = {}
        for env, study, number, cand, status, pred, meas, err in TRIALS:
            k = key_v1(env)
            params, options = PARAMS.get(number, (None, None)) if env is ENV else (None, None)
            cols = k.columns()
            conn.execute(
                "INSERT INTO trials (plan_key, workload_hash, space_version, device_json, "
                "libraries_json, schema_version, study, number, candidate_json, status, "
                "predicted_s, measured_s, error, params_json, options_json, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*cols.values(), study, number, cand, status, pred, meas, err, params,
                 options, T0))
            if status == "ok" and (k.key not in best or meas < best[k.key][-5]):
                best[k.key] = (*cols.values(), "demo", cand, meas, pred, study, number, T0)
        for row in best.values():
            conn.execute("INSERT INTO best_plans VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         row)
        conn.execute("COMMIT")
    finally:
        conn.close()
