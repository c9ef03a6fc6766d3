"""Local search: every one-parameter mutation of the incumbent, the questions it opens
answered at the model's best (autotune.search.proposals.single_flips)."""
from __future__ import annotations

from search_spaces import load_workload
from search_spaces.answers import params_of
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace, TileBounds

from autotune.search.proposals import SingleFlips, neighbour, single_flips


def _space():
    w = load_workload("trimul_outgoing", {"N": 8, "C": 4})
    return w, SearchSpace(w, TileBounds(stacks=True))


def _score(cand) -> float:
    """A model that likes stacks but not the output gate in one."""
    stacked = {m for s in cand.stacks for m in s}
    return 1.0 - 0.1 * len(stacked) + 0.5 * ("go" in stacked)


def test_every_single_flip_is_offered_and_opened_questions_are_settled():
    w, space = _space()
    params = params_of(space, named_plan(space, "heuristic"))
    assert params is not None and params.get("stack:pa") == 0
    flips = single_flips(space, params, _score)
    changed = [{k for k in used if used.get(k) != params.get(k)} for _, used in flips]
    # each flip changes its own parameter (and what it opened), every parameter is flipped
    assert {k for ch in changed for k in ch} >= {k for k in params if not k.startswith("tile:")}
    stacked = [c for c, _ in flips if c.stacks]
    assert [c.stacks for c in stacked] == [(("pa", "ga", "pb", "gb"),)]   # go settled out
    best = min(flips, key=lambda f: _score(f[0]))[0]
    assert best.stacks == (("pa", "ga", "pb", "gb"),)


def test_the_neighbour_is_the_best_unseen_flip_then_the_next():
    w, space = _space()
    params = params_of(space, named_plan(space, "heuristic"))
    flips = SingleFlips()
    import numpy as np
    rng = np.random.default_rng(0)
    first = neighbour(w, space, None, params, rng, set(), correct=_score, flips=flips)
    cand_first = space.build(lambda q, opts: first[q] if q in first else opts[0])
    assert cand_first.stacks == (("pa", "ga", "pb", "gb"),)
    # once seen, the next best comes (and the flips were built once: same list object)
    moves = flips.of(space, params, _score)
    second = neighbour(w, space, None, params, rng, {cand_first.key}, correct=_score,
                       flips=flips)
    assert second != first and flips.of(space, params, _score) is moves
