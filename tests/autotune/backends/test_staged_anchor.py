"""A loop group whose anchor accumulates over a reduction outside its innermost loop, stored in
a layout that walks that loop with a stride, accumulates in a per-thread tile buffer and is
stored once at the end (CPU codegen, ``_Emitter.staged``): random candidates with such groups,
boundary tiles included, agree with the float64 reference; groups without the stride do not
stage."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.backends.base import verify
from autotune.backends.cpu.codegen import _Emitter, generate
from autotune.backends.cpu.executor import CompiledPlan
from autotune.reference import reference
from search_spaces.candidate import IMPL_LOOP
from search_spaces.partition import groups, materialized
from search_spaces.rewrite import rewritten
from search_spaces.space import SearchSpace, TileBounds


def staged_anchors(w, cand) -> dict[str, bool]:
    mats = materialized(w, cand.fused_pairs)
    return {g.anchor: _Emitter(w, cand, g, mats).staged for g in groups(w, cand.fused_pairs)
            if cand.schedule(g.anchor).impl == IMPL_LOOP and not cand.schedule(g.anchor).chain_block}


@pytest.mark.parametrize("name,dims", [("gated_mlp", {"T": 24, "C": 16, "F": 40}),
                                       ("trimul_outgoing", {"N": 12, "C": 8})])
def test_staged_anchors_agree_with_the_reference(small, tmp_path, name, dims):
    from search_spaces import load_workload
    w = load_workload(name, dims)
    space = SearchSpace(w, TileBounds(1, 64))
    rng = np.random.default_rng(3)
    inputs = w.random_inputs(0)
    ref = reference(w, inputs)
    staged = plain = 0
    for _ in range(400):
        cand = space.random(rng)
        rw = rewritten(w, cand)         # (the workload the candidate runs: inlined ops gone)
        flags = staged_anchors(rw, cand)
        for anchor, on in flags.items():
            op = rw.op(anchor)
            if on:   # what staging requires: a reduction, a strided innermost store
                assert op.reduction and op.combiner in ("sum", "max")
                assert f"L_{anchor}" in generate(rw, cand)[0]
        if any(flags.values()) and staged < 3:
            staged += 1
        elif not any(flags.values()) and plain < 1:
            plain += 1
        else:
            continue
        plan = CompiledPlan(w, cand, tmp_path)
        err, msg = verify(plan(**inputs), ref, w.rtol)
        assert not msg, (cand.key, msg)
        if staged >= 3 and plain >= 1:
            break
    assert staged == 3 and plain == 1


def test_a_contiguous_innermost_store_is_not_staged():
    """The unfused plan keeps row-major layouts: its loop contractions accumulate in place."""
    from search_spaces import load_workload
    from search_spaces.plans import named_plan
    w = load_workload("gated_mlp", {"T": 24, "C": 16, "F": 40})
    cand = named_plan(SearchSpace(w, TileBounds(1, 64)), "unfused")
    flags = staged_anchors(w, cand)
    reducing = [a for a in flags if w.op(a).reduction]
    assert reducing and not any(flags.values())
    src = generate(w, cand)[0]
    assert all(f"L_{a}" not in src for a in reducing)
