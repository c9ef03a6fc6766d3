"""The search space: partition legality (convexity, one sink), exhaustive enumeration counted by
hand, the named plans and random candidates of every built-in, and the ``[space]`` table."""
from __future__ import annotations

import json
import math
import re
from itertools import combinations

import numpy as np
import pytest

import costmodel
from search_spaces import WorkloadError, builtin_names, load_workload, parse_workload
from search_spaces.candidate import IMPL_LIBRARY, IMPL_LOOP, Candidate
from search_spaces.gemm import gemm_form
from search_spaces.loader import builtin_text
from search_spaces.partition import check_partition, groups, legal_partitions, materialized
from search_spaces.plans import NAMED_PLANS, named_plan
from search_spaces.space import SearchSpace
from search_spaces.space_spec import edges_of


def workload(program: str, outputs: list[str], space: str = "", path: str = "small.toml"):
    text = (f'name = "small"\noutputs = {json.dumps(outputs)}\nprogram = """\n{program}"""\n'
            '[dims]\nI = 4\nJ = 3\n[inputs]\nx = ["I", "J"]\n' + space)
    return parse_workload(text, path)


# a -> b -> d and a -> c -> d: the smallest graph with a non-convex fusion
DIAMOND = ("a[i,j] = exp(x[i,j])\n"
           "b[i,j] = a[i,j] * 2.0\n"
           "c[i,j] = a[i,j] + 1.0\n"
           "d[i,j] = b[i,j] * c[i,j]\n")
# a feeds two program outputs
FORK = ("a[i,j] = exp(x[i,j])\n"
        "b[i,j] = a[i,j] * 2.0\n"
        "c[i,j] = a[i,j] + 1.0\n")

# small dims for every built-in: distinct, not all powers of two
SMALL = {"trimul_outgoing": {"N": 12, "C": 8}, "trimul_incoming": {"N": 12, "C": 8},
         "attention": {"S": 12, "H": 2, "D": 4, "C": 8},
         "gated_mlp": {"T": 12, "C": 8, "F": 16},
         "outer_product_mean": {"S": 6, "N": 10, "C": 8, "E": 4, "Z": 8},
         "triangle_attention_starting": {"N": 10, "C": 8, "H": 2, "D": 4},
         "triangle_attention_ending": {"N": 10, "C": 8, "H": 2, "D": 4},
         "msa_row_attention": {"S": 6, "N": 10, "Cm": 8, "Cz": 12, "H": 2, "D": 4},
         "pair_transition": {"N": 10, "C": 8, "F": 32},
         "gelu_mlp": {"T": 12, "C": 8, "F": 32},
         "causal_attention": {"S": 12, "H": 2, "D": 4, "C": 8}}


def small(name: str, space: str = ""):
    if not space:
        return load_workload(name, SMALL.get(name, {}))
    return parse_workload(builtin_text(name) + "\n[space]\n" + space, f"{name}.toml",
                          SMALL.get(name, {}))


# ---- legality ---------------------------------------------------------------------------------

def test_diamond_edges():
    w = workload(DIAMOND, ["d"])
    assert edges_of(w.ops) == [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")]


@pytest.mark.parametrize("fused", [{("a", "b"), ("b", "d")}, {("a", "c"), ("c", "d")}])
def test_a_path_that_leaves_the_group_and_comes_back_is_rejected(fused):
    # group {a, b, d} with c outside: a -> c leaves the group and c -> d re-enters it, so c would
    # have to run both after and before the group's single loop nest
    w = workload(DIAMOND, ["d"])
    why = check_partition(w, fused)
    assert why is not None and "not convex" in why
    assert "\n" not in why


def test_the_whole_diamond_fused_is_convex():
    w = workload(DIAMOND, ["d"])
    assert check_partition(w, {("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")}) is None
    assert check_partition(w, {("b", "d"), ("c", "d")}) is None   # {b, c, d}: a stays outside


def test_a_group_with_two_sinks_is_rejected():
    # a fused into both b and c: b and c have no consumer in the group, so no single anchor
    w = workload(FORK, ["b", "c"])
    why = check_partition(w, {("a", "b"), ("a", "c")})
    assert why is not None and "2 sinks" in why


# two chains that cross: p -> r -> u and q -> s -> v, with q -> u and p -> v across them
CROSS = ("p[i,j] = exp(x[i,j])\n"
         "q[i,j] = x[i,j] + 1.0\n"
         "r[i,j] = p[i,j] * 2.0\n"
         "s[i,j] = q[i,j] * 3.0\n"
         "u[i,j] = q[i,j] * r[i,j]\n"
         "v[i,j] = p[i,j] + s[i,j]\n"
         "t[i,j] = u[i,j] - v[i,j]\n")


def test_convex_groups_that_read_each_other_are_rejected():
    # {p, r, u} (p->r->u) reads q; {q, s, v} (q->s->v) reads p: each group is convex (nothing
    # that leaves it comes back to it), yet neither can run first.  A linear attention written
    # by a user had this shape ({kf, kv, num} and {qf, z, den}) and its search stopped on it.
    w = workload(CROSS, ["t"])
    fused = {("p", "r"), ("r", "u"), ("q", "s"), ("s", "v")}
    why = check_partition(w, fused)
    assert why is not None and "cycle" in why and "\n" not in why
    assert "{p, r, u}" in why and "{q, s, v}" in why and "{t}" not in why
    assert check_partition(w, {("p", "r"), ("r", "u"), ("q", "s")}) is None
    # every partition the enumeration calls legal has a run order
    parts = legal_partitions(w)
    assert frozenset(fused) not in parts
    for part in parts:
        order = groups(w, set(part))
        seen: set[str] = set()
        for g in order:
            reads = {t for m in g.members for t in w.op(m).inputs()} - set(g.members) - {"x"}
            assert reads <= seen, (part, g)
            seen |= set(g.members)


def test_a_fused_pair_that_is_not_an_edge_is_rejected():
    w = workload(DIAMOND, ["d"])
    assert "not an edge" in check_partition(w, {("a", "d")})
    assert "not an edge" in check_partition(w, {("x", "a")})     # inputs are not ops


def test_fork_partitions_counted_by_hand():
    # edges a->b, a->c.  {}: legal.  {a->b}: {a,b} with sink b; a is also read by c, so it is
    # materialized - legal.  {a->c}: likewise.  {a->b, a->c}: {a,b,c} has sinks b and c - illegal.
    # -> 3 legal partitions.
    w = workload(FORK, ["b", "c"])
    parts = legal_partitions(w)
    assert sorted(sorted(p) for p in parts) == [[], [("a", "b")], [("a", "c")]]


def test_diamond_partitions_counted_by_hand():
    # Edges ab, ac, bd, cd; a fused edge set's groups are the connected components.
    #   0 edges: {}                                                     1 legal
    #   1 edge : {ab}, {ac}, {bd}, {cd}: two-op groups, all convex      4 legal
    #   2 edges: {ab,ac} two sinks (b, c); {ab,bd} and {ac,cd} not convex;
    #            {ab,cd}, {ac,bd} (two 2-op groups) and {bd,cd} ({b,c,d}) legal      3 legal
    #   3 edges: any three edges of the 4-cycle connect all four ops: one group, sink d,
    #            trivially convex                                        4 legal
    #   4 edges: the whole program                                      1 legal
    # -> 13 legal edge sets.  The five sets of 3 or 4 edges all give the same grouping
    # {a,b,c,d}, so there are 13 - 4 = 9 distinct legal groupings.
    w = workload(DIAMOND, ["d"])
    parts = legal_partitions(w)
    assert len(parts) == 13
    assert len(set(parts)) == 13
    by_size = {}
    for p in parts:
        by_size[len(p)] = by_size.get(len(p), 0) + 1
    assert by_size == {0: 1, 1: 4, 2: 3, 3: 4, 4: 1}
    groupings = {frozenset(frozenset(g.members) for g in groups(w, set(p))) for p in parts}
    assert len(groupings) == 9


def _independent_legal(w, fused) -> bool:
    """Legality from the definition, without partition.py: components of the fused edges each
    have one sink, and no op outside a component lies on a path between two of its members."""
    names = [op.out for op in w.ops]
    reach = {n: set() for n in names}               # transitive consumers
    for op in reversed(w.ops):
        for c in w.consumers[op.out]:
            reach[op.out] |= {c} | reach[c]
    comp = {n: {n} for n in names}
    for p, c in fused:
        merged = comp[p] | comp[c]
        for n in merged:
            comp[n] = merged
    for n in names:
        members = comp[n]
        sinks = [m for m in members if not (set(w.consumers[m]) & members)]
        if len(sinks) != 1:
            return False
        for u in members:
            for x in reach[u] - members:
                if reach[x] & members:
                    return False
    return True


@pytest.mark.parametrize("name", ["diamond", "outer_product_mean"])
def test_legal_partitions_match_the_definition(name):
    w = workload(DIAMOND, ["d"]) if name == "diamond" else small(name)
    edges = edges_of(w.ops)
    expected = {frozenset(s) for r in range(len(edges) + 1) for s in combinations(edges, r)
                if _independent_legal(w, s)}
    assert set(legal_partitions(w)) == expected


# ---- named plans and random candidates of every built-in --------------------------------------

def check_candidate(space: SearchSpace, cand: Candidate):
    space = space.variant(cand.orders, cand.inlined)     # the workload the candidate runs
    w = space.w
    fused = cand.fused_pairs
    assert check_partition(w, fused) is None, cand.fused
    gs = groups(w, fused)
    assert sorted(s.anchor for s in cand.schedules) == sorted(g.anchor for g in gs)
    for g in gs:
        s = cand.schedule(g.anchor)
        anchor = w.op(g.anchor)
        if s.impl == IMPL_LIBRARY:
            assert g.members == (g.anchor,) and gemm_form(anchor) is not None
        else:
            assert s.impl == IMPL_LOOP
            assert len(s.tiles) == len(anchor.parallel)
            for t, opts in zip(s.tiles, space.tile_options[g.anchor]):
                assert t in opts
    mats = materialized(w, fused)
    for t, perm in cand.layouts:
        assert t in mats and sorted(perm) == list(range(len(w.shapes[t])))
        assert perm in space.layout_options(t)
    assert Candidate.from_json(cand.to_json()) == cand
    assert Candidate.from_json(cand.to_json()).key == cand.key


@pytest.mark.parametrize("name", builtin_names())
def test_named_plans_of_every_builtin(name):
    w = small(name)
    space = SearchSpace(w)
    keys = set()
    for plan in NAMED_PLANS:
        cand = named_plan(space, plan)
        assert cand.name == plan
        check_candidate(space, cand)
        keys.add(cand.key)
        for dev in costmodel.PRESETS.values():
            est = costmodel.estimate(w, cand, dev)
            assert est.total_s > 0 and all(g.predicted_s > 0 for g in est.groups)
    unfused = named_plan(space, "unfused")
    assert unfused.fused == () and len(unfused.schedules) == len(w.ops)
    assert len(keys) >= 2          # the plans are not all the same


def test_unknown_plan_is_a_value_error():
    with pytest.raises(ValueError, match="unknown plan"):
        named_plan(SearchSpace(small("gated_mlp")), "best")


@pytest.mark.parametrize("name", builtin_names())
def test_random_candidates_are_legal(name):
    w = small(name)
    space = SearchSpace(w)
    for s in range(20):
        cand = space.random(np.random.default_rng(s))
        check_candidate(space, cand)
        assert costmodel.estimate(w, cand, costmodel.preset("h200")).total_s > 0
    # the same seed gives the same candidate
    assert space.random(np.random.default_rng(7)) == space.random(np.random.default_rng(7))


# ---- the [space] table ------------------------------------------------------------------------

@pytest.mark.parametrize("table,key,needle", [
    ("tile = [8]\n", "tile", "unknown key"),
    ("tiles = [8, 12]\n", "tiles", "powers of two"),
    ("tiles = []\n", "tiles", "powers of two"),
    ('forbid_fusion = ["a->d"]\n', "forbid_fusion", "not a producer->consumer edge"),
    ('force_fusion = ["x->a"]\n', "force_fusion", "not a producer->consumer edge"),
    ('forbid_fusion = ["a->b"]\nforce_fusion = ["a->b"]\n', "force_fusion",
     "both forbidden and forced"),
    ('contraction_impls = ["gpu"]\n', "contraction_impls", "contraction_impls"),
    ('layouts = "random"\n', "layouts", "layouts"),
])
def test_malformed_space_table(table, key, needle):
    space = "[space]\n" + table
    with pytest.raises(WorkloadError) as info:
        workload(DIAMOND, ["d"], space, path="bad.toml")
    err = info.value
    msg = str(err)
    m = re.match(r"^bad\.toml:(\d+):(\d+): error: (.*)$", msg)
    assert m, msg
    assert "\n" not in msg and needle in msg
    # the line is the offending key's line inside [space]
    full = (f'name = "small"\noutputs = ["d"]\nprogram = """\n{DIAMOND}"""\n'
            '[dims]\nI = 4\nJ = 3\n[inputs]\nx = ["I", "J"]\n' + space).split("\n")
    want = next(n for n, line in enumerate(full, 1)
                if n > full.index("[space]") and line.startswith(key + " "))
    assert (err.line, err.col) == (want, 1), msg


def test_space_table_is_part_of_the_hash():
    plain = workload(DIAMOND, ["d"])
    restricted = workload(DIAMOND, ["d"], '[space]\nforbid_fusion = ["a->b"]\n')
    assert plain.hash != restricted.hash


def test_forbid_fusion_is_honoured():
    w = small("trimul_outgoing", 'forbid_fusion = ["a->t", "b->t", "mu->xc"]\n')
    space = SearchSpace(w)
    banned = {"a->t", "b->t", "mu->xc"}
    for plan in NAMED_PLANS:
        cand = named_plan(space, plan)
        check_candidate(space, cand)
        assert not banned & set(cand.fused), (plan, cand.fused)
    # without the table greedy fuses exactly these edges
    assert banned <= set(named_plan(SearchSpace(small("trimul_outgoing")), "greedy").fused)
    for s in range(20):
        cand = space.random(np.random.default_rng(s))
        check_candidate(space, cand)
        assert not banned & set(cand.fused)


def test_force_fusion_is_honoured():
    w = small("trimul_outgoing", 'force_fusion = ["mu->xc"]\n')
    space = SearchSpace(w)
    for plan in NAMED_PLANS:
        assert "mu->xc" in named_plan(space, plan).fused, plan
    for s in range(20):
        assert "mu->xc" in space.random(np.random.default_rng(s)).fused


def test_tiled_only_contractions_yield_no_library_groups():
    for name in ("trimul_outgoing", "attention", "gated_mlp"):
        w = small(name, 'contraction_impls = ["loop"]\n')
        space = SearchSpace(w)
        cands = [named_plan(space, p) for p in NAMED_PLANS] + \
            [space.random(np.random.default_rng(s)) for s in range(20)]
        for cand in cands:
            check_candidate(space, cand)
            assert all(s.impl == IMPL_LOOP for s in cand.schedules), cand.schedules
            est = costmodel.estimate(w, cand, costmodel.preset("h200"))
            assert all(g.impl != IMPL_LIBRARY for g in est.groups)
    # by default the heuristic hands the triangle einsum to the library
    default = named_plan(SearchSpace(small("trimul_outgoing")), "heuristic")
    assert default.schedule("t").impl == IMPL_LIBRARY


def test_library_only_contractions():
    w = small("gated_mlp", 'contraction_impls = ["library"]\n')
    space = SearchSpace(w)
    for s in range(10):
        cand = space.random(np.random.default_rng(s))
        check_candidate(space, cand)
        for op in w.ops:
            if gemm_form(op) is not None:
                assert cand.schedule(op.out).impl == IMPL_LIBRARY


def test_allowed_tiles_restrict_every_tile():
    w = small("trimul_outgoing", "tiles = [4]\n")
    space = SearchSpace(w)
    for s in range(20):
        cand = space.random(np.random.default_rng(s))
        check_candidate(space, cand)
        for sched in cand.schedules:
            if sched.impl == IMPL_LOOP:
                extents = w.op(sched.anchor).out_shape
                assert all(t == 4 or t == e for t, e in zip(sched.tiles, extents)), sched


def test_identity_layouts():
    w = small("trimul_outgoing", 'layouts = "identity"\n')
    space = SearchSpace(w)
    for cand in [named_plan(space, p) for p in NAMED_PLANS] + \
            [space.random(np.random.default_rng(s)) for s in range(20)]:
        assert cand.layouts == ()


def test_a_constant_subexpression_is_a_gemm_scale():
    # attention's scores divide by sqrt(D): a constant, so the contraction is still a GEMM
    # (before, only plain constants and their powers were: the scores ran as a generated loop)
    w = load_workload("attention")
    f = gemm_form(w.op("s"))
    assert f is not None and f.scale == pytest.approx(1 / math.sqrt(dict(w.dims)["D"]))
    prog = ("y[i,k] += x[i,j] * x[k,j] * (2 - exp(0)) / sqrt(16)\n"
            "z[i,k] += x[i,j] * x[k,j] / log(1)\n")
    small_w = workload(prog, ["y", "z"])
    assert gemm_form(small_w.op("y")).scale == pytest.approx(0.25)
    assert gemm_form(small_w.op("z")) is None          # 1/log(1) has no finite value
    from search_spaces.ir import Access, Binary, Call, Const, constant_value
    assert constant_value(Binary("*", Const(3.0), Call("sqrt", (Const(4.0),)))) == 6.0
    assert constant_value(Binary("*", Const(3.0), Access("x", ("i",)))) is None
