"""An update statement (``+=``, ``max=``) whose innermost loop walks a stride in any access is
emitted without ``omp simd`` (CPU codegen, ``_Emitter.gathers``); one walking unit strides keeps
it.  Checked against the emitted text itself (the strides its offsets multiply the innermost
variable by) over random candidates, and the candidates that lose the pragma agree with the
float64 reference."""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from autotune.backends.base import verify
from autotune.backends.cpu.codegen import generate
from autotune.backends.cpu.executor import CompiledPlan
from autotune.reference import reference
from search_spaces import load_workload
from search_spaces.candidate import IMPL_LOOP
from search_spaces.plans import named_plan
from search_spaces.rewrite import rewritten
from search_spaces.space import SearchSpace, TileBounds

# an offset term of the loop variable V: "V*8L" (global), "(V - b1)*8L" or "(V)*8L" (a tile
# buffer's, tiled or whole)
TERM = r"(?<!\w)\(?{v}(?!\w)(?: - b\d+)?\)?\*(\d+)L"


def updates(src: str) -> list[tuple[bool, bool]]:
    """(has the pragma, walks a stride) for every update statement of an L_ or G_ target in
    ``src``: the line after its innermost loop's head."""
    lines = src.splitlines()
    out = []
    for k, line in enumerate(lines):
        body = line.strip()
        if not re.match(r"[LG]_\w+\[.*\] \+= ", body) and "_o = " not in body:
            continue
        head = re.search(r"for \(long (v_\w+) = ", lines[k - 1])
        if head is None:
            continue
        v = head.group(1)
        strided = any(s != "1" for s in re.findall(TERM.format(v=re.escape(v)), body))
        out.append(("#pragma omp simd" in lines[k - 2], strided))
    return out


@pytest.mark.parametrize("name", ["attention", "outer_product_mean", "gated_mlp"])
def test_the_pragma_follows_the_strides_and_plans_stay_right(small, tmp_path, name):
    w = small(name)
    space = SearchSpace(w, TileBounds(1, 64))
    rng = np.random.default_rng(11)
    inputs = w.random_inputs(2)
    ref = reference(w, inputs)
    seen = {True: 0, False: 0}
    ran = 0
    for _ in range(300):
        cand = space.random(rng)
        if not any(s.impl == IMPL_LOOP for s in cand.schedules):
            continue
        found = updates(generate(rewritten(w, cand), cand)[0])
        for pragma, strided in found:
            assert pragma == (not strided), (cand.key, pragma, strided)
            seen[strided] += 1
        if any(strided for _, strided in found) and ran < 3:
            ran += 1
            plan = CompiledPlan(w, cand, tmp_path)
            err, msg = verify(plan(**inputs), ref, w.rtol)
            assert not msg, (cand.key, msg)
    # both kinds occur, and three gathering plans were run
    assert seen[True] and seen[False] and ran == 3, seen


def test_the_attention_projection_that_gathers_drops_the_pragma():
    """q[h,s,d] += x[s,c] * w_q[c,h,d] with d's tile of 1: the innermost loop walks s, x's rows
    (a stride of C), while the same statement tiled over all of d walks d unit-stride (at the
    default dims, where the update keeps its reduction outside: source only, nothing runs)."""
    w = load_workload("attention")
    base = named_plan(SearchSpace(w, TileBounds(1, 64)), "unfused")

    def q_update(tiles):
        scheds = tuple(replace(s, impl=IMPL_LOOP, tiles=tiles, kernel=None, precision="")
                       if s.anchor == "q" else s for s in base.schedules)
        cand = replace(base, schedules=scheds, stacks=())
        src = generate(rewritten(w, cand), cand)[0]
        return updates(src[src.index("q[d0,d1,d2] +="):])[0]
    assert q_update((2, 8, 1)) == (False, True)
    assert q_update((2, 8, 32)) == (True, False)
