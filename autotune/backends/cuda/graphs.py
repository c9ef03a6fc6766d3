"""CUDA graphs of a plan's runs: the whole plan launched as one graph when its run has no host
work (issue: each group's launch and cuBLAS call cost host time the device may wait for).

A graph bakes in addresses: it is keyed by the device addresses of the run's inputs (and the
binding whose arrays it reads), and captured the second time a run with that key comes, after
an eager run has loaded the kernels, planned the GEMMs and allocated every buffer the run keeps
(a capture allocates nothing: the host emulator refuses it, and on the device a temporary freed
after the capture would be reused by others while the graph still writes it).  A run is
replayed only where inputs of the same shapes lie at the same addresses, so what it reads is
what the caller passed.  A capture that fails turns graphs off for the plan and keeps the
reason (``error``): the plan then runs eagerly, as before.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Hashable

from autotune.backends.base import first_line

# A caller whose inputs move (fresh arrays on every call) would otherwise grow these without
# end: the graphs kept (each holds device resources) and the keys remembered, least recently
# used dropped first.
MAX_GRAPHS = 16
MAX_SEEN = 256


class PlanGraphs:
    """One plan's captured graphs on runtime ``rt`` (``enabled=False``: none, every run
    eager)."""

    def __init__(self, rt, enabled: bool = True):
        self.rt, self.enabled = rt, enabled
        self.error: str | None = None       # why the last capture failed (graphs then off)
        self.captures = 0
        self._graphs: OrderedDict[Hashable, object] = OrderedDict()
        self._seen: OrderedDict[Hashable, None] = OrderedDict()

    def run(self, key: Hashable, issue: Callable[[], None]) -> bool:
        """Replay the graph of ``key`` (capturing ``issue()``'s work first where this key was
        seen before): True when the run's work is launched, False when the caller runs
        ``issue()`` itself (first sight of the key, graphs off, or a failed capture)."""
        if not self.enabled:
            return False
        graph = self._graphs.get(key)
        if graph is None:
            if key not in self._seen:
                self._seen[key] = None
                if len(self._seen) > MAX_SEEN:
                    self._seen.popitem(last=False)
                return False
            try:
                graph = self.rt.capture(issue)
            except Exception as e:
                self.error, self.enabled = first_line(e), False
                return False
            self._graphs[key] = graph
            self.captures += 1
            if len(self._graphs) > MAX_GRAPHS:
                self._graphs.popitem(last=False)
        self._graphs.move_to_end(key)
        self.rt.replay(graph)
        return True

    def forget(self, token: int) -> None:
        """Drop the graphs of a binding (``token``: the last part of their keys)."""
        for table in (self._graphs, self._seen):
            for key in [k for k in table if k[-1] == token]:
                del table[key]

    def clear(self) -> None:
        self._graphs.clear()
        self._seen.clear()
