"""Write a plan database of schema 1 with the code of schema 1 (kept as a test fixture).

tests/data/plans-schema1.sqlite was made by this script at commit a071ee7 (the last commit
of schema 1), with the PlanDB of that commit:

    git worktree add /tmp/schema1 a071ee7
    cd /tmp/schema1 && python /path/to/tests/data/make_schema1_fixture.py OUT.sqlite

Run with newer code it would write the newer schema: the binary file, not this script, is
what keeps the old format.  tests/support/schema1.py writes the same content with raw SQL.
"""
import sys

from autotune.environment import Environment
from db import SCHEMA_VERSION, PlanDB, PlanKey

assert SCHEMA_VERSION == 1, "run this with the code of schema 1 (see the docstring)"

ENV = Environment(kind="cpu", name="Test CPU 9000", cores=2,
                  libraries=(("autotune", "0.1.0"), ("cc", "cc 12"), ("numpy", "2.0"),
                             ("optuna", "5.0"), ("python", "3.11.7")))
OLD_ENV = Environment.from_dict({**ENV.to_dict(), "libraries": {**ENV.library_dict(),
                                                                 "numpy": "1.26"}})


def main(path: str) -> None:
    cur, old = PlanKey.for_env("w0", ENV), PlanKey.for_env("w0", OLD_ENV)
    with PlanDB(path) as pdb:
        pdb.add_workload("w0", "demo", '{"dims": {"N": 4}}')
        pdb.add_trial(cur, "tpe-seed0", 0, '{"name": "unfused"}', "ok", 0.5, 2.0,
                      params_json='{"f": 0}', options_json='{"f": [0, 1]}')
        pdb.add_trial(cur, "tpe-seed0", 1, '{"name": "heuristic"}', "failed", 0.4,
                      error="wrong result in 'out': relative L2 error 0.01 > rtol 0.0001")
        pdb.add_trial(cur, "tpe-seed0", 2, '{"name": "greedy"}', "pruned", 9.0,
                      error="predicted 9 s > 3 x 0.5 s")
        pdb.add_trial(cur, "tpe-seed0", 3, '{"name": ""}', "ok", 0.3, 1.5,
                      params_json='{"f": 1}', options_json='{"f": [0, 1]}')
        pdb.add_trial(old, "tpe-seed0", 0, '{"name": "old"}', "ok", 0.3, 1.0)


if __name__ == "__main__":
    main(sys.argv[1])
