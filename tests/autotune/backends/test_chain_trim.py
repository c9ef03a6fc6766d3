"""A masked chain trims the chunks a where() mask covers off the ends of a block
(autotune.backends.chain_masks), on both code generators, verified against the float64
reference: a diagonal (the covered chunks at a block's end), a window (at its start), a band of
two masks (both ends), rows that see no key at all (no trim may drop their masked scores: their
softmax is the mean over every key), in the CPU's row steps and a row at a time."""
from __future__ import annotations

import numpy as np
import pytest

from autotune.backends.base import verify
from autotune.backends.cpu.codegen import generate
from autotune.backends.cpu.executor import CompiledPlan
from autotune.reference import reference
from search_spaces.chain import WALKED, detect
from search_spaces.chain_mask import TRIM_CHUNK, trim_quantum
from search_spaces.plans import chained_plan
from search_spaces.space import SearchSpace
from search_spaces.tile_work import masked_chain_work
from tests.support.chains import CROSS, LSE, chain_workload, chained_candidate

MASKS = {
    "diagonal": "where(j <= i + 20, s[h,i,j], -1e9)",
    "window": "where(j < i - 40, -1e9, s[h,i,j])",
    "band": "where(j - i <= 50, where(i - j <= 50, s[h,i,j], -1e9), -1e9)",
    "unseen_rows": "where(j + 3 < i, s[h,i,j], -1e9)",       # rows 0..3 see no key
}


def masked_cross(mask: str, t: int = 70, s: int = 256) -> object:
    program = CROSS.replace("where(j <= i + 20, s[h,i,j], -1e9)", mask)
    return chain_workload(program, ["o"], {"H": 2, "T": t, "S": s, "C": 8, "D": 16},
                          {"q": ["H", "T", "C"], "k": ["H", "C", "S"], "v": ["H", "S", "D"]},
                          "masked_cross", dtype="float32")


def with_block(w, block: int, anchor: str = "o"):
    space = SearchSpace(w)
    assert block in space.chain_blocks(anchor)
    return chained_candidate(space, block)


def test_trim_quantum_is_whole_chunks_of_blocks_it_divides():
    assert [trim_quantum(b) for b in (16, 32, 64, 128, 256, 48, 96)] == \
        [16, 32, TRIM_CHUNK, TRIM_CHUNK, TRIM_CHUNK, 48, TRIM_CHUNK]


@pytest.mark.parametrize("mask", list(MASKS))
def test_cpu_masked_chain_trims_covered_chunks_and_matches_reference(mask, tmp_path):
    w = masked_cross(MASKS[mask])
    inputs = w.random_inputs(seed=3)
    ref = reference(w, inputs)
    for block in (64, 128, 256):
        cand = with_block(w, block)
        src, _ = generate(w, cand)
        # the trim's two loops, and the block's loops over what it left
        assert f"jz -= {TRIM_CHUNK};" in src and f"ja += {TRIM_CHUNK};" in src, src
        assert "c_jv = ja - jb; c_jv < jz - jb;" in src, src
        assert f"c_{WALKED} = ja; c_{WALKED} < jz;" in src, src
        _, why = verify(CompiledPlan(w, cand, tmp_path)(**inputs), ref, w.rtol)
        assert not why, f"{mask} block {block}: {why}"
    if mask == "unseen_rows":
        # those rows' outputs are the mean of every value: nothing was trimmed from them
        got = CompiledPlan(w, with_block(w, 128), tmp_path)(**inputs)["o"]
        np.testing.assert_allclose(got[:, :4], np.broadcast_to(
            inputs["v"].astype(np.float64).mean(axis=1)[:, None], got[:, :4].shape), rtol=1e-5)


def test_a_chain_walked_a_row_at_a_time_trims_too(tmp_path):
    # a masked log-sum-exp: no contraction whose rows a step could share, a row at a time
    program = LSE.replace("m[i]     max= x[i,j]\np[i,j]    = exp(x[i,j] - m[i])",
                          "t[i,j]    = where(j <= i, x[i,j], -1e9)\nm[i]     max= t[i,j]\n"
                          "p[i,j]    = exp(t[i,j] - m[i])")
    assert program != LSE
    w = chain_workload(program, ["lse"], {"N": 200, "J": 200}, {"x": ["N", "J"]}, "causal_lse")
    cand = with_block(w, 64, "lse")
    src, _ = generate(w, cand)
    assert "rows at once" not in src and f"jz -= {TRIM_CHUNK};" in src, src
    inputs = w.random_inputs(seed=5)
    _, why = verify(CompiledPlan(w, cand, tmp_path)(**inputs), reference(w, inputs), w.rtol)
    assert not why, why


def test_emulated_cuda_masked_chain_trims_and_matches_reference(emulator, tmp_path):
    from autotune.backends.cuda.executor import CudaPlan
    w = masked_cross(MASKS["band"], t=40, s=128)
    cand = with_block(w, 64)
    inputs = w.random_inputs(seed=7)
    _, why = verify(CudaPlan(w, cand, tmp_path, runtime=emulator)(**inputs),
                    reference(w, inputs), w.rtol)
    assert not why, why


def test_the_model_counts_the_trimmed_points_and_the_blocks_apart():
    # a diagonal mask over 256 rows and keys, blocks of 128, a row at a time: a row keeps the
    # blocks up to its own and, of its own, the chunks of 32 up to its key
    w = masked_cross("where(j <= i, s[h,i,j], -1e9)", t=256, s=256)
    (chain,) = detect(w).values()
    work, kept, kept_blocks = masked_chain_work(w, chain, (1, 256, 16), 128)
    rows = np.arange(256)
    assert kept_blocks == pytest.approx(np.mean(rows // 128 + 1) / 2)
    assert kept == pytest.approx(np.mean(rows // 32 + 1) / 8)
    assert kept < kept_blocks
    assert chained_plan(SearchSpace(w)).schedules
