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


def test_an_answer_is_judged_with_the_questions_it_opens_settled():
    """A kernel epilogue alone scores worse than none, the pair it opens better than both:
    turning ga to the kernel opens its epilogue question, whose yes opens pair:pa->a in turn;
    the epilogue is judged with the pair settled, so the move finds the pair (judged on its
    own, the epilogue would be rejected and the pair never seen)."""
    from autotune.backends.factory import backend_kind
    from search_spaces.kernel_fusion import kernel_parts
    w = load_workload("trimul_outgoing", {"N": 8, "C": 4})
    space = SearchSpace(w, backend_kind("cpu").tile_bounds)

    def pairs(cand):
        return {kernel_parts(w, cand.fused_pairs, s.anchor).pair for s in cand.schedules
                if s.impl == "kernel"} - {""}

    def score(cand) -> float:
        epilogues = sum(1 for s in cand.schedules if s.impl == "kernel"
                        and kernel_parts(w, cand.fused_pairs, s.anchor).epilogue)
        return 1.0 + 0.1 * epilogues - 0.3 * len(pairs(cand))

    def choose(name, opts):
        if name.startswith("impl:") and "kernel" in opts:
            return "library" if name == "impl:ga" else "kernel"
        return 0 if name.startswith(("fuse:", "pair:")) else opts[0]
    params = params_of(space, space.build(choose))
    assert params is not None and params["impl:ga"] == "library" and "fuse:ga->a" not in params
    flipped = [cand for cand, used in single_flips(space, params, score)
               if used.get("impl:ga") == "kernel"]     # (a chain on asks no impl:ga)
    assert len(flipped) == 1 and pairs(flipped[0]) == {"pa"}
