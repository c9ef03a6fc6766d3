"""Inlining (search_spaces.inline): which intermediates may be recomputed in each consumer, the
rewrite agreeing with the float64 reference, the inline:OP questions of the space, the
candidates' encoding, the answers that rebuild them and the inlined seed plan."""
from __future__ import annotations

import json

import numpy as np
import pytest

from autotune.reference import reference
from search_spaces import builtin_names, load_workload, parse_workload
from search_spaces.answers import params_of
from search_spaces.candidate import Candidate
from search_spaces.inline import inlinable, inline
from search_spaces.plans import INLINED, NAMED_PLANS, inlined_plan, named_plan, seed_plans
from search_spaces.rewrite import rewritten
from search_spaces.space import SearchSpace
from tests.search_spaces.test_space import SMALL, check_candidate

# y read by a column max and a row sum (transposed in one statement); d read twice by one
# reduction and by the normalisation; e read by a contraction over an index it lacks
PROGRAM = '''name = "t"
outputs = ["cm", "rs", "n", "o"]
program = """
y[i,j] = x[i,j] * 0.5 + x[j,i] * 0.5 - u[i] * u[j]
cm[j] max= y[i,j]
rs[i] += exp(y[i,j])
mu[i] += x[i,j] / J
d[i,j] = x[i,j] - mu[i]
vr[i] += d[i,j] * d[i,j] / J
n[i,j] = d[i,j] * rsqrt(vr[i] + 1e-5)
e[i,j] = sigmoid(x[i,j])
f[i,j] = e[i,j] * 2.0
o[i,k] += e[i,j] * w[j,k] + f[i,j]
"""
[dims]
I = 12
J = 12
K = 5
[inputs]
x = ["I", "J"]
u = ["I"]
w = ["J", "K"]
'''


def workload(extra: str = ""):
    return parse_workload(PROGRAM + extra, "t.toml")


def agree(w, names, seed=0):
    inputs = {k: v.astype(np.float64) for k, v in w.random_inputs(seed).items()}
    want, got = reference(w, inputs), reference(inline(w, names), inputs)
    assert set(got) == set(want)
    for o in w.outputs:
        np.testing.assert_allclose(got[o], want[o], rtol=1e-12, atol=1e-12)


def test_what_may_be_inlined():
    w = workload()
    # e: o reads it over (i, j) inside a domain with k (recomputed per k: never offered);
    # f has one consumer (fusion's case); outputs and reductions are not candidates
    assert inlinable(w) == ("y", "d")


def test_the_rewrite_agrees_with_the_reference_and_drops_the_op():
    w = workload()
    for names in (("y",), ("d",), ("y", "d")):
        agree(w, names)
        rw = inline(w, names)
        assert not set(names) & set(rw.shapes) and rw.outputs == w.outputs
    rw = inline(w, ("y",))
    # the transposed read became the body with its indices swapped
    assert "x[d0,d1]" in rw.op("cm").text() and "x[d1,d0]" in rw.op("cm").text()
    assert inline(w, ()) is w
    with pytest.raises(ValueError, match="cannot be inlined"):
        inline(w, ("e",))


def test_an_edge_named_in_the_space_table_pins_the_op():
    w = workload('[space]\nforbid_fusion = ["d->vr"]\n')
    assert inlinable(w) == ("y",)


def test_the_space_table_turns_inlining_off():
    w = workload('[space]\ninline = false\n')
    space = SearchSpace(w)
    assert space.inline_options == () and INLINED not in [c.name for c in seed_plans(space)]
    asked = []
    space.build(lambda n, opts: asked.append(n) or opts[-1])
    assert not any(n.startswith("inline:") for n in asked)


def test_inline_questions_candidates_and_their_encoding():
    w = workload()
    space = SearchSpace(w)
    asked = {}
    cand = space.build(lambda n, opts: asked.setdefault(n, list(opts))[-1])
    assert asked["inline:y"] == [0, 1] and asked["inline:d"] == [0, 1]
    assert cand.inlined == ("d", "y")
    check_candidate(space, cand)
    rw = rewritten(w, cand)
    assert "y" not in rw.shapes and "d" not in rw.shapes
    # a tagged question: mu->vr's fusion means something else once d is inlined
    assert any(n.endswith("@inline=d,y") for n in asked)
    back = Candidate.from_json(cand.to_json())
    assert back == cand and json.loads(cand.to_json())["inlined"] == ["d", "y"]
    # nothing inlined: nothing in the encoding, keys unchanged
    plain = named_plan(space, "heuristic")
    assert plain.inlined == () and "inlined" not in plain.to_dict()


@pytest.mark.parametrize("seed", range(6))
def test_answers_rebuild_inlined_candidates(seed):
    w = workload()
    space = SearchSpace(w)
    cand = space.random(np.random.default_rng(seed))
    params = params_of(space, cand)
    assert params is not None
    assert space.build(lambda n, opts: params[n]).key == cand.key


def test_the_inlined_seed_plan():
    w = workload()
    space = SearchSpace(w)
    plan = inlined_plan(space)
    assert plan.name == INLINED and plan.inlined == ("d", "y")
    check_candidate(space, plan)
    assert [c.name for c in seed_plans(space)][-1] == INLINED
    assert params_of(space, plan) is not None


def test_chain_members_are_not_offered():
    # attention's p is read by its sum and its normalisation: inlinable, but a chain member
    w = load_workload("attention", SMALL.get("attention", {}))
    assert "p" in inlinable(w)
    assert "p" not in SearchSpace(w).inline_options


@pytest.mark.parametrize("name", builtin_names())
def test_builtins_named_plans_inline_nothing(name):
    w = load_workload(name, SMALL.get(name, {}))
    space = SearchSpace(w)
    for plan in NAMED_PLANS:
        assert named_plan(space, plan).inlined == ()
