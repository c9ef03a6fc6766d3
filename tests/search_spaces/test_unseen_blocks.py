"""The blocks under bench/unseen (written to try the tuner on programs no built-in resembles)
stay valid workloads: each parses, its space builds, and its seed plans are priced, in the
CPU's space and in the CUDA backend's (tensor-core precisions among its questions)."""
from __future__ import annotations

from pathlib import Path

import pytest

from autotune.backends.cuda.kind import CudaBackendKind
from costmodel import preset
from costmodel.model import estimate
from search_spaces import load_workload
from search_spaces.plans import seed_plans
from search_spaces.space import SearchSpace, TileBounds

ROOT = Path(__file__).resolve().parents[2]
UNSEEN = sorted((ROOT / "bench" / "unseen").glob("*.toml"))
BUILTIN = sorted((ROOT / "search_spaces" / "builtin").glob("*.toml"))
BOUNDS = {"cpu": TileBounds(), "cuda": CudaBackendKind().tile_bounds}


def test_there_are_blocks():
    assert len(UNSEEN) >= 20


@pytest.mark.parametrize("bounds", sorted(BOUNDS))
@pytest.mark.parametrize("path", UNSEEN + BUILTIN, ids=lambda p: p.stem)
def test_block_parses_and_its_seed_plans_are_priced(path, bounds):
    # the CUDA space asks each library contraction's precision: the chained plan's answers
    # once lacked it (attention's search on the H200 stopped at its seed plans)
    w = load_workload(str(path))
    plans = seed_plans(SearchSpace(w, BOUNDS[bounds]))
    assert {"unfused", "greedy", "heuristic"} <= {c.name for c in plans}
    for cand in plans:
        assert estimate(w, cand, preset("h200")).total_s > 0
