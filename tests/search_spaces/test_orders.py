"""Contraction orders: the optimal order of known matrix chains, the k best orders against a
brute force over every tree (flops counted on the rewritten ops themselves), the rewrite's float64
reference against the original's (elementwise factors, batch indices, constants), the order:STMT
parameter (only for products that an order makes cheaper; none in the built-ins), candidates
with orders (JSON, params_of, the [space] table) and the cost model on the rewritten plan."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import costmodel
from autotune.reference import reference
from search_spaces import builtin_names, load_workload, parse_workload
from search_spaces.candidate import Candidate
from search_spaces.orders import ORDER_CHOICES, choices_for, describe, product_of
from search_spaces.plans import NAMED_PLANS, named_plan
from search_spaces.rewrite import rewrite, rewritten
from search_spaces.space import SPACE_VERSION, UNSPLIT, SearchSpace
from search_spaces.answers import params_of
from search_spaces.trees import canonical, leaves_of, parse_tree, tree_text
from tests.search_spaces.test_space import SMALL


def workload(program: str, dims: dict[str, int], inputs: dict[str, list[str]],
             outputs=("r",), space: str = "", dtype: str = "float32"):
    text = (f'name = "t"\ndtype = "{dtype}"\noutputs = {json.dumps(list(outputs))}\n'
            f'program = """\n{program}\n"""\n'
            "[dims]\n" + "".join(f"{k} = {v}\n" for k, v in dims.items())
            + "[inputs]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in inputs.items())
            + space)
    return parse_workload(text, "t.toml")


def chain(p: list[int], dtype: str = "float32"):
    """``r[i0,in] += A0[i0,i1] * A1[i1,i2] * ...``: the matrix chain with dims ``p``."""
    n = len(p) - 1
    body = " * ".join(f"A{k}[i{k},i{k + 1}]" for k in range(n))
    return workload(f"r[i0,i{n}] += {body}", {f"D{k}": v for k, v in enumerate(p)},
                    {f"A{k}": [f"D{k}", f"D{k + 1}"] for k in range(n)}, dtype=dtype)


# Textbook matrix chains (dims p, the fewest scalar multiplications, an optimal parenthesization)
CHAINS = [([10, 30, 5, 60], 4500, "((0,1),2)"),
          ([40, 20, 30, 10, 30], 26000, "((0,(1,2)),3)"),
          ([30, 35, 15, 5, 10, 20], 11875, "((0,(1,2)),(3,4))"),
          ([30, 35, 15, 5, 10, 20, 25], 15125, "((0,(1,2)),((3,4),5))")]   # CLRS 15.2, greedy


@pytest.mark.parametrize("p,mults,tree", CHAINS)
def test_matrix_chain_optimum(p, mults, tree):
    ch = choices_for(chain(p).ops[0])
    best = ch.orders[0]
    assert best.flops == 2 * mults          # a multiply and an add per scalar multiplication
    assert tree_text(best.tree) == tree
    assert 1 <= len(ch.orders) <= ORDER_CHOICES
    assert [o.flops for o in ch.orders] == sorted(o.flops for o in ch.orders)
    assert all(o.flops < ch.unsplit_flops for o in ch.orders)
    assert len({o.tree for o in ch.orders}) == len(ch.orders)


def _all_trees(items: tuple[int, ...]):
    if len(items) == 1:
        yield items[0]
        return
    first, rest = items[0], items[1:]
    for r in range(len(rest)):             # the part holding ``first`` takes r of the rest
        for mask in range(1 << len(rest)):
            if bin(mask).count("1") != r:
                continue
            left = (first,) + tuple(x for k, x in enumerate(rest) if mask >> k & 1)
            right = tuple(x for k, x in enumerate(rest) if not mask >> k & 1)
            for a in _all_trees(left):
                for b in _all_trees(right):
                    yield canonical((a, b))


def _split_flops(w, stmt: str, tree) -> int:
    """Flops of the ops the rewrite makes of ``stmt`` (counted by the IR, not the DP)."""
    others = sum(op.iterations * op.flops_per_iteration()[0] for op in w.ops if op.out != stmt)
    return rewrite(w, ((stmt, tree),)).flops() - others


def random_product(rng, n_factors: int):
    """A random einsum-like statement over 3..5 factors with random extents."""
    pool = "abcdefg"
    ext = {i: int(rng.integers(2, 8)) for i in pool}
    factors = []
    while len(factors) < n_factors:
        k = int(rng.integers(1, 4))
        idx = tuple(rng.choice(list(pool), size=k, replace=False))
        if set(idx) not in [set(f) for f in factors]:
            factors.append(idx)
    used = list(dict.fromkeys(i for f in factors for i in f))
    out = [i for i in used if rng.random() < 0.35][:3] or [used[0]]
    if set(out) == set(used):
        out = out[:-1] or [used[0]]
    names = [f"F{k}" for k in range(n_factors)]
    body = " * ".join(f"{n}[{','.join(f)}]" for n, f in zip(names, factors))
    return workload(f"r[{','.join(out)}] += {body}", {f"E{i}": ext[i] for i in pool},
                    {n: [f"E{i}" for i in f] for n, f in zip(names, factors)})


@pytest.mark.parametrize("seed", range(12))
def test_best_orders_match_a_brute_force_over_every_tree(seed):
    rng = np.random.default_rng(seed)
    w = random_product(rng, 3 + seed % 3)
    op = w.ops[0]
    p = product_of(op)
    if p is None:
        pytest.skip("the draw merged into fewer than three leaves")
    costs = sorted(_split_flops(w, "r", t) for t in set(_all_trees(tuple(range(len(p.leaves))))))
    unsplit = op.iterations * op.flops_per_iteration()[0]
    want = [c for c in costs if c < unsplit][:ORDER_CHOICES]
    ch = choices_for(op)
    assert (ch is None and not want) or [o.flops for o in ch.orders] == want
    for o in (ch.orders if ch else ()):
        assert _split_flops(w, "r", o.tree) == o.flops


def _offered_orders_agree_with_the_reference(w, stmt="r", seed=0):
    ch = SearchSpace(w).order_choices[stmt]
    inputs = {k: v.astype(np.float64) for k, v in w.random_inputs(seed).items()}
    ref = reference(w, inputs)
    for order in ch.orders:
        rw = rewrite(w, ((stmt, order.tree),))
        assert rw.outputs == w.outputs and rw.input_names == w.input_names
        got = reference(rw, inputs)
        assert set(got) == set(ref)
        for o in w.outputs:
            np.testing.assert_allclose(got[o], ref[o], rtol=1e-10, atol=1e-10 * np.abs(
                ref[o]).max())
    return ch


def test_rewrite_of_a_chain_names_its_intermediates_and_keeps_the_statement():
    w = chain([6, 7, 5, 4])
    rw = rewrite(w, (("r", ((0, 1), 2)),))
    assert [op.text() for op in rw.ops] == ["r__1[d0,d1] += (A0[d0,d2] * A1[d2,d1])",
                                            "r[d0,d1] += (r__1[d0,d2] * A2[d2,d1])"]
    assert rw.shapes["r__1"] == (6, 5) and rw.outputs == ("r",)
    assert rewrite(w, (("r", (0, (1, 2))),)).op("r__1").text() == \
        "r__1[d0,d1] += (A1[d0,d2] * A2[d2,d1])"
    assert rewrite(w, ()) is w
    _offered_orders_agree_with_the_reference(w)


def test_rewrite_with_an_elementwise_factor_a_batch_index_and_constants():
    # exp(...) and the pair bias z are leaves of their own; s shares its indices with A;
    # h is a batch index kept by every node; the division and the negation scale the root
    w = workload("r[h,a,d] += -exp(A[h,a,b]) * s[h,a,b] * B[h,b,c] * M[c,d] / (2.0 * z[h,d]) / 4.0",
                 {"H": 3, "A": 5, "B": 6, "C": 4, "D": 7},
                 {"A": ["H", "A", "B"], "s": ["H", "A", "B"], "B": ["H", "B", "C"],
                  "M": ["C", "D"], "z": ["H", "D"]})
    p = product_of(w.ops[0])
    assert len(p.leaves) == 4 and len(p.consts) == 2     # exp(A)*s merged; -1 and 1/4
    ch = _offered_orders_agree_with_the_reference(w)
    rw = rewrite(w, (("r", ch.orders[0].tree),))
    elementwise = [op for op in rw.ops if op.combiner == "none" and op.out != "r"]
    assert any("exp" in op.text() for op in elementwise)   # the compound leaf, materialized
    assert all(op.out.startswith("r__") for op in rw.ops if op.out != "r")


@pytest.mark.parametrize("seed", range(8))
def test_rewrite_of_random_products_agrees_with_the_reference(seed):
    rng = np.random.default_rng(100 + seed)
    w = random_product(rng, 3 + seed % 3)
    if not SearchSpace(w).order_choices:
        pytest.skip("no order of this draw beats the unsplit statement")
    _offered_orders_agree_with_the_reference(w, seed=seed)


def test_intermediate_names_skip_tensors_that_exist():
    w = workload("r__1[a,b] = exp(X[a,b])\nr[a,d] += r__1[a,b] * B[b,c] * M[c,d]",
                 {"N": 4}, {"X": ["N", "N"], "B": ["N", "N"], "M": ["N", "N"]})
    rw = rewrite(w, (("r", ((0, 1), 2)),))
    assert [op.out for op in rw.ops] == ["r__1", "r__2", "r"]
    _offered_orders_agree_with_the_reference(w)


def test_two_factors_one_compound_split_with_the_repeated_factor_computed_once():
    # a covariance: the centred x is one leaf read as [t,c] and as [t,d]
    w = workload("mu[c] += x[t,c] / T\n"
                 "r[c,d] += (x[t,c] - mu[c]) * (x[t,d] - mu[d]) / T",
                 {"T": 40, "C": 6}, {"x": ["T", "C"]})
    op = w.op("r")
    p = product_of(op)
    assert len(p.leaves) == 2 and not any(leaf.is_access for leaf in p.leaves)
    ch = _offered_orders_agree_with_the_reference(w)
    assert [tree_text(o.tree) for o in ch.orders] == ["(0,1)"]
    # one subtraction over (t, c), then a multiply-add and the 1/T over (c, d, t)
    assert ch.orders[0].flops == 40 * 6 + 3 * 40 * 6 * 6 < ch.unsplit_flops
    rw = rewrite(w, (("r", (0, 1)),))
    assert [o.out for o in rw.ops] == ["mu", "r__1", "r"]
    assert rw.op("r__1").combiner == "none" and rw.shapes["r__1"] == (40, 6)
    assert rw.op("r").text() == "r[d0,d1] += ((r__1[d2,d0] * r__1[d2,d1]) / 40.0)"
    # the named plans take the split, so the contraction can be a library GEMM
    space = SearchSpace(w)
    assert named_plan(space, "heuristic").orders == (("r", (0, 1)),)
    assert "r" in space.variant((("r", (0, 1)),)).library_ok and "r" not in space.library_ok


def test_two_factors_are_left_alone_where_splitting_saves_nothing():
    # plain accesses: already a pairwise contraction
    assert product_of(workload("r[a,c] += A[a,b] * B[b,c]", {"N": 4},
                               {"A": ["N", "N"], "B": ["N", "N"]}).ops[0]) is None
    # the compound factor spans every index: as many flops split, and a tensor more
    w = workload("r[a] += exp(A[a,b]) * v[b]", {"N": 8}, {"A": ["N", "N"], "v": ["N"]})
    assert product_of(w.ops[0]) is not None and choices_for(w.ops[0]) is None
    assert SearchSpace(w).order_choices == {}


def test_rewrite_rejects_what_it_cannot_split():
    w = chain([4, 5, 6, 7])
    with pytest.raises(ValueError, match="no statement"):
        rewrite(w, (("q", ((0, 1), 2)),))
    with pytest.raises(ValueError, match="does not cover"):
        rewrite(w, (("r", (0, 1)),))
    rw = rewrite(w, (("r", ((0, 1), 2)),))
    with pytest.raises(ValueError, match="not a product"):
        rewrite(rw, (("r", ((0, 1), 2)),))       # applied twice: refused, never silently


# ---- the space --------------------------------------------------------------------------------

def test_order_parameter_only_for_products_an_order_makes_cheaper():
    w = workload("t[a,c] += A[a,b] * B[b,c]\n"            # two factors: nothing to order
                 "u[a] += A[a,b] * A[a,b] * C[a,b]\n"      # one index set: one leaf
                 "r[a,d] += t[a,c] * B[c,b] * M[b,d]\n"
                 "q[a,d] = r[a,d] * u[a]",
                 {"N": 16}, {"A": ["N", "N"], "B": ["N", "N"], "C": ["N", "N"],
                             "M": ["N", "N"]}, outputs=("q",))
    space = SearchSpace(w)
    assert set(space.order_choices) == {"r"}
    asked = {}
    space.build(lambda name, opts: asked.setdefault(name, list(opts))[
        -1 if name.startswith("impl:") else 0])           # loop nests: fusion is asked
    orders = [n for n in asked if n.startswith("order:")]
    assert orders == ["order:r"] and asked["order:r"][-1] == UNSPLIT
    assert asked["order:r"][:-1] == [tree_text(o.tree) for o in space.order_choices["r"].orders]
    tag = "@r=" + asked["order:r"][0]
    assert "impl:r__1" + tag in asked          # the intermediate is an ordinary contraction
    # questions whose options mean something else once r is split carry the order's tag
    # (a parameter name has one set of options); the others are shared with the unsplit op
    assert asked["impl:r" + tag] == ["library", "loop"] and "impl:r" not in asked
    assert "fuse:r->q" in asked and "fuse:t->r__1" + tag in asked
    asked_unsplit = {}
    space.build(lambda n, opts: asked_unsplit.setdefault(
        n, list(opts))[-1 if n.startswith(("order:", "impl:")) else 0])
    assert asked_unsplit["impl:r"] == ["loop"] and "fuse:r->q" in asked_unsplit


@pytest.mark.parametrize("name", builtin_names())
def test_builtins_have_no_orders_and_unchanged_candidates(name):
    w = load_workload(name, SMALL.get(name, {}))
    assert all(product_of(op) is None for op in w.ops)     # no product of three factors
    space = SearchSpace(w)
    assert space.order_choices == {} and space.variant(()) is space
    asked = []
    space.random(np.random.default_rng(0))
    space.build(lambda n, opts: asked.append(n) or opts[0])
    assert not any(n.startswith("order:") for n in asked)
    for plan in NAMED_PLANS:
        cand = named_plan(space, plan)
        assert cand.orders == () and "orders" not in cand.to_dict()
        assert rewritten(w, cand) is w
    assert SPACE_VERSION == "16"    # 2: orders; 3: kernel impl; 4: chains; 5, 6: stacks; 7: pairs;
    #                                  8: kc choices; 9: GEMM precisions; 10: two-factor orders;
    #                                  11: inlining; 12: the GPU's tensor-core kernel;
    #                                  13: stacks on the GPU; 14: plain chains; 15: a chain's
    #                                  walk in one block; 16: split by columns


def test_random_candidates_round_trip_and_rebuild_from_their_params():
    w = chain([12, 9, 10, 11])
    space = SearchSpace(w)
    rng = np.random.default_rng(3)
    seen_orders = set()
    for _ in range(30):
        cand = space.random(rng)
        seen_orders.add(cand.orders)
        assert Candidate.from_json(cand.to_json()) == cand
        params = params_of(space, cand)
        assert params is not None and params["order:r"] == (
            tree_text(dict(cand.orders)["r"]) if cand.orders else UNSPLIT)
        assert space.build(lambda n, o: params[n]).key == cand.key
        rw = rewritten(w, cand)
        assert {s.anchor for s in cand.schedules} <= {op.out for op in rw.ops}
    assert () in seen_orders and len(seen_orders) == 3
    # the outer product A0·A2 first costs more than the unsplit op: never offered, no params
    odd = replace(named_plan(space, "unfused"), orders=(("r", ((0, 2), 1)),))
    assert params_of(space, odd) is None


def test_candidate_orders_in_json_and_keys():
    w = chain([10, 30, 5, 60])
    space = SearchSpace(w)
    a = named_plan(space, "unfused")
    assert a.orders == (("r", ((0, 1), 2)),)
    d = json.loads(a.to_json())
    assert d["orders"] == {"r": [[0, 1], 2]}
    d["orders"] = {"r": [2, [1, 0]]}             # any spelling of the same tree: canonical
    assert Candidate.from_dict(d) == a
    d["orders"] = {"r": [[1, 2], 0]}
    assert Candidate.from_dict(d).key != a.key
    assert Candidate.from_dict({k: v for k, v in d.items() if k != "orders"}).orders == ()
    assert parse_tree("((0,1),2)") == ((0, 1), 2) and leaves_of(((0, 2), 1)) == (0, 2, 1)


def test_named_plans_use_the_order_of_fewest_flops():
    w = chain([50, 5, 40, 6])
    space = SearchSpace(w)
    best = space.order_choices["r"].orders[0]
    assert best.tree == (0, (1, 2))               # 5*40*6 + 50*5*6 beats 50*5*40 + 50*40*6
    for plan in NAMED_PLANS:
        assert dict(named_plan(space, plan).orders) == {"r": best.tree}


def test_space_table_edges_follow_the_split():
    space_toml = '[space]\nforbid_fusion = ["e->r"]\nforce_fusion = ["r->q"]\n'
    w = workload("e[a,b] = exp(X[a,b])\nr[a,d] += e[a,b] * B[b,c] * M[c,d]\nq[a,d] = r[a,d] * 2.0",
                 {"N": 16}, {"X": ["N", "N"], "B": ["N", "N"], "M": ["N", "N"]},
                 outputs=("q",), space=space_toml)
    rw = rewrite(w, (("r", ((0, 1), 2)),))
    assert rw.space["forbid_fusion"] == ["e->r__1"] and rw.space["force_fusion"] == ["r->q"]
    variant = SearchSpace(w).variant((("r", ((0, 1), 2)),))
    assert ("e", "r__1") in variant.forbid
    rng = np.random.default_rng(0)
    for _ in range(10):
        cand = variant.random(rng)
        assert "e->r__1" not in cand.fused


def test_cost_model_prices_the_split_plan_as_two_gemms():
    w = chain([768, 768, 768, 768])
    space = SearchSpace(w)
    dev = costmodel.preset("h200")
    split = named_plan(space, "heuristic")
    unsplit = space.build(lambda n, opts: UNSPLIT if n.startswith("order:") else opts[0])
    assert unsplit.orders == ()
    est = costmodel.estimate(w, split, dev)
    assert [g.anchor for g in est.groups] == ["r__1", "r"]
    assert est.flops == pytest.approx(2 * 2 * 768 ** 3)
    assert est.total_s * 100 < costmodel.estimate(w, unsplit, dev).total_s
    # the intermediate is held while the plan runs: one more 768 x 768 float32 buffer
    assert costmodel.memory_bytes(w, split, 0) >= 5 * 768 * 768 * 4


def test_describe_names_the_order_and_its_flops():
    w = chain([768, 768, 768, 768])
    ch = SearchSpace(w).order_choices["r"]
    assert describe(ch, ((0, 1), 2)) == \
        "r = (A0·A1)·A2  [order 1 of 2, 1.8e9 flops vs 1.0e12 unsplit]"
    assert describe(ch, None).startswith("r = A0·A1·A2  [unsplit, 1.0e12 flops; 2 orders offered")
    assert describe(ch, ((0, 2), 1)).startswith("r = (A0·A2)·A1  [an order not offered")


def test_greedy_beyond_five_factors_still_offers_orders():
    w = chain([8, 3, 9, 4, 7, 5, 6, 2])                      # seven factors: greedy pairings
    ch = choices_for(w.ops[0])
    assert ch is not None and ch.orders
    for o in ch.orders:
        assert sorted(leaves_of(o.tree)) == list(range(7))
        assert _split_flops(w, "r", o.tree) == o.flops
    _offered_orders_agree_with_the_reference(w)

