"""Write a plan database of schema 3 with the code of schema 3 (kept as a test fixture).

tests/data/plans-schema3.sqlite was made by this script at commit bb784d4 (the last commit
of schema 3), with the PlanDB of that commit:

    git worktree add /tmp/schema3 bb784d4
    cd /tmp/schema3 && PYTHONPATH=. python /path/to/tests/data/make_schema3_fixture.py OUT.sqlite

Run with newer code it would write the newer schema: the binary file, not this script, is
what keeps the old format.  (No raw-SQL twin: tests/support/schema2.py's content migrated
through schema 3 is tested already; this file is what schema-3 code itself wrote,
corrected predictions included.)
"""
import sys

from autotune.environment import Environment
from db import SCHEMA_VERSION, PlanDB, PlanKey
from db.records import TrialOutcome
from search_spaces.candidate import Candidate

assert SCHEMA_VERSION == 3, "run this with the code of schema 3 (see the docstring)"

ENV = Environment(kind="cpu", name="Test CPU 9000", cores=2,
                  libraries=(("autotune", "0.1.0"), ("cc", "cc 12"), ("numpy", "2.0"),
                             ("optuna", "5.0"), ("python", "3.11.7")))
OLD_ENV = Environment.from_dict({**ENV.to_dict(), "libraries": {**ENV.library_dict(),
                                                                 "numpy": "1.26"}})


def C(label: str) -> Candidate:
    return Candidate((), (), (), name=label)


def main(path: str) -> None:
    cur, old = PlanKey.for_env("w0", ENV), PlanKey.for_env("w0", OLD_ENV)
    with PlanDB(path) as pdb:
        pdb.add_workload("w0", "demo", '{"dims": {"N": 4}}')
        pdb.add_trial(cur, "tpe-seed0", 0, TrialOutcome(
            C("unfused"), "ok", 0.5, 2.0, params={"f": 0}, options={"f": [0, 1]},
            times=(2.0, 2.1, 1.9), rel_err=1e-7, corrected_s=1.9))
        pdb.add_trial(cur, "tpe-seed0", 1, TrialOutcome(
            C("heuristic"), "failed", 0.4,
            error="wrong result in 'out': relative L2 error 0.01 > rtol 0.0001", rel_err=0.01))
        pdb.add_trial(cur, "tpe-seed0", 2, TrialOutcome(
            C("greedy"), "pruned", 9.0, error="predicted 9 s > 2 x 0.5 s", corrected_s=8.0))
        pdb.add_trial(cur, "tpe-seed0", 3, TrialOutcome(
            C(""), "ok", 0.3, 1.5, params={"f": 1}, options={"f": [0, 1]}, times=(1.5,),
            rel_err=0.0))
        pdb.add_trial(old, "tpe-seed0", 0, TrialOutcome(C("old"), "ok", 0.3, 1.0,
                                                        times=(1.0, 1.0), rel_err=2e-7))


if __name__ == "__main__":
    main(sys.argv[1])
