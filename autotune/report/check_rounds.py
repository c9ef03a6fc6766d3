"""The measuring side of ``autotune model-check``: interleaved rounds over every candidate, then
a confirmation of the few the figures hinge on.

A top-1 regret compares two medians, the model's pick and the fastest measured.  With three
rounds on a shared machine one slow round of the pick decides it (a VM measured one pick 10.7,
13.4 and 2.25 ms: a 468 % "regret" on a plan whose other runs matched the fastest), and the
fastest of forty noisy medians is biased low, the least of many draws.  So the candidates the
regrets hinge on (each model's pick and the few fastest, :func:`autotune.report.model_check.
hinges`) are measured ``rounds`` more rounds, interleaved among themselves, and their medians are
taken over all their rounds.  When that moves a pick or the fastest onto a candidate not yet
confirmed, the new set is measured again (at most :data:`PASSES` passes).  The search confirms
its finalists the same way (:mod:`autotune.search.confirm`).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from db.records import Status
from search_spaces.candidate import Candidate

FIRST = ("unfused", "heuristic", "greedy")   # measured first in round one: a best to time against
TIMEOUT_FACTOR = 10.0                        # a run may take this many times the best so far
PASSES = 3                                   # confirmation passes at most

# key -> (status, each round's seconds, error, each round's group seconds by anchor)
State = dict[str, tuple[Status, list[float], str, list[dict]]]


def measure_rounds(backend, cands: list[Candidate], rounds: int, seed: int, floor_s: float,
                   log: Callable[[str], None], state: State | None = None,
                   tag: str = "round") -> State:
    """Every candidate once per round, the named plans first in round one and the rest
    shuffled; a failure drops a candidate from later rounds.  With ``state``, the rounds are
    added to what it holds (its failed candidates stay out).  Returns the state."""
    rng = np.random.default_rng(seed + 1)
    fresh = state is None
    state = {c.key: (Status.OK, [], "", []) for c in cands} if fresh else state
    done = [t for c in cands for t in state[c.key][1]]
    best = min(done) if done else None
    for r in range(rounds):
        order = list(cands)
        if r == 0 and fresh:
            head = [c for c in order if c.name in FIRST]
            rest = [c for c in order if c.name not in FIRST]
            order = head + [rest[i] for i in rng.permutation(len(rest))]
        else:
            order = [order[i] for i in rng.permutation(len(order))]
        for i, c in enumerate(order):
            status, times, _, groups = state[c.key]
            if status != Status.OK:
                continue
            limit = max(floor_s, TIMEOUT_FACTOR * (best or 0)) * 3 + floor_s
            m = backend.measure(c, limit, None)
            label = f"{tag} {r + 1}/{rounds} {i + 1}/{len(order)} {c.name or c.key[:12]}"
            if m.status != Status.OK:
                state[c.key] = (Status.FAILED, times, m.error, groups)
                log(f"{label}: failed: {m.error}")
                continue
            times.append(m.median_s)
            if m.groups:
                groups.append(dict(m.groups))
            best = m.median_s if best is None else min(best, m.median_s)
            log(f"{label}: {m.median_s:.4g} s")
    return state


def confirm(backend, cands: list[Candidate], state: State, hinges: Callable[[State], set[str]],
            rounds: int, seed: int, floor_s: float, log: Callable[[str], None]
            ) -> frozenset[str]:
    """Measure the candidates ``hinges(state)`` names ``rounds`` more rounds, interleaved among
    themselves, until the set it names after a pass holds none that was not measured in it
    (at most :data:`PASSES` passes; each pass re-measures the whole set, so its members are
    always compared side by side).  Returns the keys measured in any pass that did not fail."""
    last: set[str] = set()
    measured: set[str] = set()
    if rounds < 1:
        return frozenset()
    for p in range(PASSES):
        want = hinges(state)
        if want <= last:
            break
        todo = [c for c in cands if c.key in want and state[c.key][0] == Status.OK]
        log(f"confirming {len(todo)} candidates the figures hinge on ({rounds} rounds)")
        measure_rounds(backend, todo, rounds, seed + 101 * (p + 1), floor_s, log, state,
                       tag="confirm")
        last = {c.key for c in todo if state[c.key][0] == Status.OK}
        measured |= {c.key for c in todo}
    return frozenset(k for k in measured if state[k][0] == Status.OK)
