"""search_spaces.exhaustive: the walk visits every candidate of a space, each once."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from search_spaces import load_workload
from search_spaces.exhaustive import SpaceTooLarge, all_candidates
from search_spaces.space import SearchSpace, TileBounds
from search_spaces.answers import params_of

NARROW = {"tiles": [4096], "layouts": "identity"}      # no tiling: fusion and impls only


def narrowed(w, spec=NARROW):
    return replace(w, space_json=json.dumps(spec, sort_keys=True))


def test_every_random_draw_is_enumerated_and_nothing_twice(small):
    space = SearchSpace(narrowed(small("gelu_mlp")), TileBounds(1, 256))
    cands = all_candidates(space)
    keys = [c.key for c in cands]
    assert len(keys) == len(set(keys))
    assert len(keys) > 50                  # several partitions x impls, not one path
    rng = np.random.default_rng(0)
    drawn = {space.random(rng).key for _ in range(2000)}
    assert drawn <= set(keys)
    # a uniform draw over answers reaches most candidates: the walk is not inventing any
    assert len(drawn) > 0.5 * len(keys)


def test_enumerated_candidates_rebuild_from_their_answers(small):
    space = SearchSpace(narrowed(small("gelu_mlp")), TileBounds(1, 256))
    cands = all_candidates(space)
    for c in cands[:: max(1, len(cands) // 25)]:
        params = params_of(space, c)
        assert params is not None
        assert space.build(lambda n, opts: params[n]).key == c.key


CHAIN = """
name = "chain"
dtype = "float32"
outputs = ["o"]
program = \"\"\"
t[i] = x[i] * 2
o[i] = t[i] + 1
\"\"\"
[dims]
I = 8
[inputs]
x = ["I"]
[space]
tiles = [2, 4]
layouts = "identity"
"""


def test_count_is_exact_where_later_questions_depend_on_earlier_answers(tmp_path):
    # fused: one group, its tile in {2, 4, 8}: 3 candidates; unfused: two groups, 3 x 3: 9
    path = tmp_path / "chain.toml"
    path.write_text(CHAIN)
    space = SearchSpace(load_workload(path), TileBounds(1, 256))
    cands = all_candidates(space)
    assert len(cands) == 12
    assert sum(1 for c in cands if c.fused_pairs) == 3
    # 12 answer sets, 12 leaves: the limit counts leaves exactly
    assert len(all_candidates(space, max_leaves=12)) == 12
    with pytest.raises(SpaceTooLarge):
        all_candidates(space, max_leaves=11)


def test_a_large_space_fails_fast_with_advice(small):
    space = SearchSpace(small("trimul_outgoing"), TileBounds(1, 256))
    with pytest.raises(SpaceTooLarge, match=r"\[space\] table"):
        all_candidates(space, max_leaves=200)

