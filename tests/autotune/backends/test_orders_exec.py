"""Candidates with contraction orders run: on the CPU backend (random candidates of product
workloads, through make_executable), under the CUDA host emulator, on a GPU (cuda marker), and
through a real search (worker, verification, load_best).  Every run is checked against the
float64 reference of the *original* workload, and its outputs are exactly the original outputs."""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

import autotune
from autotune.api import make_executable, run_search
from autotune.backends.base import verify
from autotune.backends.factory import backend_kind
from autotune.reference import reference
from autotune.report.dot import dispatch_dot
from autotune.search.config import SearchConfig
from search_spaces import load_workload, parse_workload
from search_spaces.plans import NAMED_PLANS, named_plan
from search_spaces.space import SearchSpace, TileBounds

from tests.support.skips import GPU_SKIP

CHAIN = Path(__file__).resolve().parents[2] / "data" / "chain3.toml"

# an elementwise factor (exp), a factor sharing its indices with another (s), a batch index h,
# a constant and a consumer of the product
PRODUCT = '''name = "product"
outputs = ["out"]
program = """
r[h,a,d] += exp(A[h,a,b] * 0.5) * s[h,a,b] * B[h,b,c] * M[c,d] / 3.0
out[h,a,d] = r[h,a,d] + 1.0
"""
[dims]
H = 2
A = 12
B = 10
C = 9
D = 11
[inputs]
A = ["H", "A", "B"]
s = ["H", "A", "B"]
B = ["H", "B", "C"]
M = ["C", "D"]
'''


def product():
    return parse_workload(PRODUCT, "product.toml")


# two factors, both compound and the same under other index names: the split computes the
# centred x once and reads it as both operands of one contraction
COVARIANCE = '''name = "covariance"
outputs = ["corr"]
program = """
mu[c] += x[t,c] / T
r[c,d] += (x[t,c] - mu[c]) * (x[t,d] - mu[d]) / T
vr[c] += (x[t,c] - mu[c]) * (x[t,c] - mu[c]) / T
corr[c,d] = r[c,d] * rsqrt(vr[c] + 1e-6) * rsqrt(vr[d] + 1e-6)
"""
[dims]
T = 50
C = 13
[inputs]
x = ["T", "C"]
'''


def covariance():
    return parse_workload(COVARIANCE, "covariance.toml")


def candidates(w, n: int, seed: int, bounds: TileBounds = TileBounds()):
    space = SearchSpace(w, bounds)
    rng = np.random.default_rng(seed)
    out = {c.key: c for c in (named_plan(space, p) for p in NAMED_PLANS)}
    while len(out) < len(NAMED_PLANS) + n:
        c = space.random(rng)
        out.setdefault(c.key, c)
    return list(out.values())


def check(w, plan_of, cands, seed: int = 0):
    inputs = w.random_inputs(seed)
    ref = reference(w, inputs)
    orders = set()
    for cand in cands:
        outs = plan_of(cand)(**inputs)
        assert set(outs) == set(w.outputs), cand.to_json()     # no intermediate leaks out
        _, why = verify(outs, ref, w.rtol)
        assert not why, f"{why}\n{cand.to_json()}"
        orders.add(cand.orders)
    return orders


@pytest.mark.parametrize("make", [product, lambda: load_workload(str(CHAIN), {"N": 20}),
                                  covariance], ids=["product", "chain3", "covariance"])
def test_random_candidates_run_on_the_cpu(make, tmp_path):
    w = make()
    n_orders = len(SearchSpace(w).order_choices["r"].orders)
    orders = check(w, lambda c: make_executable(w, c, "cpu", tmp_path), candidates(w, 10, 1))
    assert () in orders and len(orders) == n_orders + 1   # every order and the unsplit op ran


def test_emitted_sources_and_the_dispatch_graph_follow_the_split():
    w = product()
    space = SearchSpace(w)
    # the best order, every contraction a generated loop nest
    cand = space.build(lambda n, opts: "loop" if n.startswith("impl:") else opts[0])
    assert cand.orders
    emitted = backend_kind("cpu").emit(w, cand)
    assert "G_r__" in emitted.files["plan.c"]
    assert "r__" in dispatch_dot(w, cand)


@pytest.mark.parametrize("make", [product, covariance])
def test_cuda_plans_under_the_emulator(make, emulator, tmp_path):
    from autotune.backends.cuda.executor import CudaPlan
    w = make()
    cands = [c for c in candidates(w, 6, 2, TileBounds(1, 1024)) if c.orders]
    assert cands
    check(w, lambda c: CudaPlan(w, c, tmp_path, runtime=emulator), cands, seed=1)


@pytest.mark.cuda
def test_cuda_plans_on_the_gpu(tmp_path):
    from autotune.backends.cuda.executor import CudaPlan
    from autotune.backends.cuda.runtime import CupyRuntime
    try:
        rt = CupyRuntime()
    except Exception:
        pytest.skip(GPU_SKIP)
    w = product()
    check(w, lambda c: CudaPlan(w, c, tmp_path, runtime=rt), candidates(w, 6, 3,
                                                                          TileBounds(1, 1024)))


def test_a_search_finds_split_plans_and_load_best_runs_them(tmp_path):
    w = load_workload(str(CHAIN), {"N": 48})
    path = tmp_path / "p.sqlite"
    result = run_search(w, "cpu", db=path, config=SearchConfig(budget=6, model_pool=20,
                                                               model_seeds=2))
    assert result.best is not None
    best = result.best.to_candidate()
    assert best.orders and dict(best.orders)["r"] in [
        o.tree for o in SearchSpace(w).order_choices["r"].orders]
    with warnings.catch_warnings():
        warnings.simplefilter("error")             # a cached plan: no fallback warning
        fn = autotune.load_best(w, device="cpu", db=path)
    inputs = w.random_inputs(7)
    outs = fn(**inputs)
    assert set(outs) == {"r"}
    _, why = verify(outs, reference(w, inputs), w.rtol)
    assert not why


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_a_long_fake_search_mixes_orders_and_the_unsplit_op(sampler, fresh_db):
    """Past TPE's random start-up and with local search on: the order:r answer changes which
    questions follow (impl:r offers a library GEMM only once r is a pairwise contraction), and
    the samplers take that in their stride."""
    from tests.support.fake_search import DEV, run
    w = load_workload(str(CHAIN), {"N": 64})
    config = SearchConfig(budget=40, sampler=sampler, model_pool=10, model_seeds=2,
                          climb_rounds=1, local_every=5, confirm_rounds=0)
    result, rows, _ = run(w, SearchSpace(w), fresh_db, config)
    assert len(rows) == 40 and not [r for r in rows if r.status == "failed"]
    orders = {r.to_candidate().orders for r in rows}
    assert () in orders and len(orders) >= 2
    assert {tuple(r.options.get("order:r", ())) for r in rows} == {
        ("((0,1),2)", "(0,(1,2))", "none")}
    best = result.best.to_candidate()
    assert best.orders                       # the unsplit op is ~100x slower on the model
    assert DEV.name
