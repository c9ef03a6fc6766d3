"""A backend that answers from a recorded search: each candidate's first measurement in a plan
database, given back as it was recorded.

Replaying a recorded search with the same workload, device spec and configuration takes the
same decisions and so the same trials; a changed search (another prune factor, another
proposal rule) shows what it would have measured, in milliseconds.  A candidate the recording
never measured gets ``fallback``'s measurement when one is given (a
:class:`~autotune.backends.fake.FakeBackend`, say), else a failed one that says so.  A
confirmation is answered likewise from the recorded confirmations (each candidate's latest).
"""
from __future__ import annotations

from typing import Sequence

from db.records import Status, StoredTrial, confirmation_study, is_confirmation
from db.store import PlanDB
from search_spaces.candidate import Candidate

from autotune.backends.base import BackendKind, Leniency, Measurement, MeasureSettings
from autotune.backends.factory import backend_kind

NOT_RECORDED = "not in the recorded search (the replay has no measurement of it)"


def recorded_measurements(trials: list[StoredTrial]) -> dict[str, Measurement]:
    """Candidate key -> its first measurement among stored search trials (in trial order).
    Pruned trials were never measured; a later trial of the same candidate reused the first
    one.  Confirmations are not a search's measurements: :func:`recorded_confirmations`."""
    out: dict[str, Measurement] = {}
    for t in trials:
        key = t.to_candidate().key
        if t.status == Status.PRUNED or key in out or is_confirmation(t.study):
            continue
        if t.status == Status.OK:
            # with the group times, so the learned correction sees what it saw when recorded
            out[key] = Measurement(Status.OK, t.measured_s, t.times or (t.measured_s,), t.rel_err,
                                   groups=tuple(t.groups or ()))
        else:
            out[key] = Measurement(Status.FAILED, rel_err=t.rel_err, error=t.error or "")
    return out


def recorded_confirmations(trials: list[StoredTrial]) -> dict[str, Measurement]:
    """Candidate key -> its measurement in the latest recorded confirmation that had it."""
    out: dict[str, Measurement] = {}
    for t in sorted((t for t in trials if is_confirmation(t.study)), key=lambda t: t.created):
        out[t.to_candidate().key] = (
            Measurement(Status.OK, t.measured_s, t.times, t.rel_err) if t.status == Status.OK
            else Measurement(Status.FAILED, rel_err=t.rel_err, error=t.error or ""))
    return out


class ReplayBackend:
    """Measurements from a recording, whatever ``timeout_s`` and ``best_s`` (the recording's
    own early stops are in its times).  ``calls`` lists every candidate asked for, in order;
    ``confirmed`` answers confirmations."""

    name = "replay"

    def __init__(self, recorded: dict[str, Measurement],
                 settings: MeasureSettings = MeasureSettings(), fallback=None,
                 kind: BackendKind | None = None,
                 confirmed: dict[str, Measurement] | None = None):
        self.recorded, self.settings, self.fallback = recorded, settings, fallback
        self.confirmed = confirmed or {}
        # the device kind the recording was made on (its memory rules); the CPU's by default
        self.kind = kind if kind is not None else backend_kind("cpu")
        self.calls: list[Candidate] = []

    @classmethod
    def from_db(cls, db: PlanDB, plan_key: str, study: str | None = None,
                settings: MeasureSettings = MeasureSettings(), fallback=None) -> "ReplayBackend":
        """The trials of ``plan_key`` (of one study if given, and its confirmations) in
        ``db``."""
        trials = db.trials(plan_key, study)
        if study is not None:
            trials += db.trials(plan_key, confirmation_study(study))
        return cls(recorded_measurements(trials), settings, fallback,
                   confirmed=recorded_confirmations(trials))

    def measure(self, cand: Candidate, timeout_s: float, best_s: float | None,
                leniency: Leniency = Leniency()) -> Measurement:
        self.calls.append(cand)
        if cand.key in self.recorded:
            return self.recorded[cand.key]
        if self.fallback is not None:
            return self.fallback.measure(cand, timeout_s, best_s, leniency)
        return Measurement(Status.FAILED, error=NOT_RECORDED)

    def confirm(self, cands: Sequence[Candidate], rounds: int, timeout_s: float
                ) -> list[Measurement]:
        """Each candidate's recorded confirmation; those without one from ``fallback``'s
        confirmation (together), else failed."""
        missing = [c for c in cands if c.key not in self.confirmed]
        extra = dict(zip([c.key for c in missing], self.fallback.confirm(
            missing, rounds, timeout_s))) if missing and self.fallback is not None else {}
        return [self.confirmed.get(c.key) or extra.get(c.key) or
                Measurement(Status.FAILED, error=NOT_RECORDED) for c in cands]

    def prepare(self) -> None:
        if self.fallback is not None:
            self.fallback.prepare()

    def reclaimable_bytes(self) -> int:
        return self.fallback.reclaimable_bytes() if self.fallback is not None else 0

    def close(self) -> None:
        if self.fallback is not None:
            self.fallback.close()
