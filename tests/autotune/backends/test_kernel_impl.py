"""The generated kernel as the space's third contraction impl: offered only where the backend
has it, its parameters asked and rebuilt like any choice, run by the CPU executor in whatever
layouts the candidate chose (verified against the reference), priced by the cost model and
emitted as source."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

import costmodel
from autotune.backends.base import verify
from autotune.backends.cpu.executor import CompiledPlan
from autotune.backends.factory import backend_kind
from autotune.reference import reference
from search_spaces.candidate import IMPL_KERNEL, IMPL_LIBRARY, Candidate
from search_spaces.kernel_fusion import kernel_parts
from search_spaces.gemm import gemm_form
from search_spaces.kernel_space import kernel_schedule
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace, TileBounds
from search_spaces.answers import params_of
from search_spaces import parse_workload
from search_spaces.loader import builtin_text
from tests.conftest import SMALL_DIMS


def small_with_table(name: str, table: str):
    return parse_workload(builtin_text(name) + "\n[space]\n" + table, f"{name}.toml",
                          SMALL_DIMS[name])


def _kernel_space(w) -> SearchSpace:
    return SearchSpace(w, backend_kind("cpu").tile_bounds)


def _all_kernel(space: SearchSpace, seed: int) -> Candidate:
    """Every GEMM-shaped contraction on the kernel, no chain; every other choice random."""
    rng = np.random.default_rng(seed)

    def choose(name, opts):
        if name.startswith("impl:") and IMPL_KERNEL in opts:
            return IMPL_KERNEL
        if name.startswith("chain:"):
            return 0                   # a chain's contraction runs in its walk, not the kernel
        return opts[int(rng.integers(len(opts)))]
    return space.build(choose)


def test_kernel_is_offered_only_by_a_backend_that_has_it(small):
    w = small("gated_mlp")
    assert IMPL_KERNEL not in SearchSpace(w).impls
    # the GPU's is its tensor-core kernel (autotune.backends.cuda.mma_kernel), tested there
    assert IMPL_KERNEL in SearchSpace(w, backend_kind("cuda").tile_bounds).impls
    space = _kernel_space(w)
    assert IMPL_KERNEL in space.impls
    seen = {s.impl for seed in range(30) for s in space.random(np.random.default_rng(seed)).schedules}
    assert IMPL_KERNEL in seen
    cand = named_plan(space, "heuristic")
    assert all(s.impl != IMPL_KERNEL for s in cand.schedules)     # named plans are unchanged


def test_kernel_only_space_table():
    w = small_with_table("gated_mlp", 'contraction_impls = ["kernel"]\n')
    space = _kernel_space(w)
    assert space.impls == (IMPL_KERNEL,) and SearchSpace(w).impls == ()
    for s in range(5):
        cand = space.random(np.random.default_rng(s))
        walked = {m for sc in cand.schedules if sc.chain_block
                  for m in space.chains[sc.anchor].members}
        for op in w.ops:
            if gemm_form(op) is not None and op.out not in walked:   # a chain walks its own
                # its own group's, or its epilogue's (search_spaces.kernel_fusion)
                assert kernel_schedule(cand, op.out).impl == IMPL_KERNEL


@pytest.fixture(scope="module")
def kdir(tmp_path_factory):
    return tmp_path_factory.mktemp("kernel-impl")


@pytest.mark.parametrize("name", sorted(SMALL_DIMS))
def test_kernel_candidates_verify_and_rebuild(small, name, kdir):
    w = small(name)
    space = _kernel_space(w)
    inputs = w.random_inputs(3)
    ref = reference(w, inputs)
    for seed in range(2):
        cand = _all_kernel(space, seed)
        kern = [s for s in cand.schedules if s.impl == IMPL_KERNEL]
        assert kern and all(s.kernel is not None for s in kern)
        for s in kern:
            assert s.kernel.nr % (s.kernel.vec_bytes // 4) == 0 and s.kernel.mc % s.kernel.mr == 0
        again = Candidate.from_json(cand.to_json())
        assert again == cand and again.key == cand.key
        params = params_of(space, cand)
        assert params is not None and any(k.startswith("kernel:") for k in params)
        plan = CompiledPlan(w, cand, kdir)
        outs = plan(**inputs)
        err, why = verify(outs, ref, w.rtol)
        assert not why, f"{cand.to_json()}: {why}"
        est = costmodel.estimate(w, cand, costmodel.preset("cpu"))
        assert {g.impl for g in est.groups} >= {IMPL_KERNEL} and est.total_s > 0
        assert costmodel.memory_bytes(w, cand, 2) > 0


def test_library_plans_keep_their_keys(small):
    """The kernel field is absent from a schedule without one: stored plans keep their keys."""
    w = small("trimul_outgoing")
    cand = named_plan(_kernel_space(w), "heuristic")
    assert all("kernel" not in s for s in json.loads(cand.to_json())["schedules"])
    assert any(s.impl == IMPL_LIBRARY for s in cand.schedules)


def test_cost_model_charges_the_kernels_passes_over_c(small):
    w = small("gated_mlp")
    space = _kernel_space(w)
    cand = _all_kernel(space, 0)
    # (a pair takes its whole K in one slice whatever KC says: a group without one)
    anchor = next(s.anchor for s in cand.schedules if s.impl == IMPL_KERNEL
                  and not kernel_parts(w, cand.fused_pairs, s.anchor).pair)
    # no cache to keep C in: each further K slice reads and writes C again
    dev = replace(costmodel.preset("cpu"), tile_cache_bytes=0.0)

    def with_kc(kc, dev=dev):
        scheds = tuple(s if s.anchor != anchor else
                       type(s)(s.anchor, s.tiles, s.impl, type(s.kernel)(**{**s.kernel.to_dict(),
                                                                            "kc": kc}))
                       for s in cand.schedules)
        c = Candidate(cand.fused, cand.layouts, scheds)
        return next(g for g in costmodel.estimate(w, c, dev).groups if g.anchor == anchor)
    op = w.op(kernel_parts(w, cand.fused_pairs, anchor).contraction)
    k = int(np.prod([dict(zip(op.domain, op.extents))[i] for i in gemm_form(op).k]))
    deep, shallow = with_kc(k), with_kc(max(1, k // 4))
    assert shallow.bytes > deep.bytes          # each extra K slice reads and writes C again
    assert deep.impl == IMPL_KERNEL and deep.flops > 0
    # a C whose shares stay in the cores' caches between slices crosses the bus once
    roomy = replace(dev, tile_cache_bytes=64e6)
    assert with_kc(max(1, k // 4), roomy).bytes == with_kc(k, roomy).bytes == deep.bytes


def test_emit_writes_the_kernel_source(small):
    w = small("gated_mlp")
    cand = _all_kernel(_kernel_space(w), 1)
    em = backend_kind("cpu").emit(w, cand)
    names = [f"kernel_{s.anchor}.c" for s in cand.schedules if s.impl == IMPL_KERNEL]
    assert names and all(n in em.files for n in names)
    assert all("void gemm_kernel(" in em.files[n] for n in names)


def test_a_kernel_schedule_without_parameters_runs_the_default(small, kdir):
    """A hand-written candidate may name the kernel without its parameters."""
    w = small("gated_mlp")
    cand = _all_kernel(_kernel_space(w), 0)
    bare = Candidate.from_dict({**cand.to_dict(), "schedules": [
        {k: v for k, v in s.to_dict().items() if k != "kernel"} for s in cand.schedules]})
    assert any(s.impl == IMPL_KERNEL and s.kernel is None for s in bare.schedules)
    inputs = w.random_inputs(2)
    assert not verify(CompiledPlan(w, bare, kdir)(**inputs), reference(w, inputs), w.rtol)[1]
    assert costmodel.estimate(w, bare, costmodel.preset("cpu")).total_s > 0


def test_tile_bounds_default_has_no_kernel():
    assert TileBounds().kernel is None


def test_kernel_runs_the_contractions_of_a_split_product(kdir):
    """A product split by a contraction order: both pairwise GEMMs on the kernel, verified."""
    from tests.search_spaces.test_kernel_space import batched_chain
    w = batched_chain()
    space = _kernel_space(w)
    inputs = w.random_inputs(4)
    ref = reference(w, inputs)
    ran = 0
    for seed in range(6):
        cand = _all_kernel(space, seed)
        if not cand.orders:
            continue
        assert {s.impl for s in cand.schedules} == {IMPL_KERNEL}
        err, why = verify(CompiledPlan(w, cand, kdir)(**inputs), ref, w.rtol)
        assert not why, f"{cand.to_json()}: {why}"
        assert params_of(space, cand) is not None
        ran += 1
    assert ran
