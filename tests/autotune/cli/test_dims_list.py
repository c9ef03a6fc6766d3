"""`autotune search --dims N=8,12,C=4`: one search per shape, in order; a function called at a
shape between them runs the nearest one's plan, adapted and verified."""
from __future__ import annotations

import warnings

import pytest
from typer.testing import CliRunner

from autotune.api import best_candidate
from autotune.cli.app import app
from autotune.cli.common import CliError, parse_dims_list
from autotune.interop.function import PlanFunction
from autotune.interop.resolve import AdaptedPlanWarning, PlanSource
from search_spaces import load_workload

runner = CliRunner()


def test_dims_lists_are_every_combination_in_order():
    assert parse_dims_list(None) == [{}]
    assert parse_dims_list("N=64,C=16") == [{"N": 64, "C": 16}]
    assert parse_dims_list("N=256,384,512,C=64") == [{"N": 256, "C": 64}, {"N": 384, "C": 64},
                                                     {"N": 512, "C": 64}]
    assert parse_dims_list("N=8,16,C=4,8") == [{"N": 8, "C": 4}, {"N": 8, "C": 8},
                                               {"N": 16, "C": 4}, {"N": 16, "C": 8}]
    for bad in ("384,N=2", "N=2,x", "N=2,N=3"):
        with pytest.raises(CliError):
            parse_dims_list(bad)


def test_a_list_of_shapes_is_searched_in_order_and_serves_the_shapes_between(cached_tmp):
    path = cached_tmp / "p.sqlite"
    r = runner.invoke(app, ["search", "trimul_outgoing", "--dims", "N=8,12,C=4", "--budget", "2",
                            "--db", str(path), "--confirm-rounds", "0"])
    assert r.exit_code == 0, r.output
    heads = [l for l in r.stdout.splitlines() if l.startswith("== ")]
    assert heads == ["== trimul_outgoing at N=8,C=4 (shape 1 of 2)",
                     "== trimul_outgoing at N=12,C=4 (shape 2 of 2)"]
    assert r.stdout.count("trimul_outgoing: 2 trials") == 2
    for n in (8, 12):
        assert best_candidate(load_workload("trimul_outgoing", {"N": n, "C": 4}), "cpu",
                              path)[0] is not None
    w10 = load_workload("trimul_outgoing", {"N": 10, "C": 4})
    fn = PlanFunction(w10, "cpu", path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = fn.resolution(dict(w10.inputs))
    assert res.source == PlanSource.NEAREST and dict(res.tuned_dims) == {"N": 12, "C": 4}
    assert [c.category for c in caught] == [AdaptedPlanWarning]


def test_a_bad_shape_in_the_list_fails_before_any_search(fast_tmp):
    r = runner.invoke(app, ["search", "trimul_outgoing", "--dims", "N=8,0,C=4", "--budget", "2",
                            "--db", str(fast_tmp / "p.sqlite")])
    assert r.exit_code == 1 and "N=0" in r.stderr and "trial" not in r.stdout
