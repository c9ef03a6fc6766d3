"""Every candidate of a small search space, by walking its tree of questions.

``SearchSpace.build`` asks its questions through a ``choose`` callback, and which questions
come later depends on earlier answers (a library GEMM is asked no fusion question; a contraction
order asks another space's questions).  The walk is an odometer over answer indices: build once
answering the current path (0 past its end), note how many options each question had, then
advance the last position that has options left and drop everything after it.  Every leaf is a
distinct set of answers; several leaves may build one candidate (two answers that mean the same
plan), so candidates are de-duplicated by key.

Used to measure a whole space (bench/pool_efficiency.py: how close a search with a fraction of
the space's size as budget comes to the best of all of it).
"""
from __future__ import annotations

from .candidate import Candidate
from .space import SearchSpace


class SpaceTooLarge(ValueError):
    """The space has more answer sets than the walk was allowed to visit."""


def all_candidates(space: SearchSpace, max_leaves: int = 100_000) -> list[Candidate]:
    """The distinct candidates of ``space`` (first leaf's order); raises SpaceTooLarge after
    ``max_leaves`` answer sets, so a large space fails fast instead of running for hours."""
    path: list[int] = []
    seen: dict[str, Candidate] = {}
    leaves = 0
    while True:
        widths: list[int] = []

        def choose(_name, opts):
            i = path[len(widths)] if len(widths) < len(path) else 0
            widths.append(len(opts))
            return opts[i]

        if leaves == max_leaves:
            raise SpaceTooLarge(f"more than {max_leaves} answer sets; narrow the workload's "
                                f"[space] table (tiles, layouts, contraction_impls)")
        cand = space.build(choose)
        seen.setdefault(cand.key, cand)
        leaves += 1
        path = path + [0] * (len(widths) - len(path))
        # advance the odometer: the last question with an option left
        while path and path[-1] + 1 >= widths[len(path) - 1]:
            path.pop()
        if not path:
            return list(seen.values())
        path[-1] += 1
