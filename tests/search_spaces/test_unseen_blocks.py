"""The blocks under bench/unseen (written to try the tuner on programs no built-in resembles)
stay valid workloads: each parses, its space builds, and its seed plans are priced."""
from __future__ import annotations

from pathlib import Path

import pytest

from costmodel import preset
from costmodel.model import estimate
from search_spaces import load_workload
from search_spaces.plans import seed_plans
from search_spaces.space import SearchSpace

UNSEEN = sorted((Path(__file__).resolve().parents[2] / "bench" / "unseen").glob("*.toml"))


def test_there_are_blocks():
    assert len(UNSEEN) >= 20


@pytest.mark.parametrize("path", UNSEEN, ids=lambda p: p.stem)
def test_block_parses_and_its_seed_plans_are_priced(path):
    w = load_workload(str(path))
    plans = seed_plans(SearchSpace(w))
    assert {"unfused", "greedy", "heuristic"} <= {c.name for c in plans}
    for cand in plans:
        assert estimate(w, cand, preset("h200")).total_s > 0
