"""Plans of workloads with where(COND, A, B) on both code generators, verified against the
float64 reference: the causal-attention test workload (tests/data/causal_attention.toml) and a
program with every form of condition, under named plans, random candidates of the space
(fusion, tiles, layouts) and tiles that do not divide the extents (a condition reads absolute
indices, so a tile's loop must not restart them at 0), on the CPU backend and under the CUDA
host emulator; and a short search on the CPU whose every trial verifies."""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.backends.cpu.codegen import generate
from autotune.backends.cpu.executor import CompiledPlan
from autotune.reference import reference
from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.plans import NAMED_PLANS, named_plan
from search_spaces.space import SearchSpace, TileBounds
from tests.support.searches import search_rows
from tests.support.where import causal, where_workload

BOUNDS = TileBounds(1, 1024)
CXX = shutil.which("g++")


def odd_tiles(w, base, tiles=(4, 1, 3)):
    """``base`` with every loop group's tiles set to ``tiles`` (cut to its rank): boundary
    tiles, and loops over tiles whose origin is not 0."""
    scheds = [GroupSchedule(s.anchor, tuple(tiles[k % len(tiles)] for k in range(len(s.tiles))),
                            s.impl) if s.impl == "loop" else s for s in base.schedules]
    return make_candidate(base.fused, dict(base.layouts), scheds, "odd-tiles")


def candidates(w, n_random: int, seed: int = 0):
    space = SearchSpace(w, BOUNDS)
    rng = np.random.default_rng(seed)
    out = [named_plan(space, n) for n in NAMED_PLANS]
    out += [odd_tiles(w, out[1]), odd_tiles(w, out[2], (3, 2, 5))]
    seen = {c.key for c in out}
    for _ in range(20 * n_random):
        if len(out) >= len(NAMED_PLANS) + 2 + n_random:
            break
        c = space.random(rng)
        if c.key not in seen:
            seen.add(c.key)
            out.append(c)
    return out


WORKLOADS = {"causal": causal, "where_forms": lambda: where_workload("float64")}


def check_plans(w, make_plan, cands, seed=2):
    inputs = w.random_inputs(seed=seed)
    ref = reference(w, inputs)
    fused = 0
    for cand in cands:
        _, why = verify(make_plan(cand)(**inputs), ref, w.rtol)
        assert not why, f"{w.name} plan {cand.name or cand.key}: {why}\n{cand.to_json()}"
        fused += bool(cand.fused_pairs)
    assert fused >= 3         # fused groups (masked members inside tiles) were among them


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_cpu_plans_match_reference(name, tmp_path):
    w = WORKLOADS[name]()
    check_plans(w, lambda c: CompiledPlan(w, c, tmp_path), candidates(w, 8))


def test_odd_tiles_really_split_the_masked_indices():
    w = causal()
    base = named_plan(SearchSpace(w, BOUNDS), "heuristic")
    src, _ = generate(w, odd_tiles(w, base))
    # the fused group's tiles start at b<k> = t<k> * 4 and the mask compares loop variables
    assert "t0 * 4L" in src and "?" in src
    assert any("<=" in line and "?" in line for line in src.splitlines())


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_emulated_cuda_plans_match_reference(name, emulator, tmp_path):
    from autotune.backends.cuda.executor import CudaPlan
    w = WORKLOADS[name]()
    check_plans(w, lambda c: CudaPlan(w, c, tmp_path, runtime=emulator), candidates(w, 4, 1))


def test_search_on_the_causal_workload_verifies_every_trial(tmp_path):
    w = causal()
    result, rows = search_rows(w, tmp_path / "p.sqlite", 6)
    assert rows and all(r.status in ("ok", "pruned") for r in rows), \
        [(r.status, r.error) for r in rows]
    plan = make_executable(w, result.best.to_candidate(), "cpu", tmp_path)
    inputs = w.random_inputs(seed=9)
    _, why = verify(plan(**inputs), reference(w, inputs), w.rtol)
    assert not why, why
