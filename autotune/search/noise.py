"""What the search knows of its measurements' noise, for early stops that noise cannot fool.

A backend gives up on a candidate after one run when that run is far off the best so far
(:meth:`autotune.backends.base.MeasureSettings.give_up_at`).  How far is "far" depends on how
much repeated runs of one candidate differ on this machine, now: :class:`NoiseBand` measures
that from the repeats the search already has.  And a candidate the cost model ranks among its
best is never given up on after one run (:func:`leniency`): a slow first run of the model's
favourite is more likely a busy moment than a slow plan.
"""
from __future__ import annotations

import math
import statistics
from typing import Iterable

from autotune.backends.base import Leniency


class NoiseBand:
    """The relative run-to-run spread of repeated measurements: the median over every repeated
    run of ``|log(run / median of its measurement)|``.  The median run of an odd number of
    runs is left out (its ratio is 0 by construction, not by luck)."""

    def __init__(self) -> None:
        self._devs: list[float] = []

    def add(self, times: Iterable[float]) -> None:
        """Learn from one measurement's timed runs (a single run teaches nothing)."""
        times = [t for t in times if t > 0]
        if len(times) < 2:
            return
        med = statistics.median(times)
        devs = sorted(abs(math.log(t / med)) for t in times)
        self._devs += devs[1:] if len(times) % 2 else devs

    def spread(self) -> float:
        """The spread so far (0 before any repeat)."""
        return statistics.median(self._devs) if self._devs else 0.0

    def __len__(self) -> int:
        return len(self._devs)


def is_favourite(pred: float, predictions: Iterable[float], favourites: int) -> bool:
    """Whether fewer than ``favourites`` of ``predictions`` (the model's seconds for every
    candidate the search has seen) are strictly faster than ``pred``."""
    return sum(p < pred for p in predictions) < favourites


def leniency(pred: float, predictions: Iterable[float], favourites: int,
             band: NoiseBand) -> Leniency:
    """What the backend is told of a candidate predicted ``pred`` seconds."""
    return Leniency(band.spread(), is_favourite(pred, predictions, favourites))
