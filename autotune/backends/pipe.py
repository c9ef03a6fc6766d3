"""What crosses a measuring worker's pipe (:mod:`autotune.backends.worker`): requests
(:class:`MeasureRequest`, :class:`Shutdown`) from the parent, replies (:class:`Ready`,
:class:`WorkerError`, :class:`MeasureReply`) from the worker, and the :class:`WorkerSpec` the
worker starts from.  The confirmation's pair lives in :mod:`autotune.backends.confirm`."""
from __future__ import annotations

from dataclasses import dataclass

from search_spaces.candidate import Candidate

from autotune.backends.base import Leniency, Measurement, MeasureSettings


@dataclass(frozen=True)
class WorkerSpec:
    """What a worker needs to rebuild the workload and its data on its own."""
    workload: str                  # built-in name or path
    dims: tuple[tuple[str, int], ...]
    seed: int
    cache_dir: str
    device: str = "cpu"            # the backend kind's name: whose plans the worker builds


@dataclass(frozen=True)
class MeasureRequest:
    """Parent to worker: measure one candidate against the best time so far."""
    candidate: Candidate
    settings: MeasureSettings
    best_s: float | None
    timeout_s: float | None = None      # the worker stops itself past this (None: never)
    leniency: Leniency = Leniency()     # how far off the best one run may be (see Cutoff)


@dataclass(frozen=True)
class Shutdown:
    """Parent to worker: exit."""


@dataclass(frozen=True)
class Ready:
    """Worker to parent, once: inputs and reference are in place, requests are served."""


@dataclass(frozen=True)
class WorkerError:
    """Worker to parent: it failed (to start, or later) and exits."""
    error: str


@dataclass(frozen=True)
class MeasureReply:
    """Worker to parent: a candidate's measurement, and the bytes the worker's buffer pool
    now holds for the next candidate (the parent's memory check counts them as free)."""
    measurement: Measurement
    pooled_bytes: int
