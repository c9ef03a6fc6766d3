"""The prune factor tightens to the model's measured out-of-sample errors."""
from __future__ import annotations

import dataclasses
import math
import re

import pytest

from autotune.search.trust import FLOOR, MIN_ERRORS, ModelTrust
from autotune.backends.fake import FakeBackend

from tests.support.fake_search import CHEAP, DEV, run, unchained


def test_too_few_errors_keep_the_ceiling():
    t = ModelTrust(2.0)
    for _ in range(MIN_ERRORS - 1):
        t.add(1.0, 1.5)
    assert t.sigma() is None and t.factor() == 2.0


def test_a_model_off_by_a_constant_ranks_right_and_gets_the_floor():
    t = ModelTrust(2.0)
    for p in range(1, MIN_ERRORS + 5):
        t.add(float(p), 3.0 * p)          # always 3x off: its ratios are exact
    assert t.sigma() == pytest.approx(0.0, abs=1e-12) and t.factor() == FLOOR


def test_the_factor_follows_the_spread_and_never_passes_the_ceiling():
    narrow, wide = ModelTrust(2.0), ModelTrust(2.0)
    for k in range(40):
        e = (k % 5 - 2) / 2                     # -1, -0.5, 0, 0.5, 1
        narrow.add(1.0, math.exp(0.15 * e))
        wide.add(1.0, math.exp(0.6 * e))
    assert FLOOR < narrow.factor() < 2.0
    assert narrow.factor() == pytest.approx(math.exp(2.5 * math.sqrt(2) * narrow.sigma()))
    assert wide.factor() == 2.0
    for bad in (math.nan, math.inf, 0.0):
        narrow.add(bad, 1.0)
        narrow.add(1.0, bad)
    assert len(narrow) == 40                    # unusable pairs are not errors


def _factors(rows) -> list[float]:
    out = []
    for r in rows:
        m = re.search(r"> ([0-9.]+) x ", r.error or "") if r.status == "pruned" else None
        if m:
            out.append(float(m.group(1)))
    return out


def test_a_search_prunes_tighter_once_its_model_proves_good(small, fresh_db, tmp_path):
    """With a near-exact model (measurements 2 % off it) the search's prune factor drops
    below the ceiling of 2; with a fixed --prune-factor it stays where it was put."""
    from db.store import PlanDB
    w = unchained(small("gated_mlp"))      # (the draws this pins: tests/support/fake_search)
    from autotune.api import space_for
    space = space_for(w, "cpu")
    # (the random sampler measures about one candidate in seven here, the rest predicted past
    # the best's 2x: 100 trials give the 12 errors the factor needs)
    config = dataclasses.replace(CHEAP, budget=100, learn=False)
    _, rows, _ = run(w, space, fresh_db, config, FakeBackend(w, DEV, sigma=0.02))
    adaptive = _factors(rows)
    assert adaptive and min(adaptive) < 2.0
    fixed_db = PlanDB(tmp_path / "fixed.db")
    _, rows, _ = run(w, space, fixed_db, dataclasses.replace(config, prune_factor=2.0),
                     FakeBackend(w, DEV, sigma=0.02))
    assert _factors(rows) and set(_factors(rows)) == {2.0}
