"""Stacked sibling GEMMs on the CUDA backend (autotune.backends.cuda.stacked), under the host
emulator (its cuBLAS calls through the NumPy model of gemmStridedBatched): every stacked
candidate of the CUDA space matches the float64 reference, a stack is one GEMM whose result is
its members' storage, in the most accurate of their precisions, a shared operand stored in a
layout cuBLAS cannot read is copied first, and a binding builds the weights side by side once.
The model prices a GPU stack by its DRAM bytes counted once."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from autotune.backends.base import verify
from autotune.backends.cuda.executor import CudaPlan
from autotune.backends.cuda.kind import CudaBackendKind
from autotune.reference import reference
from costmodel import preset
from costmodel.model import estimate
from search_spaces import load_workload
from search_spaces.candidate import make_candidate
from search_spaces.gemm import gemm_form
from search_spaces.precision import stack_precision
from search_spaces.siblings import stack_layout, stack_of
from search_spaces.space import SearchSpace

from tests.search_spaces.test_siblings import shared_b, stacking_choice

GPU_BOUNDS = CudaBackendKind().tile_bounds
WORKLOADS = {
    "trimul": lambda: load_workload("trimul_outgoing", {"N": 12, "C": 8}),
    "gated_mlp": lambda: load_workload("gated_mlp", {"T": 16, "C": 8, "F": 24}),
    "attention": lambda: load_workload("attention", {"S": 16, "H": 2, "D": 4, "C": 8}),
    "shared_b": shared_b,        # the siblings share their second operand
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("stacked-kernels")


def _run(plan, inputs, w):
    ref = reference(w, inputs)
    for _ in range(2):             # the kept side-by-side matrix and buffers: a second call too
        _, why = verify(plan(**inputs), ref, w.rtol)
        assert not why, f"{why}\n{plan.cand.to_json()}"


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_stacked_candidates_match_the_reference(name, emulator, cache):
    w = WORKLOADS[name]()
    space = SearchSpace(w, GPU_BOUNDS)
    assert space.siblings
    inputs = w.random_inputs(5)
    for seed in range(3):
        cand = space.build(stacking_choice(space, np.random.default_rng(seed)))
        assert cand.stacks, cand.to_json()
        plan = CudaPlan(w, cand, cache, runtime=emulator)
        before = len(emulator.gemm_calls)
        _run(plan, inputs, w)
        # one GEMM per stack (three for the split) plus one per other library group, a call
        lone = [s for s in cand.schedules if s.impl == "library" and not cand.stack(s.anchor)]
        per_call = sum(3 if (s.precision or "fp32") == "3xtf32" else 1 for s in lone) + sum(
            3 if plan.stacks[s[0]].precision == "3xtf32" else 1 for s in cand.stacks)
        assert len(emulator.gemm_calls) - before == 2 * per_call


def test_the_members_are_the_stacked_result_in_place(emulator, cache):
    w = WORKLOADS["trimul"]()
    space = SearchSpace(w, GPU_BOUNDS)
    cand = space.build(stacking_choice(space, np.random.default_rng(1)))
    plan = CudaPlan(w, cand, cache, runtime=emulator)
    plan(**w.random_inputs(2))
    members = cand.stacks[0]
    stack = plan.stacks[members[0]]
    rows = stack.d
    for i, m in enumerate(members):
        assert cand.layout(m, 3) == stack_layout(w, stack_of(w, members), m)
        part = stack.result[i * rows:(i + 1) * rows].reshape(plan.storage[m].shape)
        assert np.shares_memory(plan.storage[m], stack.result)
        assert np.array_equal(part, plan.storage[m])


def test_a_stack_runs_in_its_members_most_accurate_precision(emulator, cache):
    w = WORKLOADS["trimul"]()
    assert stack_precision(w, ["3xtf32", "", "3xtf32"]) == "fp32"     # "" is the default
    assert stack_precision(w, ["3xtf32", "3xtf32"]) == "3xtf32"
    assert stack_precision(load_workload("trimul_outgoing", {"N": 4, "C": 4}),
                           []) == "fp32"
    space = SearchSpace(w, GPU_BOUNDS)
    base = stacking_choice(space, np.random.default_rng(3))

    def choose(q, opts):        # pa in float32, the other members split
        if q.startswith("precision:"):
            return "fp32" if q == "precision:pa" else "3xtf32"
        return base(q, opts)
    cand = space.build(choose)
    members = cand.stacks[0]
    assert {cand.schedule(m).precision or "fp32" for m in members} == {"fp32", "3xtf32"}
    plan = CudaPlan(w, cand, cache, runtime=emulator)
    assert plan.stacks[members[0]].precision == "fp32"
    start = len(emulator.precisions)
    _run(plan, w.random_inputs(4), w)
    # the stack's one float32 call, and the split's TF32 products for the lone GEMMs only
    lone_split = sum(1 for s in cand.schedules if s.impl == "library"
                     and not cand.stack(s.anchor) and s.precision == "3xtf32")
    got = emulator.precisions[start:]
    assert got.count("fp32") >= 2 and got.count("tf32") == 2 * 3 * lone_split


def test_a_shared_operand_cublas_cannot_read_is_copied_first(emulator, cache):
    """xn[i,j,c] stored with (i, j) not nested as the GEMM's S (j outside i, or c between them:
    layouts a hand-edited plan may hold, the space offers neither) is copied to a contiguous
    (K, S) matrix first; the layouts the space offers are read in place."""
    w = WORKLOADS["trimul"]()
    space = SearchSpace(w, GPU_BOUNDS)
    sib = space.siblings[0]
    form = gemm_form(w.op(sib.members[0]))
    tensor = (form.a if sib.shared == "a" else form.b).tensor
    cand = space.build(stacking_choice(space, np.random.default_rng(0)))
    offered = space.layout_options(tensor)
    copied = {}
    for perm in offered + [(1, 0, 2), (0, 2, 1)]:
        layouts = dict(cand.layouts) | {tensor: perm}
        edited = make_candidate(cand.fused, layouts, cand.schedules, "edited", cand.orders,
                                cand.stacks, cand.inlined)
        plan = CudaPlan(w, edited, cache, runtime=emulator)
        _run(plan, w.random_inputs(7), w)
        copied[perm] = plan.stacks[cand.stacks[0][0]]._copy_y is not None
    assert copied == {**{p: False for p in offered}, (1, 0, 2): True, (0, 2, 1): True}


def test_a_binding_builds_the_weights_side_by_side_once(emulator, cache):
    w = WORKLOADS["trimul"]()
    space = SearchSpace(w, GPU_BOUNDS)
    cand = space.build(stacking_choice(space, np.random.default_rng(2)))
    plan = CudaPlan(w, cand, cache, runtime=emulator)
    inputs = w.random_inputs(8)
    weights = {n: inputs[n] for n in w.input_names if n.startswith("w")}
    bound = plan.bind(weights)
    anchor = cand.stacks[0][0]
    assert set(bound.stack_x) == {anchor}
    plan.stacks[anchor].x[...] = np.nan     # the plan's own matrix is not what a bound call reads
    ref = reference(w, inputs)
    _, why = verify(bound(**{n: a for n, a in inputs.items() if n not in weights}), ref, w.rtol)
    assert not why, why
    _, why = verify(plan(**inputs), ref, w.rtol)    # unbound calls rebuild it
    assert not why, why


def test_the_model_prices_a_gpu_stack_by_its_bytes_counted_once():
    """Trimul's five projections at N=702 on the H200 preset: split TF32 products, memory-heavy
    (K = N = 128), are cheaper stacked (the 252 MB input read once); float32 SIMT is
    compute-bound, and a stack saves it nothing but the launches it adds."""
    w = load_workload("trimul_outgoing", {"N": 702, "C": 128})
    space = SearchSpace(w, GPU_BOUNDS)
    dev = preset("h200")
    price = {}
    for stacked in (0, 1):
        for prec in ("fp32", "3xtf32"):
            cand = space.build(lambda q, opts: stacked if q.startswith("stack:") and
                               q.count(":") == 1 else 1 if q.startswith("stack:") else
                               "library" if q.startswith("impl:") and "library" in opts else
                               prec if q.startswith("precision:") else opts[0])
            assert bool(cand.stacks) == bool(stacked)
            groups = estimate(w, cand, dev).groups
            members = space.siblings[0].members
            price[stacked, prec] = sum(g.predicted_s for g in groups
                                       if set(g.ops) & set(members))
            if stacked:
                g = next(g for g in groups if g.anchor == members[0])
                assert g.unique_bytes < 2 * 4 * 702 * 702 * 128 * len(members) * 0.7
    assert price[1, "3xtf32"] < 0.85 * price[0, "3xtf32"]
    assert abs(price[1, "fp32"] - price[0, "fp32"]) < 0.05 * price[0, "fp32"]
