"""Members a CPU loop group evaluates inside their one reader (search_spaces.inlining): which
ones qualify, that the generated C keeps no tile buffer for them, and that such groups (every
shape the rule admits or refuses, tiles that do not divide the extents) still match the float64
reference."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.backends.base import verify
from autotune.backends.cpu.codegen import generate
from autotune.backends.cpu.executor import CompiledPlan
from autotune.reference import reference
from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.footprint import plan_group
from search_spaces.inlining import inlined_members
from search_spaces.loader import parse_workload
from search_spaces.partition import groups, materialized
from search_spaces.space import SearchSpace, TileBounds

# o: read once over z's whole domain (inlined); a -> b -> c: an elementwise chain read once
# each, c by a sum over its whole domain (all three inlined); e: read twice (kept); g: read by a contraction that broadcasts it over c
# (kept: inlined, it would be evaluated once per c); t: its input walked with a stride along
# its reader's innermost index (kept)
PROGRAM = '''
o[i,j,k] = a0[i,j] * b0[j,k] + c0[j]
z[i,k] max= o[i,j,k]
a[i,j] = x[i,j] * 2.0
b[i,j] = exp(a[i,j] - 1.0)
c[i,j] = tanh(b[i,j]) + x[i,j]
s[i] += c[i,j]
e[i,j] = sigmoid(x[i,j])
f[i] += e[i,j] * e[i,j] + e[i,j]
g[i,j] = relu(x[i,j])
y[i,k] += g[i,j] * w[j,k]
t[i,j] = xt[j,i] * 3.0
u[i] += t[i,j]
'''
OUTPUTS = ["z", "s", "f", "y", "u"]


def workload(i=6, j=7, k=5):
    text = (f'name = "inlining"\ndtype = "float32"\noutputs = {OUTPUTS!r}\n'.replace("'", '"')
            + f'program = """{PROGRAM}"""\n'
            + f'[dims]\nI = {i}\nJ = {j}\nK = {k}\n[inputs]\na0 = ["I", "J"]\nb0 = ["J", "K"]\n'
              'c0 = ["J"]\nx = ["I", "J"]\nw = ["J", "K"]\nxt = ["J", "I"]\n')
    return parse_workload(text, "inlining.toml")


# every producer fused into its consumer, the loop impl everywhere
EDGES = [("o", "z"), ("a", "b"), ("b", "c"), ("c", "s"), ("e", "f"), ("g", "y"), ("t", "u")]


def fused_candidate(w, tiles: int | None = None):
    mats = materialized(w, set(EDGES))
    scheds = []
    for g in groups(w, set(EDGES)):
        shape = w.op(g.anchor).out_shape
        scheds.append(GroupSchedule(g.anchor, tuple(tiles or e for e in shape), "loop"))
    assert {"o", "a", "b", "e", "g", "t"}.isdisjoint(mats)
    return make_candidate([f"{p}->{c}" for p, c in EDGES], {}, scheds, f"fused-{tiles}")


def inlined_of(w, cand) -> set[str]:
    mats = materialized(w, cand.fused_pairs)
    layout_of = lambda t: cand.layout(t, len(w.shapes[t]))
    out: set[str] = set()
    for g in groups(w, cand.fused_pairs):
        plans = plan_group(w, g, cand.schedule(g.anchor).tiles, layout_of)
        out |= inlined_members(w, g, plans, mats, layout_of)
    return out


def test_which_members_are_inlined():
    w = workload()
    assert inlined_of(w, fused_candidate(w)) == {"o", "a", "b", "c"}


def test_the_generated_c_keeps_buffers_only_for_the_others():
    w = workload()
    src, _ = generate(w, fused_candidate(w))
    for m in ("o", "a", "b", "c"):
        assert f"L_{m}" not in src
    for m in ("e", "g", "t"):
        assert f"L_{m}" in src
    # the chain a -> b -> c is one expression inside s's loop
    assert any("AT_EXPf" in line and "AT_TANHf" in line and "* ((float)2.0)" in line
               for line in src.splitlines())


@pytest.mark.parametrize("tiles", [None, 1, 4])
def test_groups_with_inlined_members_match_the_reference(tiles, tmp_path):
    w = workload(9, 11, 6)
    cand = fused_candidate(w, tiles)
    inputs = w.random_inputs(seed=3)
    _, why = verify(CompiledPlan(w, cand, tmp_path)(**inputs), reference(w, inputs), w.rtol)
    assert not why, why


def test_random_candidates_of_the_space_match_the_reference(tmp_path):
    # layouts, tiles and fusions the space draws (the stride rule sees other layouts there)
    w = workload(9, 11, 6)
    space = SearchSpace(w, TileBounds(1, 1024))
    rng = np.random.default_rng(5)
    inputs = w.random_inputs(seed=4)
    ref = reference(w, inputs)
    inlined = 0
    for _ in range(6):
        cand = space.random(rng)
        inlined += len(inlined_of(w, cand))
        _, why = verify(CompiledPlan(w, cand, tmp_path)(**inputs), ref, w.rtol)
        assert not why, f"{cand.to_json()}: {why}"
    assert inlined
