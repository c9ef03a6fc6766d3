"""Commands that only read the plan database, given a --db where none is: one line naming the
path and the fix, exit 1, and no database (nor its folders) left behind; the library's lookup
of a plan falls back to the heuristic plan without creating one either."""
from __future__ import annotations

import warnings

import pytest
from typer.testing import CliRunner

import autotune
from autotune.api import NoCachedPlanWarning
from autotune.cli.app import app
from autotune.interop.resolve import forget, plan_for

runner = CliRunner()


@pytest.mark.parametrize("args", [["show-best"], ["show-best", "--format", "json"],
                                  ["plot", "--out", "PLOTS"], ["cache", "prune"],
                                  ["db", "check"]], ids=lambda a: " ".join(a))
def test_a_read_of_a_missing_database_is_refused_and_creates_nothing(tmp_path, args):
    db = tmp_path / "typo" / "plans.sqlite"
    args = [str(tmp_path / "plots") if a == "PLOTS" else a for a in args]
    r = runner.invoke(app, [*args, "--db", str(db)])
    assert r.exit_code == 1, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.output, r.output
    assert lines[0] == (f"autotune: {db}: no plan database there; run `autotune search --db "
                        f"{db}` to make one, or pass the --db a search wrote")
    assert list(tmp_path.iterdir()) == []


def test_the_default_database_missing_says_to_search(tmp_path, monkeypatch):
    db = tmp_path / "cache" / "plans.sqlite"
    monkeypatch.setenv("AUTOTUNE_DB", str(db))
    r = runner.invoke(app, ["show-best"])
    assert r.exit_code == 1 and r.stderr.strip() == (
        f"autotune: {db}: no plan database there; run `autotune search` to make one, or pass "
        f"the --db a search wrote")
    assert list(tmp_path.iterdir()) == []


def test_the_library_lookups_create_no_database(tmp_path):
    w = autotune.load_workload("trimul_outgoing", dims={"N": 8, "C": 4})
    db = tmp_path / "none" / "plans.sqlite"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        autotune.load_best(w, "cpu", db)
        forget()
        plan_for(w, "cpu", db)
    assert sum(issubclass(c.category, NoCachedPlanWarning) for c in caught) == 2   # one each
    assert not db.exists()          # the compiled kernels' folder beside it may be there
