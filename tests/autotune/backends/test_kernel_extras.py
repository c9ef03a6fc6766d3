"""The kernel group's epilogue arrays are kept from call to call while they view the same
memory the same way (building them cost ~35 us an array): results stay right when an input is
changed in place or replaced, the kept views are reused, and a released plan still gives its
buffers back to the pool."""
from __future__ import annotations

import numpy as np

from autotune.backends.base import BufferPool, verify
from autotune.backends.cpu.executor import CompiledPlan
from autotune.reference import reference
from tests.autotune.backends.test_kernel_epilogue import epilogues, kernel_plan, space_of


def test_kept_epilogue_arrays_follow_the_inputs(small, tmp_path):
    w = small("trimul_outgoing")
    cand = kernel_plan(space_of(w), 0)
    assert "a" in epilogues(w, cand)          # the gate reads mask, b_ga, b_a as extras
    plan = CompiledPlan(w, cand, tmp_path)
    inputs = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in w.random_inputs(0).items()}
    check = lambda: verify(plan(**inputs), reference(w, inputs), w.rtol)[1]
    assert not check()
    kg = plan.kernel_groups["a"]
    kept = kg._extra
    assert kept and kg._extra_key is not None
    assert not check() and kg._extra is kept            # the same memory: reused
    inputs["mask"][...] = np.random.default_rng(1).random(inputs["mask"].shape)
    assert not check()                                   # changed in place: views see it
    inputs["mask"] = np.ascontiguousarray(w.random_inputs(2)["mask"], dtype=np.float32)
    assert not check() and kg._extra is not kept        # replaced: built afresh


def test_a_released_plan_gives_its_buffers_back(small, tmp_path):
    w = small("trimul_outgoing")
    pool = BufferPool()
    plan = CompiledPlan(w, kernel_plan(space_of(w), 0), tmp_path, pool)
    inputs = w.random_inputs(0)
    plan(**inputs)
    plan(**inputs)
    viewed = {o.tensor for kg in plan.kernel_groups.values() for _, o in kg.extras}
    assert viewed - {n for n, _ in w.inputs}, "no intermediate among the kept views"
    blocks = len(plan._blocks)
    plan.release()
    assert len(pool._free) == blocks                     # none held by a kept view
