"""Chained plans on the CPU backend against the float64 reference: the built-ins with chains
and the test-only blocks, at extents that leave a partial last block (and tiles that leave
partial row and free-dim tiles), each walked in every block size the space offers."""
from __future__ import annotations

import re

import numpy as np
import pytest

from autotune.backends.base import verify
from autotune.backends.cpu.codegen import generate
from autotune.backends.cpu.executor import CompiledPlan
from autotune.backends.cpu.machine import machine_bounds
from autotune.reference import reference
from search_spaces import load_workload
from search_spaces.chain import detect
from search_spaces.chain_walk import shared_rows
from search_spaces.plans import chained_plan
from search_spaces.space import SearchSpace
from tests.support.chains import (CROSS, band, biased, chain_workload, chained_candidate, cross,
                                  gqa, inline, kernel_sum, lse, mlp, plain, self_attention)
from tests.support.searches import search_rows

WORKLOADS = {
    "attention": lambda: load_workload("attention", {"S": 37, "H": 2, "D": 8, "C": 16}),
    "causal_attention": lambda: load_workload("causal_attention",
                                              {"S": 37, "H": 2, "D": 4, "C": 8}),
    "triangle_attention_starting": lambda: load_workload(
        "triangle_attention_starting", {"N": 19, "C": 8, "H": 2, "D": 4}),
    "lse": lse,
    "biased": biased,
    "plain": lambda: plain(5, 35, 3),
    "causal_long": lambda: load_workload("causal_attention", {"S": 70, "H": 1, "D": 4, "C": 8}),
    "inline": lambda: inline(5, 35, 3),
    "band": lambda: band(2, 37, 4),
    "cross": lambda: cross(s=37),
    "gqa": gqa,
    "self_attention": self_attention,
    "kernel_sum": kernel_sum,
    "mlp": mlp,
}


def chain_candidates(w, n_random: int | None = None, seed: int = 0):
    """The chained plan, then random candidates with every chain on, covering each block (as
    many as the most blocks a chain is offered, at least 3, where ``n_random`` is None)."""
    space = SearchSpace(w)
    rng = np.random.default_rng(seed)
    out = [chained_plan(space)]
    blocks = {a: (space.chains[a].extent, space.chain_blocks(a)) for a in space.chains}
    if n_random is None:
        n_random = max([3] + [len(b) for _, b in blocks.values()])
    for k in range(n_random):
        def choose(name, opts):
            if name.startswith("chain:"):
                return 1
            if name.startswith("order:"):
                return opts[-1]             # unsplit: a split product statement is no chain
            if name.startswith("chain_block:"):
                return opts[k % len(opts)]      # every block size in turn
            return opts[int(rng.integers(len(opts)))]
        out.append(space.build(choose))
    return out, blocks


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_chained_plans_match_reference(name, tmp_path):
    w = WORKLOADS[name]()
    cands, blocks = chain_candidates(w)
    assert blocks, f"{name}: no chain found"
    inputs = w.random_inputs(seed=4)
    ref = reference(w, inputs)
    walked = set()
    for cand in cands:
        chained = [s for s in cand.schedules if s.chain_block]
        assert chained, cand.to_json()
        walked |= {s.chain_block for s in chained}
        _, why = verify(CompiledPlan(w, cand, tmp_path)(**inputs), ref, w.rtol)
        assert not why, f"{name} {cand.to_json()}: {why}"
    # every block size offered was walked, those below the extent with a partial last block
    # (and one block over the whole walk, search_spaces.space.chain_blocks)
    ((extent, offered),) = blocks.values()
    assert walked == set(offered) and all(extent % b for b in walked if b < extent)
    assert max(offered) >= extent or extent > 256


@pytest.mark.parametrize("name", ["attention", "causal_attention", "biased", "lse", "inline",
                                  "band", "kernel_sum", "mlp"])
def test_emulated_cuda_chained_plans_match_reference(name, tmp_path):
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    from autotune.backends.cuda.emulator import HostEmulator
    from autotune.backends.cuda.executor import CudaPlan
    from search_spaces.space import TileBounds
    w = WORKLOADS[name]()
    emulator = HostEmulator(threads=4)
    space = SearchSpace(w, TileBounds(1, 1024))
    cands = [chained_plan(space)] + [space.build(
        lambda n, opts, k=k: 1 if n.startswith("chain:") else opts[-1] if n.startswith(
            "order:") else opts[k % len(opts)]) for k in range(2)]
    inputs = w.random_inputs(seed=5)
    ref = reference(w, inputs)
    for cand in cands:
        assert any(s.chain_block for s in cand.schedules)
        _, why = verify(CudaPlan(w, cand, tmp_path, runtime=emulator)(**inputs), ref, w.rtol)
        assert not why, f"{name} {cand.to_json()}: {why}"


def test_generated_walk_keeps_the_scores_in_block_buffers():
    w = WORKLOADS["attention"]()
    src, kernels = generate(w, chained_plan(SearchSpace(w)))
    chain = next(k for k in kernels if k.anchor == "o")
    # the chain's kernel writes only o: no S x S scores, exponentials or weights
    assert chain.writes == ("o",) and not {"s", "p", "a"} & set(chain.args)
    assert "m_new" in src and re.search(r"l_run(\[[^]]*\])? \*= sc", src) and "S_s[" in src


def test_search_on_a_test_only_block_tries_the_chain_and_verifies_every_trial(tmp_path):
    w = biased(40, 2, 4, 4, folder=tmp_path)
    _, rows = search_rows(w, tmp_path / "p.sqlite", 8)
    assert rows and all(r.status in ("ok", "pruned") for r in rows), \
        [(r.status, r.error) for r in rows]
    chained = [r for r in rows if r.status == "ok" and any(
        s.get("chain_block") for s in r.candidate["schedules"])]
    assert chained and all(r.rel_err is not None and r.rel_err <= w.rtol for r in chained)


def _transposed_qkv(space):
    """The chained attention plan's choices with q, k and v stored [h][d][i|j]: strided along
    the scores' reduction and the accumulators' free index, contiguous along the walk."""
    def choose(name, opts):
        if name.startswith("chain:"):
            return 1
        if name in ("layout:q", "layout:k", "layout:v"):
            return next(k for k, o in enumerate(space.layout_options(name[7:]))
                        if tuple(o) == (0, 2, 1))
        return opts[0]
    return space.build(choose)


def test_a_walk_contiguous_in_memory_goes_innermost(tmp_path):
    # attention at S=256 with v stored [h][d][j]: the accumulators' update over d gathered v
    # at a stride of S (89 ms); with the walk innermost each accumulator is a dot product (6 ms)
    w = WORKLOADS["attention"]()
    cand = _transposed_qkv(SearchSpace(w))
    assert all(cand.layout(t, 3) == (0, 2, 1) for t in "qkv")
    src, _ = generate(w, cand)
    # (S = 37: blocks do not divide the walk, so the scores run as loops with the walk
    # innermost; test_cpu_chain_steps_shared_rows_... covers their vector form)
    walk_inner = r"S_s\[(rr\*\d+L \+ )?c_jj - jb\] \+= "
    assert "_a = ACC[" in src and re.search(walk_inner, src), src
    inputs = w.random_inputs(seed=6)
    _, why = verify(CompiledPlan(w, cand, tmp_path)(**inputs), reference(w, inputs), w.rtol)
    assert not why, why
    # the same plan with contiguous q, k, v keeps the walk outermost
    plain_src, _ = generate(w, chained_plan(SearchSpace(w)))
    assert "_a = ACC[" not in plain_src and not re.search(walk_inner, plain_src)


def test_emulated_cuda_walk_innermost_matches_reference(tmp_path):
    import shutil
    if shutil.which("g++") is None:
        pytest.skip("g++ not on PATH")
    from autotune.backends.cuda.emulator import HostEmulator
    from autotune.backends.cuda.executor import CudaPlan
    from search_spaces.space import TileBounds
    w = WORKLOADS["attention"]()
    cand = _transposed_qkv(SearchSpace(w, TileBounds(1, 1024)))
    inputs = w.random_inputs(seed=7)
    out = CudaPlan(w, cand, tmp_path, runtime=HostEmulator(threads=4))(**inputs)
    _, why = verify(out, reference(w, inputs), w.rtol)
    assert not why, why


def each_block(w, seed: int, tmp_path):
    """(block, generated C) of the candidate with every chain on and the last option of every
    other choice, for each block the space offers; each verified against float64 after the
    caller's checks of its source."""
    space = SearchSpace(w)
    inputs = w.random_inputs(seed=seed)
    ref = reference(w, inputs)
    for block in space.chain_blocks("o"):
        cand = chained_candidate(space, block)
        src, _ = generate(w, cand)
        yield block, src
        _, why = verify(CompiledPlan(w, cand, tmp_path)(**inputs), ref, w.rtol)
        assert not why, f"block {block}: {why}"


@pytest.mark.parametrize("dtype,t,d", [("float32", 13, 16), ("float64", 13, 16),
                                       ("float32", 70, 64), ("float32", 13, 128),
                                       ("float32", 16, 16)])
def test_cpu_chain_steps_shared_rows_with_sums_in_vector_registers(dtype, t, d, tmp_path):
    # the query rows i are read by no walked operand (k, v): a tile runs 8 of them at once
    # (13 rows: the second step repeats the last), the scores summed over c into vector
    # registers (k contiguous along j, blocks dividing S) and the accumulators over d too;
    # at 64 accumulators a row, 6 rows a step (24 registers of accumulators; 4 with AVX2's
    # 16 registers: search_spaces.chain_walk.row_step), 10 steps share
    # each block (70 rows: the second group's two steps, the last repeating rows); at 128 a
    # row, 4 rows a step, their accumulators spilled from vectors (still not a buffer)
    # A step whose rows are all inside the tile addresses them as c_0 + rr (no clamp: GCC then
    # keeps the score sums in registers); only where a step may cross the tile's end (13 or 70
    # rows in steps of 8, 6 or 4) is there a clamped copy, for that step
    w = cross(t=t, d=d, dtype=dtype)
    (chain,) = detect(w).values()
    assert shared_rows(w, chain) == [chain.common("o")["d1"]]
    r = chain.common("o")["d1"]
    for block, src in each_block(w, 7, tmp_path):
        suf = "f" if dtype == "float32" else ""
        wide = 6 if machine_bounds().vec_bytes[0] >= 64 else 4    # AVX2: 4 rows at 64
        rows = 8 if d <= 32 else wide if d <= 96 else 4
        assert f"{rows} rows at once" in src and f"at_vload{suf}(&G_k[" in src \
            and f"at_vload{suf}(&G_v[" in src and "_o[rr][_x] +=" in src, src
        assert f"const long c_{r} = c_{r}_0 + rr;" in src
        assert (f"const long c_{r} = c_{r}_0 + rr < " in src) == (t % rows != 0), src


def test_cpu_chain_scales_a_score_sum_once_by_its_factors_constant_over_the_sum(tmp_path):
    # a score's factors that read no summed index (a constant, a per-row g, a per-key u) are
    # applied to each chunk's sums as they are stored, not to every product of the sum; the
    # per-key one as a vector along the walk
    from search_spaces.ir import to_text
    from autotune.backends.chain_vectors import sum_parts
    program = CROSS.replace("q[h,i,c] * k[h,c,j] * 0.25",
                            "q[h,i,c] * 0.25 * k[h,c,j] * g[h,i] * u[j]")
    w = chain_workload(program, ["o"], {"H": 2, "T": 13, "S": 64, "C": 8, "D": 16},
                       {"q": ["H", "T", "C"], "k": ["H", "C", "S"], "v": ["H", "S", "D"],
                        "g": ["H", "T"], "u": ["S"]}, "scaled", dtype="float32")
    inner, outer = sum_parts(w.op("s"), w.op("s").reduction)
    assert to_text(inner) == "(q[d0,d1,d3] * k[d0,d3,d2])" \
        and to_text(outer) == "((0.25 * g[d0,d1]) * u[d2])", (to_text(inner), to_text(outer))
    for block, src in each_block(w, 3, tmp_path):
        scaled = re.findall(r"_t = _s\[rr\]\[_v\] \* (.*); __builtin_memcpy", src)
        assert scaled and "G_g[" in scaled[0] and "at_vloadf(&G_u[" in scaled[0], src
        assert not re.search(r"_s\[rr\]\[_v\] \+= .*(G_g|G_u|0\.25)", src), src


@pytest.mark.parametrize("march", ["x86-64", "x86-64-v2", "x86-64-v4"])
def test_cpu_chain_groups_ask_for_the_full_vector_width(march, tmp_path):
    # a chain group's function is AT_WIDE (prefer-vector-width=512 where the target has
    # AVX-512, nothing elsewhere); the other loop groups are not; both forms are valid C
    import platform
    import shutil
    import subprocess
    if platform.machine() != "x86_64" or shutil.which("cc") is None:
        pytest.skip("x86-64 targets need an x86-64 cc")
    w = WORKLOADS["attention"]()
    cand = chained_plan(SearchSpace(w))
    src, kernels = generate(w, cand)
    chains = [s.anchor for s in cand.schedules if s.chain_block]
    assert chains and src.count("AT_WIDE void group_") == len(chains)
    assert len(re.findall(r"^void group_", src, re.M)) == len(kernels) - len(chains)
    path = tmp_path / "plan.c"
    path.write_text(src)
    proc = subprocess.run(["cc", f"-march={march}", "-fopenmp", "-fsyntax-only", "-Werror",
                           str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[:2000]


# (step, block) pairs each tile of 16 query rows walks, steps of 8 rows, 4 blocks of 16 keys:
# j <= i + 20: 5, 7, 8, 8, 4 (the last tile's 6 rows are one step); j >= i - 3: 8, 7, 5, 3, 1
@pytest.mark.parametrize("cond,order", [("j <= i + 20", [2, 3, 1, 0, 4]),
                                        ("j >= i - 3", [0, 1, 2, 3, 4])])
def test_masked_chain_deals_its_heaviest_tiles_first(cond, order, tmp_path):
    # 70 query rows in 5 tiles; a step tests the mask once over its rows (then each row's
    # running max)
    from search_spaces.candidate import Candidate
    from tests.support.chains import CROSS, chain_workload
    w = chain_workload(CROSS.replace("j <= i + 20", cond), ["o"],
                       {"H": 1, "T": 70, "S": 64, "C": 8, "D": 16},
                       {"q": ["H", "T", "C"], "k": ["H", "C", "S"], "v": ["H", "S", "D"]},
                       dtype="float32")
    space = SearchSpace(w)
    cand = space.build(lambda n, opts: 1 if n.startswith("chain:") else 16
                       if n.startswith("chain_block:") else opts[-1])
    d = cand.to_dict()
    (sched,) = [s for s in d["schedules"] if s.get("chain_block")]
    sched["tiles"] = [1, 16, 16]
    cand = Candidate.from_dict(d)
    src, _ = generate(w, cand)
    table = re.search(r"static const int TILES_\d+\[5\] = \{([\d, ]+)\};", src)
    assert table, src
    assert [int(x) for x in table.group(1).split(",")] == order
    # the box's bound takes the step's last row (j <= i + 20) or its first (j >= i - 3)
    assert re.search(r"if \(\(1L\*jb \+ -1L\*_last \+ -20L\) > 0\) \{ int _all = 1;"
                     if cond.startswith("j <=") else
                     r"if \(\(1L\*\(je - 1\) \+ -1L\*c_r1_0 \+ 3L\) < 0\) \{ int _all = 1;", src)
    inputs = w.random_inputs(seed=3)
    _, why = verify(CompiledPlan(w, cand, tmp_path)(**inputs), reference(w, inputs), w.rtol)
    assert not why, why


def test_plain_chain_in_vector_registers_writes_no_weights(tmp_path):
    # float32, a walk of 64 (blocks of 16 divide it), 16 accumulators a row: the scores summed
    # over d into vector registers (z read walk-innermost), the update in vectors; neither
    # the Gram matrix g nor the kernel k reaches memory, and no running max is kept
    w = kernel_sum(n=13, m=64, d=16, c=16, dtype="float32")
    (chain,) = detect(w).values()
    space = SearchSpace(w)
    inputs = w.random_inputs(seed=3)
    ref = reference(w, inputs)
    for block in space.chain_blocks("y"):
        cand = space.build(lambda n, opts: 1 if n.startswith("chain:") else block
                           if n.startswith("chain_block:") else opts[-1])
        src, kernels = generate(w, cand)
        k = next(k for k in kernels if k.anchor == "y")
        assert k.writes == ("y",) and not {"g", "k"} & set(k.args), k
        assert "m_run" not in src and "fused walk over an index of extent 64" in src
        if block % 16 == 0:
            assert re.search(r"at_vloadf\(&[GP]_z\[", src) and "_o[rr][_x] +=" in src, src
        _, why = verify(CompiledPlan(w, cand, tmp_path)(**inputs), ref, w.rtol)
        assert not why, f"block {block}: {why}"
