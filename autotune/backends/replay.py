"""A backend that answers from a recorded search: each candidate's first measurement in a plan
database, given back as it was recorded.

Replaying a recorded search with the same workload, device spec and configuration takes the
same decisions and so the same trials; a changed search (another prune factor, another
proposal rule) shows what it would have measured, in milliseconds.  A candidate the recording
never measured gets ``fallback``'s measurement when one is given (a
:class:`~autotune.backends.fake.FakeBackend`, say), else a failed one that says so.
"""
from __future__ import annotations

import json

from db.store import PlanDB
from search_spaces.candidate import Candidate

from autotune.backends.base import Measurement, MeasureSettings

NOT_RECORDED = "not in the recorded search (the replay has no measurement of it)"


def recorded_measurements(rows: list[dict]) -> dict[str, Measurement]:
    """Candidate key -> its first measurement among trial rows (in trial order).  Pruned rows
    were never measured; a later row of the same candidate reused the first one."""
    out: dict[str, Measurement] = {}
    for row in rows:
        key = Candidate.from_json(row["candidate_json"]).key
        if row["status"] == "pruned" or key in out:
            continue
        if row["status"] == "ok":
            times = tuple(json.loads(row["times_json"] or "[]")) or (row["measured_s"],)
            out[key] = Measurement("ok", row["measured_s"], times, row["rel_err"])
        else:
            out[key] = Measurement("failed", rel_err=row["rel_err"], error=row["error"] or "")
    return out


class ReplayBackend:
    """Measurements from a recording, whatever ``timeout_s`` and ``best_s`` (the recording's
    own early stops are in its times).  ``calls`` lists every candidate asked for, in order."""

    name = "replay"

    def __init__(self, recorded: dict[str, Measurement],
                 settings: MeasureSettings = MeasureSettings(), fallback=None):
        self.recorded, self.settings, self.fallback = recorded, settings, fallback
        self.calls: list[Candidate] = []

    @classmethod
    def from_db(cls, db: PlanDB, plan_key: str, study: str | None = None,
                settings: MeasureSettings = MeasureSettings(), fallback=None) -> "ReplayBackend":
        """The trials of ``plan_key`` (of one study if given) in ``db``."""
        return cls(recorded_measurements(db.trials(plan_key, study)), settings, fallback)

    def measure(self, cand: Candidate, timeout_s: float, best_s: float | None) -> Measurement:
        self.calls.append(cand)
        if cand.key in self.recorded:
            return self.recorded[cand.key]
        if self.fallback is not None:
            return self.fallback.measure(cand, timeout_s, best_s)
        return Measurement("failed", error=NOT_RECORDED)

    def reclaimable_bytes(self) -> int:
        return self.fallback.reclaimable_bytes() if self.fallback is not None else 0

    def close(self) -> None:
        if self.fallback is not None:
            self.fallback.close()
