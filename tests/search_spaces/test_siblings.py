"""Sibling contractions (search_spaces.siblings): which contractions are siblings, when the space
offers to stack them, and how a stacked candidate is encoded and priced."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import costmodel
from costmodel.devices import CPU_DEFAULT
from search_spaces import load_workload, parse_workload
from search_spaces.answers import params_of
from search_spaces.loader import builtin_text
from search_spaces.candidate import Candidate
from search_spaces.plans import NAMED_PLANS, chained_plan, named_plan
from search_spaces.siblings import Siblings, checked_stack, sibling_sets, stack_layout
from search_spaces.space import SearchSpace, TileBounds

# two products of one computed operand y (the shared B side) by two inputs, a constant scale,
# a third product whose other operand is computed (not a sibling), and an output product
SHARED_B = '''name = "shared_b"
outputs = ["out", "o3"]
program = """
y[k,n]    = exp(Y[k,n] * 0.1)
p1[m,n]  += X1[m,k] * y[k,n] * 0.5
p2[m,n]  += X2[m,k] * y[k,n] * 0.5
z[m,k]    = X1[m,k] * 2.0
p3[m,n]  += z[m,k] * y[k,n] * 0.5
o3[m,n]  += X3[m,k] * y[k,n] * 0.5
out[m,n]  = p1[m,n] * sigmoid(p2[m,n]) + p3[m,n]
"""
[dims]
M = 24
K = 12
N = 20
[inputs]
Y = ["K", "N"]
X1 = ["M", "K"]
X2 = ["M", "K"]
X3 = ["M", "K"]
'''


def shared_b():
    return parse_workload(SHARED_B, "shared_b.toml")


def stacking_choice(space: SearchSpace, rng, leave_out: tuple[str, ...] = ()):
    """A ``choose`` that runs every sibling as a library GEMM and stacks it (which fixes the
    members' layouts), but the siblings in ``leave_out``, with no chain (a chain walks its
    scores, siblings among them); every other question at random."""
    sibs = {m for s in space.siblings for m in s.members}

    def choose(q, opts):
        kind, _, rest = q.partition(":")
        if kind == "impl" and rest in sibs:
            return "library"
        if kind == "chain":
            return 0
        if kind == "stack":
            return 0 if rest.partition(":")[2] in leave_out else 1
        assert not (kind == "layout" and rest in sibs - set(leave_out)), \
            f"{q}: a stacked member's layout"
        return opts[int(rng.integers(len(opts)))]
    return choose


def test_the_built_ins_siblings():
    sets = {name: sibling_sets(load_workload(name)) for name in
            ("trimul_outgoing", "gated_mlp", "attention", "gelu_mlp", "pair_transition")}
    assert sets["trimul_outgoing"] == (Siblings(("pa", "ga", "pb", "gb", "go"), "a"),)
    assert sets["gated_mlp"] == (Siblings(("g", "u"), "a"),)
    assert sets["attention"] == (Siblings(("q", "k", "v"), "a"),)
    assert sets["gelu_mlp"] == () and sets["pair_transition"] == ()


def test_siblings_share_one_operand_and_differ_in_an_input():
    # p3's other operand is computed, o3 is an output: neither is a sibling
    assert sibling_sets(shared_b()) == (Siblings(("p1", "p2"), "b"),)
    w = shared_b()
    assert stack_layout(w, sibling_sets(w)[0], "p1") == (0, 1)     # m (from X) outermost


def test_the_space_offers_stacks_only_where_the_backend_runs_them():
    w = load_workload("gated_mlp")
    asked: list[str] = []
    SearchSpace(w).build(lambda q, opts: asked.append(q) or opts[0])
    assert not any(q.startswith("stack:") for q in asked)        # default bounds: not offered
    space = SearchSpace(w, TileBounds(stacks=True))
    cand = space.build(stacking_choice(space, np.random.default_rng(0)))
    assert cand.stacks == (("g", "u"),)
    off = parse_workload(builtin_text("gated_mlp") + "\n[space]\nstacks = false\n", "g.toml")
    assert SearchSpace(off, TileBounds(stacks=True)).siblings == ()


def test_a_stack_needs_library_gemms_in_the_stack_layout():
    w = load_workload("trimul_outgoing", {"N": 8, "C": 4})
    space = SearchSpace(w, TileBounds(stacks=True))
    for plan in NAMED_PLANS:
        assert named_plan(space, plan).stacks == ()   # named plans stay what the rules build
    assert chained_plan(space).stacks == ()
    rng = np.random.default_rng(1)
    seen = 0
    for _ in range(60):
        cand = space.random(rng)
        for members in cand.stacks:
            seen += 1
            impl = {s.anchor: s.impl for s in cand.schedules}
            checked_stack(w, members, impl, lambda t: cand.layout(t, len(w.shapes[t])))
    assert seen > 0


@pytest.mark.parametrize("make", [lambda: load_workload("trimul_outgoing", {"N": 8, "C": 4}),
                                  shared_b], ids=["trimul", "shared_b"])
def test_stacked_candidates_round_trip_and_rebuild_from_their_params(make):
    w = make()
    space = SearchSpace(w, TileBounds(stacks=True))
    cand = space.build(stacking_choice(space, np.random.default_rng(2)))
    assert cand.stacks
    assert Candidate.from_json(cand.to_json()) == cand
    assert params_of(space, cand)[f"stack:{cand.stacks[0][0]}"] == 1
    unstacked = replace(cand, stacks=())
    assert "stacks" not in unstacked.to_dict()      # plans without stacks keep their keys
    assert unstacked.key != cand.key


def test_a_stack_may_leave_siblings_out_even_its_anchor():
    """With more than two stackable siblings each one's joining is a question (yes by
    default): trimul's output gate may run alone while the four projections stack, and the
    stack then runs in its first member's place."""
    w = load_workload("trimul_outgoing", {"N": 8, "C": 4})
    space = SearchSpace(w, TileBounds(stacks=True))
    asked: list[str] = []
    choose = stacking_choice(space, np.random.default_rng(3), leave_out=("pa", "go"))
    cand = space.build(lambda q, opts: asked.append(q) or choose(q, opts))
    assert cand.stacks == (("ga", "pb", "gb"),)
    assert [q for q in asked if q.startswith("stack:")] == \
        ["stack:pa"] + [f"stack:pa:{m}" for m in ("pa", "ga", "pb", "gb", "go")]
    impl = {s.anchor: s.impl for s in cand.schedules}
    checked_stack(w, cand.stacks[0], impl, lambda t: cand.layout(t, len(w.shapes[t])))
    params = params_of(space, cand)
    assert params["stack:pa"] == 1 and params["stack:pa:pa"] == 0 and params["stack:pa:gb"] == 1
    # one member left is no stack: its layout is a question again
    asked.clear()

    def lone_choice(q, opts):
        asked.append(q)
        kind, _, rest = q.partition(":")
        if kind == "stack":
            return int(rest in ("pa", "pa:gb"))
        return "library" if kind == "impl" else opts[0]
    assert space.build(lone_choice).stacks == () and "layout:gb" in asked


def test_checked_stack_names_what_is_wrong():
    w = shared_b()
    impl = {"p1": "library", "p2": "library"}
    ident = lambda t: tuple(range(len(w.shapes[t])))
    assert checked_stack(w, ("p1", "p2"), impl, ident).shared == "b"
    with pytest.raises(ValueError, match="'p2' is stored in"):
        checked_stack(w, ("p1", "p2"), impl, lambda t: (1, 0) if t == "p2" else ident(t))
    with pytest.raises(ValueError, match="'p1' is not a library GEMM"):
        checked_stack(w, ("p1", "p2"), {"p2": "library"}, ident)
    with pytest.raises(ValueError, match="not sibling contractions"):
        checked_stack(w, ("p1", "p3"), impl, ident)
    with pytest.raises(ValueError, match="program order"):
        checked_stack(w, ("p2", "p1"), impl, ident)


def test_the_model_prices_the_shared_operand_once():
    """Trimul's projections stream a 252 MB operand: stacked, it is packed once (cheaper);
    gated_mlp's share a 0.5 MB one while 2 MB of weights are copied side by side on every call
    (dearer): the model says both, so the search has something to choose."""
    def delta(name, members):
        w = load_workload(name)
        space = SearchSpace(w, TileBounds(stacks=True))
        sib = space.siblings[0]
        base = named_plan(space, "heuristic")
        lay = dict(base.layouts) | {m: stack_layout(w, sib, m) for m in members}
        plain = replace(base, layouts=tuple(sorted(lay.items())))
        stacked = replace(plain, stacks=(members,))
        e0 = costmodel.estimate(w, plain, CPU_DEFAULT)
        e1 = costmodel.estimate(w, stacked, CPU_DEFAULT)
        assert [g.anchor for g in e1.groups if len(g.ops) > 1 and g.impl == "library"] \
            == [members[0]]                               # one group prices the stack
        assert not {g.anchor for g in e1.groups} & set(members[1:])
        assert sum(g.flops for g in e1.groups) == pytest.approx(sum(g.flops for g in e0.groups))
        return e1.total_s - e0.total_s
    assert delta("trimul_outgoing", ("pa", "ga", "pb", "gb")) < 0
    assert delta("gated_mlp", ("g", "u")) > 0
