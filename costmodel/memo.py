"""Reuse of group prices between candidates that share the group.

A search prices thousands of candidates that differ in one answer (a tile, a layout, a fusion),
so most of each candidate's groups were priced before, for another candidate.  A group's price
depends on its own arguments (workload, group, tiles, device) and on what it asks of the
candidate: the layout of some tensors, whether some tensors are materialized.  :class:`GroupMemo`
records those questions and their answers the first time a group is priced; a later candidate
reuses the price when it answers every recorded question the same way.  The pricing function is
deterministic, so the same answers to the same questions in the same order mean the same path
through it and the same result: the reuse cannot return a price the function would not.
(Profiled on a budget-2 search of trimul N=8: 1938 estimates before the first trial, 86 % of
their time in loop groups, most of them unchanged from the candidate before.)
"""
from __future__ import annotations

from collections.abc import Callable, Hashable

MAX_ENTRIES = 50_000     # group prices kept (~3 KB each with their questions, measured over
                         # 23,422 of trimul's: ~150 MB at most); the memo starts afresh beyond
PER_KEY = 32             # variants kept for one key (the newest): each is checked on a lookup


class _Asked:
    """``layout_of`` and the materialized set as the pricing function sees them, with every
    question asked and its answer written to ``log``."""

    def __init__(self, layout_of: Callable, mats, log: list):
        self._layout_of, self._mats, self._log = layout_of, mats, log

    def layout_of(self, tensor):
        answer = self._layout_of(tensor)
        self._log.append((0, tensor, answer))
        return answer

    def __contains__(self, tensor) -> bool:
        answer = tensor in self._mats
        self._log.append((1, tensor, answer))
        return answer

    def __iter__(self):
        raise TypeError("a memoized pricing function may only ask whether a tensor is in the "
                        "materialized set")


class GroupMemo:
    """Prices of groups keyed by their own arguments, each with the questions it asked."""

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self._prices: dict[Hashable, list[tuple[tuple, object]]] = {}
        self._entries = 0
        self._max = max_entries
        self.hits = self.misses = 0

    def price(self, key: Hashable, layout_of: Callable, mats, fn: Callable):
        """``fn(layout_of, mats)``, or a stored result of it for ``key`` whose recorded
        questions ``layout_of`` and ``mats`` answer the same way now."""
        for asked, result in self._prices.get(key, ()):
            if all((layout_of(t) if kind == 0 else t in mats) == answer
                   for kind, t, answer in asked):
                self.hits += 1
                return result
        log: list = []
        seen = _Asked(layout_of, mats, log)
        result = fn(seen.layout_of, seen)
        self.misses += 1
        if self._entries >= self._max:
            self._prices.clear()
            self._entries = 0
        variants = self._prices.setdefault(key, [])
        variants.insert(0, (tuple(log), result))
        if len(variants) > PER_KEY:
            variants.pop()
        else:
            self._entries += 1
        return result
