"""Stacked sibling GEMMs on the CPU backend (autotune.backends.cpu.stacked): every stacked
candidate's outputs match the float64 reference, the members' results are the one GEMM's
result in place (no copies), and a plan that cannot run its stack says why before it runs."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.reference import reference
from autotune.report.best import plan_summary
from search_spaces import load_workload
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace, TileBounds

from tests.search_spaces.test_siblings import shared_b, stacking_choice

WORKLOADS = {
    "trimul": lambda: load_workload("trimul_outgoing", {"N": 12, "C": 8}),
    "gated_mlp": lambda: load_workload("gated_mlp", {"T": 16, "C": 8, "F": 24}),
    "attention": lambda: load_workload("attention", {"S": 16, "H": 2, "D": 4, "C": 8}),
    "shared_b": shared_b,
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_stacked_candidates_match_the_reference(name, tmp_path):
    w = WORKLOADS[name]()
    space = SearchSpace(w, TileBounds(stacks=True))
    inputs = w.random_inputs(5)
    ref = reference(w, inputs)
    for seed in range(3):
        cand = space.build(stacking_choice(space, np.random.default_rng(seed)))
        assert cand.stacks, cand.to_json()
        plan = make_executable(w, cand, "cpu", tmp_path)
        for _ in range(2):                     # kept scratch and buffers: the second call too
            _, why = verify(plan(**inputs), ref, w.rtol)
            assert not why, f"{why}\n{cand.to_json()}"


def test_a_stack_of_some_siblings_matches_the_reference(tmp_path):
    """Trimul's projections stacked without pa (the sibling set's anchor) and go: the stack
    runs in ga's place, pa and go as GEMMs of their own."""
    w = WORKLOADS["trimul"]()
    space = SearchSpace(w, TileBounds(stacks=True))
    inputs = w.random_inputs(6)
    ref = reference(w, inputs)
    cand = space.build(stacking_choice(space, np.random.default_rng(4), leave_out=("pa", "go")))
    assert cand.stacks == (("ga", "pb", "gb"),)
    plan = make_executable(w, cand, "cpu", tmp_path)
    for _ in range(2):
        _, why = verify(plan(**inputs), ref, w.rtol)
        assert not why, f"{why}\n{cand.to_json()}"


def test_the_members_are_the_stacked_result_in_place(tmp_path):
    w = WORKLOADS["trimul"]()
    space = SearchSpace(w, TileBounds(stacks=True))
    cand = space.build(stacking_choice(space, np.random.default_rng(0)))
    plan = make_executable(w, cand, "cpu", tmp_path)
    members = cand.stacks[0]
    stack = plan.stacks[members[0]]
    for k, m in enumerate(members):
        part = plan.storage[m]
        assert part.flags.c_contiguous and np.shares_memory(part, stack.result)
        assert part.ctypes.data == stack.result.ctypes.data + k * part.nbytes
    assert f"stacked {'+'.join(members)}" in plan_summary(cand)     # what show-best prints
    plan(**w.random_inputs(1))
    xn = plan.logical["xn"].astype(np.float64)
    want = np.einsum("ijc,ch->ijh", xn, w.random_inputs(1)["w_ga"].astype(np.float64))
    np.testing.assert_allclose(plan.logical["ga"], want, rtol=1e-4, atol=1e-4)


def test_a_plan_that_cannot_run_its_stack_says_why(tmp_path):
    w = WORKLOADS["gated_mlp"]()
    space = SearchSpace(w, TileBounds(stacks=True))
    base = named_plan(space, "heuristic")        # g and u stored (t, f): not the stack layout
    bad = replace(base, stacks=(("g", "u"),))
    with pytest.raises(ValueError, match="'g' is stored in"):
        make_executable(w, bad, "cpu", tmp_path)
