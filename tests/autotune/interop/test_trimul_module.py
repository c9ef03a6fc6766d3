"""The drop-in triangle multiplicative updates: an OpenFold-named state dict loads, and the
update matches a module written from the AlphaFold 2 equations
(autotune/bench/alphafold_reference.py), evaluated in float64; the module bench."""
from __future__ import annotations

import json

import pytest

from tests.support import load_script
from tests.support.skips import require

torch = require("torch")

from autotune.torch import (TriangleMultiplicationIncoming,  # noqa: E402
                            TriangleMultiplicationOutgoing)

from autotune.bench.alphafold_reference import (AlphaFoldUpdate,  # noqa: E402
                                                OPENFOLD_NAMES, random_state)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::RuntimeWarning")


def rel_err(got, want) -> float:
    return float(torch.linalg.norm(got.double() - want) / torch.linalg.norm(want))


@pytest.fixture(autouse=True)
def private_db(fast_tmp, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(fast_tmp / "p.sqlite"))


@pytest.mark.parametrize("cls,outgoing", [(TriangleMultiplicationOutgoing, True),
                                          (TriangleMultiplicationIncoming, False)])
def test_openfold_state_dict_loads_and_matches_the_equations(cls, outgoing):
    c, n = 8, 12
    layer = cls(c, c)
    assert set(layer.state_dict()) == OPENFOLD_NAMES
    ref = AlphaFoldUpdate(c, c, outgoing).double()
    state = random_state(c, seed=1)
    layer.load_state_dict(state)
    ref.load_state_dict(state)
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(n, n, c, generator=gen, dtype=torch.float64)
    mask = (torch.rand(n, n, generator=gen) < 0.9).double()
    with torch.no_grad():
        want = ref(z, mask)
        got = layer(z.float(), mask.float())
    assert got.dtype == torch.float32 and got.shape == (n, n, c)
    assert rel_err(got, want) < 1e-4
    # the other edge direction is a different function: the check can tell them apart
    other = AlphaFoldUpdate(c, c, not outgoing).double()
    other.load_state_dict(state)
    with torch.no_grad():
        assert rel_err(got, other(z, mask)) > 1e-2
    # new weights: bound again at the next call
    state2 = random_state(c, seed=3)
    layer.load_state_dict(state2)
    ref.load_state_dict(state2)
    with torch.no_grad():
        assert rel_err(layer(z.float(), mask.float()), ref(z, mask)) < 1e-4


def test_batch_dims_and_default_mask():
    c, n = 8, 10
    layer = TriangleMultiplicationOutgoing(c, c)
    ref = AlphaFoldUpdate(c, c, True).double()
    state = random_state(c, seed=4)
    layer.load_state_dict(state)
    ref.load_state_dict(state)
    z = torch.randn(2, n, n, c, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    with torch.no_grad():
        got = layer(z.float())
        want = ref(z, torch.ones(2, n, n, dtype=torch.float64))
    assert got.shape == (2, n, n, c) and rel_err(got, want) < 1e-4


def test_under_torch_compile():
    c, n = 8, 12
    layer = TriangleMultiplicationIncoming(c, c)
    layer.load_state_dict(random_state(c, seed=6))
    z = torch.randn(n, n, c, generator=torch.Generator().manual_seed(7))
    mask = torch.ones(n, n)
    with torch.no_grad():
        eager = layer(z, mask)
        compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)(z, mask)
    torch.testing.assert_close(compiled, eager)


def test_a_hidden_width_other_than_c_z_is_refused():
    with pytest.raises(ValueError, match="c_hidden=16 != c_z=8"):
        TriangleMultiplicationOutgoing(8, 16)


def test_the_module_bench_checks_and_times_every_contender(fast_tmp, monkeypatch, capsys):
    """bench/torch_module.py at a tiny N: the four contenders verified against float64 and timed
    in every round, the drop-ins' plan source recorded (nothing tuned here: the heuristic)."""
    bench = load_script("torch_module")
    out = fast_tmp / "results"
    monkeypatch.setattr("sys.argv", ["torch_module.py", "--n", "8", "--c", "8", "--rounds", "2",
                                     "--compile-backend", "aot_eager", "--out", str(out),
                                     "--db", str(fast_tmp / "p.sqlite")])
    bench.main()
    rec = json.loads((out / "torch-module-pairblock-C8-cpu.json").read_text())
    (res,) = rec["results"]
    assert res["n"] == 8 and set(res["plans"]) == {"trimul_outgoing", "trimul_incoming"}
    assert all(p["source"] == "heuristic" for p in res["plans"].values())
    rows = res["contenders"]
    assert set(rows) == {"reference eager", "reference torch.compile", "autotune eager",
                         "autotune torch.compile"}
    for r in rows.values():
        assert r["status"] == "ok" and r["rel_err"] < 1e-3 and len(r["times_s"]) == 2
        assert r["median_s"] > 0 and r["ratio_to_fastest_reference"] > 0
    assert "autotune torch.compile" in capsys.readouterr().out


def test_autotune_bench_module_runs_the_model_after_the_plan_bench(cached_tmp):
    """`autotune bench trimul_outgoing --module` at two tiny N: each shape's plan bench, then the
    pair-stack step with the drop-in modules and the reference, one process, one JSON object."""
    from typer.testing import CliRunner

    from autotune.cli.app import app
    out, db = cached_tmp / "results", str(cached_tmp / "p.sqlite")
    r = CliRunner().invoke(app, ["bench", "trimul_outgoing", "--dims", "N=8,12,C=4", "--module",
                                 "--peers", "torch", "--rounds", "1", "--greedy-timeout", "0",
                                 "--search-budget", "2", "--db", db, "--out", str(out),
                                 "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert [b["dims"]["N"] for b in doc["benches"]] == [8, 12]
    assert [res["n"] for res in doc["module"]["results"]] == [8, 12]
    for res in doc["module"]["results"]:
        # outgoing was tuned at this N by the plan bench's search; incoming was not
        assert res["plans"]["trimul_outgoing"]["source"] == "exact"
        assert res["plans"]["trimul_incoming"]["source"] == "heuristic"
        for row in res["contenders"].values():
            assert row["status"] == "ok" and row["rel_err"] < 1e-3 and row["median_s"] > 0
    assert (out / "torch-module-pairblock-C4-cpu.json").exists()
    assert (out / "bench-trimul_outgoing-N12-C4-cpu.json").exists()


@pytest.mark.parametrize("args, says", [
    (["gated_mlp", "--module"], "has no drop-in module"),
    (["--all", "--module"], "no --module"),
])
def test_autotune_bench_module_refuses_what_it_cannot_run(args, says):
    from typer.testing import CliRunner

    from autotune.cli.app import app
    r = CliRunner().invoke(app, ["bench", *args])
    assert r.exit_code != 0 and says in r.output
