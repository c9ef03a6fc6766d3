"""Typed records across the search <-> database boundary, and the one status vocabulary.

A trial travels as a :class:`TrialOutcome` from the search to :meth:`db.store.PlanDB.add_trial`,
and comes back as a :class:`StoredTrial` (a ``trials`` row) or a :class:`BestPlan` (a
``best_plans`` row), each built by ``from_row`` with its JSON columns parsed.  The columns and
their text values are those of schema 3: nothing here changes what is stored.
"""
from __future__ import annotations

import enum
import json
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from search_spaces.candidate import Candidate

from .keys import PlanKey


class Status(enum.StrEnum):
    """Every outcome a trial, a measurement or a benchmark contender can have.

    A ``StrEnum``: ``Status.OK == "ok"``, it is stored and written to JSON as the same text
    the bare strings were, so databases and saved records read back unchanged.
    """
    OK = "ok"                  # ran, verified against the reference, timed
    FAILED = "failed"          # did not compile, crashed, timed out, wrong result, no memory
    PRUNED = "pruned"          # the cost model ruled it out; never run
    WRONG = "wrong"            # bench: outputs off the reference (a search trial: failed)
    SKIPPED = "skipped"        # bench: a contender that could not be set up here
    TIMED_OUT = "timed_out"    # bench: a contender cut at its time limit


# The statuses a stored trial may have (the trials table's CHECK constraint).
TRIAL_STATUSES = (Status.OK, Status.FAILED, Status.PRUNED)

# A confirmation (finalists re-measured side by side at the end of a search) is stored as ok or
# failed trials of the study CONFIRMATION_SUFFIX appended to the search's own, one row per
# finalist with every round's time in ``times``; the rows of one confirmation share their
# ``created`` time (written in one transaction), and its winner is the key's best plan.
CONFIRMATION_SUFFIX = ":confirm"


def confirmation_study(study: str) -> str:
    """The study a search's confirmations are stored under."""
    return study + CONFIRMATION_SUFFIX


def is_confirmation(study: str) -> bool:
    """Whether ``study`` holds confirmations rather than a search's trials."""
    return study.endswith(CONFIRMATION_SUFFIX)


def _loads(text: str | None, empty):
    return json.loads(text) if text else empty


@dataclass(frozen=True)
class TrialOutcome:
    """What the search learnt from one trial, as it goes to the database.

    ``params`` are the sampler's choices and ``options`` the values offered for each (both
    None when not from a sampler); ``times`` every timed run in seconds; ``rel_err`` the worst
    relative error against the reference (a wrong result's says how wrong); ``corrected_s``
    the prediction of the learned correction (:mod:`costmodel.correction`) beside the
    analytic ``predicted_s``; ``groups`` each fused group's median seconds by its anchor
    (empty where the backend does not time groups), what the correction is fitted on.
    """
    candidate: Candidate
    status: Status
    predicted_s: float | None = None
    measured_s: float | None = None       # the median of ``times``; kept for ok trials only
    error: str | None = None
    params: dict | None = None
    options: dict | None = None
    times: tuple[float, ...] = ()
    rel_err: float | None = None
    corrected_s: float | None = None
    groups: tuple[tuple[str, float], ...] = ()

    def __post_init__(self):
        # a bare "ok" (an older caller, a backend's text) becomes its member; anything else
        # raises here rather than reaching the database
        object.__setattr__(self, "status", Status(self.status))
        object.__setattr__(self, "times", tuple(float(t) for t in self.times or ()))
        object.__setattr__(self, "groups", _group_pairs(self.groups))

    def to_dict(self) -> dict:
        return {**asdict(self), "candidate": self.candidate.to_dict(), "times": list(self.times),
                "groups": dict(self.groups)}


def _group_pairs(groups) -> tuple[tuple[str, float], ...]:
    """(anchor, seconds) pairs from pairs or a dict (as JSON stores them)."""
    items = groups.items() if isinstance(groups, Mapping) else (groups or ())
    return tuple((str(a), float(s)) for a, s in items)


def _candidate_name(candidate) -> str:
    return (candidate.get("name") or "") if isinstance(candidate, dict) else ""


@dataclass(frozen=True)
class StoredTrial:
    """One row of ``trials``, its JSON columns parsed.

    ``candidate`` is the stored candidate's dict, not a :class:`Candidate`: a row written
    under another ``space_version`` may hold an encoding today's code cannot rebuild, and
    reading (listing, pruning, checking) must not fail on it.  :meth:`to_candidate` rebuilds it.
    """
    id: int
    key: PlanKey
    plan_key: str                         # as stored (``db check`` compares it with ``key``)
    study: str
    number: int
    candidate: dict
    status: Status
    predicted_s: float | None
    measured_s: float | None              # None unless ok
    error: str | None
    params: dict
    options: dict
    times: tuple[float, ...]
    rel_err: float | None
    created: str
    corrected_s: float | None = None      # None for trials of schema 1 and 2
    groups: tuple[tuple[str, float], ...] = ()   # empty for trials of schema 1 to 3

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "StoredTrial":
        return cls(id=row["id"], key=PlanKey.from_row(row), plan_key=row["plan_key"],
                   study=row["study"], number=int(row["number"]),
                   candidate=_loads(row["candidate_json"], {}), status=Status(row["status"]),
                   predicted_s=row["predicted_s"], measured_s=row["measured_s"],
                   error=row["error"], params=_loads(row["params_json"], {}),
                   options=_loads(row["options_json"], {}),
                   times=tuple(_loads(row["times_json"], ())), rel_err=row["rel_err"],
                   created=row["created"], corrected_s=row.get("corrected_s"),
                   groups=_group_pairs(_loads(row.get("group_times_json"), {})))

    @property
    def name(self) -> str:
        """The candidate's label ("unfused", "greedy", "heuristic"; "" for sampled ones)."""
        return _candidate_name(self.candidate)

    def to_candidate(self) -> Candidate:
        return Candidate.from_dict(self.candidate)


@dataclass(frozen=True)
class BestPlan:
    """One row of ``best_plans``: the fastest ok trial of a plan key, its JSON parsed."""
    key: PlanKey
    plan_key: str
    workload_name: str
    candidate: dict                       # as in StoredTrial: the stored dict
    measured_s: float
    predicted_s: float | None
    study: str
    trial_number: int
    updated: str

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> "BestPlan":
        return cls(key=PlanKey.from_row(row), plan_key=row["plan_key"],
                   workload_name=row["workload_name"],
                   candidate=_loads(row["candidate_json"], {}), measured_s=row["measured_s"],
                   predicted_s=row["predicted_s"], study=row["study"],
                   trial_number=int(row["trial_number"]), updated=row["updated"])

    @property
    def name(self) -> str:
        return _candidate_name(self.candidate)

    def to_candidate(self) -> Candidate:
        return Candidate.from_dict(self.candidate)
