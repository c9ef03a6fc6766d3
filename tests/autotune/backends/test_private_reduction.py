"""A loop reduction whose innermost loop walks a reduction index inside other reduction loops
keeps a private row of partial sums (maxima) per output element and reduces it across lanes
once (CPU codegen, ``_Emitter.private_width``): random candidates with such groups, boundary
tiles and rows shorter than their padding included, agree with the float64 reference (sums and
maxima, float32 and float64); a reduction over one index keeps none."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.backends.base import verify
from autotune.backends.cpu.codegen import _Emitter, generate
from autotune.backends.cpu.executor import CompiledPlan
from autotune.reference import reference
from search_spaces import parse_workload
from search_spaces.candidate import IMPL_LOOP
from search_spaces.partition import groups, materialized
from search_spaces.space import SearchSpace, TileBounds


def block(combiner: str, dtype: str, dims: dict[str, int]):
    # outer4's shape: a broadcast product reduced over two indices, one of them innermost
    body = ("o[i,j,k,l] = a[i,j] * b[k,l] + c[j,l]\nz[i,k] max= o[i,j,k,l]\n" if combiner == "max"
            else "z[i,k] += a[i,j] * b[k,l] * c[j,l]\n")
    text = (f'name = "priv"\ndtype = "{dtype}"\noutputs = ["z"]\nprogram = """\n{body}"""\n'
            "[dims]\n" + "".join(f"{k} = {v}\n" for k, v in dims.items()) +
            '[inputs]\na = ["I", "J"]\nb = ["K", "L"]\nc = ["J", "L"]\n')
    return parse_workload(text, "priv.toml")


def private_rows(w, cand) -> dict[str, int]:
    """Anchor -> the widest private row of its loop group (0: none)."""
    mats = materialized(w, cand.fused_pairs)
    out = {}
    for g in groups(w, cand.fused_pairs):
        s = cand.schedule(g.anchor)
        if s.impl == IMPL_LOOP and not s.chain_block:
            em = _Emitter(w, cand, g, mats)
            out[g.anchor] = max((em.private_width(mp) for mp in em.plans), default=0)
    return out


@pytest.mark.parametrize("combiner,dtype", [("max", "float32"), ("sum", "float32"),
                                            ("sum", "float64")])
def test_private_rows_agree_with_the_reference(tmp_path, combiner, dtype):
    w = block(combiner, dtype, {"I": 7, "J": 5, "K": 9, "L": 19})
    space = SearchSpace(w, TileBounds(1, 64))
    rng = np.random.default_rng(5)
    ref_inputs = [w.random_inputs(s) for s in (0, 1)]
    refs = [reference(w, x) for x in ref_inputs]
    checked = 0
    for _ in range(300):
        cand = space.random(rng)
        rows = private_rows(w, cand)
        if not any(rows.values()):
            continue
        anchor = next(a for a, n in rows.items() if n)
        assert rows[anchor] == 32                       # 19 padded to whole lines of floats
        assert f"P_{anchor}" in generate(w, cand)[0]
        plan = CompiledPlan(w, cand, tmp_path)
        for x, ref in zip(ref_inputs, refs):
            err, why = verify(plan(**x), ref, w.rtol)
            assert why == "", (cand.to_json(), why)
        checked += 1
        if checked == 3:
            break
    assert checked == 3, "no candidate kept private rows"


def test_a_reduction_over_one_index_keeps_none():
    text = ('name = "one"\noutputs = ["s"]\nprogram = """\ns[t] += x[t,c] * x[t,c]\n"""\n'
            '[dims]\nT = 40\nC = 64\n[inputs]\nx = ["T", "C"]\n')
    w = parse_workload(text, "one.toml")
    space = SearchSpace(w, TileBounds(1, 64))
    rng = np.random.default_rng(0)
    for _ in range(20):
        cand = space.random(rng)
        assert not any(private_rows(w, cand).values())
        assert "P_s" not in generate(w, cand)[0]
