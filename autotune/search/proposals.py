"""The cost model's proposals to the search: its favourites before any measurement (coordinate
descent from the named plans, plus random draws) and, during the search, the best-predicted
unseen mutation of the best plan so far (local search).  Both rank by ``correct(candidate)``:
the search's learned correction (:mod:`autotune.search.learning`), the analytic time without
one."""
from __future__ import annotations

from typing import Callable

import numpy as np

from costmodel import estimate
from search_spaces.candidate import Candidate
from search_spaces.plans import seed_plans
from search_spaces.answers import params_of

from autotune.search.config import SearchConfig

MODEL_MARGIN = 0.97   # a model favourite must beat the best named plan's prediction by 3 %
TIE = 1e-3            # predictions this close are one prediction
PER_STRUCTURE = 2     # favourites of one structure (same groups, impls and layouts) at most
Correct = Callable[[Candidate], float]      # a candidate's predicted seconds


def _analytic(w, dev) -> Correct:
    return lambda c: estimate(w, c, dev).total_s


def model_favourites(w, space, dev, config: SearchConfig, seen: set[str],
                     correct: Correct | None = None) -> list[Candidate]:
    """Candidates the cost model ranks fastest, found by coordinate descent in parameter
    space from the heuristic and unfused plans (one parameter changed at a time, with the
    questions it opens answered at their best; best improvement kept), plus a few random draws
    for diversity."""
    correct = correct or _analytic(w, dev)
    pool: dict[str, tuple[float, Candidate]] = {}

    def score(c: Candidate) -> float:
        if c.key not in pool:
            pool[c.key] = (correct(c), c)
        return pool[c.key][0]

    seeds = {c.name: c for c in seed_plans(space)}
    for start in ("heuristic", "unfused", "chained", "inlined"):
        if start not in seeds:
            continue
        params = params_of(space, seeds[start])
        if params is None:
            continue
        cand, params, opts = build_with_defaults(space, params)
        best = score(cand)
        # each start keeps to its family: the chained plan's descent keeps its chains on (its
        # first step turned attention's chain off, the one change the cheaper unchained plans
        # already cover, before the layouts that make the walk fast were ever tried); the
        # inlined plan's keeps its ops inlined likewise
        fixed = {"chained": "chain:", "inlined": "inline:"}.get(start)
        for _ in range(config.climb_rounds):
            improved = False
            for name in sorted(opts):
                if fixed and name.startswith(fixed):
                    continue
                for o in opts.get(name, []):
                    if o == params.get(name):
                        continue
                    c, p2, o2 = settle_opened(
                        space, score, *build_with_defaults(space, {**params, name: o}), opts)
                    if score(c) < best * (1 - 1e-6):
                        best, params, opts, improved = score(c), p2, o2, True
            if not improved:
                break
    rng = np.random.default_rng(config.seed)
    for _ in range(config.model_pool):
        score(space.random(rng))
    # only what the model clearly prefers to every named plan is worth a measurement up front
    bar = MODEL_MARGIN * min(correct(c) for c in seeds.values())
    ranked = sorted((v for k, v in pool.items() if k not in seen and v[0] < bar),
                    key=lambda x: x[0])
    # The climb's pool is mostly small variations of its optimum, priced alike (a kernel's
    # tile for a dim it does not split): attention's twelve favourites were one structure at
    # 1.104-1.11 ms, twelve of the 60 trials, all measured within 4 % of each other.  So the
    # favourites spread: predictions within TIE of a taken one are one prediction, and each
    # structure (fusion, impls, layouts, orders) gets at most PER_STRUCTURE of them.
    out: list[Candidate] = []
    taken: dict[tuple, int] = {}
    last = None
    for pred, c in ranked:
        if len(out) == config.model_seeds:
            break
        sig = structure(c)
        if (last is not None and pred <= last * (1 + TIE)) or taken.get(sig, 0) >= PER_STRUCTURE:
            continue
        out.append(c)
        taken[sig] = taken.get(sig, 0) + 1
        last = pred
    return out


def structure(c: Candidate) -> tuple:
    """What a candidate is apart from its tiles and kernel parameters."""
    return (c.fused, tuple(sorted((s.anchor, s.impl) for s in c.schedules)), c.layouts,
            c.orders, c.inlined)


def build_with_defaults(space, params: dict) -> tuple[Candidate, dict, dict]:
    """(candidate, params used, options asked) for ``params``, a question they do not answer
    answered by its default (a tile's middle option, else the first)."""
    asked: dict = {}
    used: dict = {}

    def choose(name, opts):
        opts = list(opts)
        asked[name] = opts
        val = params.get(name)
        if val not in opts:
            val = opts[len(opts) // 2] if name.startswith("tile:") else opts[0]
        used[name] = val
        return val
    return space.build(choose), used, asked


def settle_opened(space, score: Correct, c: Candidate, params: dict, opts: dict, before
                  ) -> tuple[Candidate, dict, dict]:
    """``c`` (built from ``params``, asking ``opts``) with the questions a change opened (those
    not in ``before``: a kernel's parameters once a contraction turns to the kernel, which
    siblings join a stack once it is on) answered at their best by ``score``, one at a time:
    their defaults alone can make the change look worse than it is (attention's batched
    scores: the kernel split over rows ran 0.9 ms, over the batch 0.33 ms, against 0.6 ms for
    the library; trimul's five projections stacked are priced over four of them stacked).
    An answer is judged with the questions it opens in turn settled the same way: a kernel
    epilogue alone can price worse than none while the pair it opens prices better than both
    (trimul's gate as ga's epilogue reads pa back; with pa as its pair it reads nothing)."""
    fresh = sorted(set(opts) - set(before))
    while fresh:
        name = fresh.pop(0)
        for o in opts.get(name, []):
            if o == params.get(name):
                continue
            c2, p2, o2 = build_with_defaults(space, {**params, name: o})
            if set(o2) - set(opts):
                c2, p2, o2 = settle_opened(space, score, c2, p2, o2, opts)
            if score(c2) < score(c) * (1 - 1e-6):
                c, params = c2, p2
                fresh += sorted(set(o2) - set(opts) - set(fresh))
                opts = o2
    return c, params, opts


class SingleFlips:
    """Every one-parameter mutation of one incumbent, built once: a search asks for its next
    local move many times while the incumbent stays, and random flips left some moves unseen
    (in two N=702 trimul searches, 40 random one- or two-parameter draws per local step over
    44 parameters proposed 13 stacked candidates in 200 trials, none of them a stack of the
    incumbent's projections, the family that had won the search before)."""

    def __init__(self) -> None:
        self._of: str | None = None
        self._moves: list[tuple[Candidate, dict]] = []

    def of(self, space, params: dict, score: Correct) -> list[tuple[Candidate, dict]]:
        """(candidate, params) of each mutation of ``params``."""
        ident = repr(sorted(params.items()))
        if ident != self._of:
            self._of, self._moves = ident, single_flips(space, params, score)
        return self._moves


def single_flips(space, params: dict, score: Correct) -> list[tuple[Candidate, dict]]:
    """(candidate, params) of every one-parameter mutation of ``params``, the questions a
    change opens answered at their best by ``score`` (:func:`settle_opened`)."""
    _, _, asked = build_with_defaults(space, params)
    out = []
    for name in sorted(asked):
        for o in asked[name]:
            if o != params.get(name):
                cand, used, _ = settle_opened(
                    space, score, *build_with_defaults(space, {**params, name: o}), asked)
                out.append((cand, used))
    return out


def neighbour(w, space, dev, params: dict, rng, seen: set[str], tries: int = 40,
              correct: Correct | None = None, flips: SingleFlips | None = None) -> dict | None:
    """Params of the unseen one-parameter mutation of ``params`` that the cost model ranks
    fastest (every one is ranked; ``flips`` keeps them between calls); once all were seen, of
    the best of ``tries`` random one- or two-parameter mutations (None if those were seen
    before too)."""
    correct = correct or _analytic(w, dev)
    moves = (flips or SingleFlips()).of(space, params, correct) if params else []
    unseen = [(c, used) for c, used in moves if c.key not in seen]
    if unseen:
        return min(unseen, key=lambda m: correct(m[0]))[1]
    best = None
    for _ in range(tries):
        asked: dict = {}
        used: dict = {}
        flips = set(rng.choice(sorted(params), size=min(len(params), int(rng.integers(1, 3))),
                               replace=False)) if params else set()

        def choose(name, opts):
            opts = list(opts)
            asked[name] = opts
            val = params.get(name)
            if name in flips or val not in opts:
                val = opts[int(rng.integers(len(opts)))]
            used[name] = val
            return val
        cand = space.build(choose)
        if cand.key in seen:
            continue
        pred = correct(cand)
        if best is None or pred < best[0]:
            best = (pred, used)
    return best[1] if best else None
