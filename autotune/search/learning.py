"""The learned correction a search keeps up to date (:mod:`costmodel.correction` does the fit).

At the start it is fitted on the plan database's measured trials of this device, of every
workload whose candidates can be rebuilt here (the search's own workload, and built-ins at any
dims); while the search runs it is refitted every ``refit_every`` measured candidates.  Trials
measured under another code generator (``autotune.code_version``) teach through their features
only: their groups' signatures carry that version (no group time of theirs stands for today's
code) and they count as a workload of their own.  Each
distinct (workload, candidate) is one sample, its measurements merged by their median; the
search's own workload weighs 1, others :data:`OTHER_WEIGHT`: what other workloads teach about
the device transfers through the features, but this workload's residuals matter most.

Two fits are kept: the group-level one (:mod:`costmodel.group_correction`, on trials whose
groups were timed: the CPU backend's) is used when it is active; the candidate-level one
(:mod:`costmodel.correction`, on every trial's total) otherwise.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field

from autotune.code_version import code_version, stored_code_version
from costmodel import estimate
from costmodel import group_correction as gc
from costmodel.correction import Correction, Sample, fit, predict
from costmodel.devices import DeviceSpec
from costmodel.estimate import CostEstimate
from costmodel.features import features
from costmodel.group_features import group_features, group_signature
from db.keys import PlanKey
from db.records import Status, StoredTrial
from search_spaces.rewrite import rewritten
from search_spaces.candidate import Candidate
from search_spaces.loader import builtin_names, load_workload
from search_spaces.workload import Workload

REFIT_EVERY = 5
OTHER_WEIGHT = 0.5
DB_LIMIT = 3000            # the newest measured trials of the device read at the start


@dataclass
class _Point:
    x: tuple[float, ...]
    analytic_s: float
    groups: tuple[tuple[str, gc.GroupObs], ...]       # (anchor, its signature and features)
    times: list[float] = field(default_factory=list)
    group_times: list[dict[str, float]] = field(default_factory=list)   # per measurement


def group_obs(w: Workload, cand: Candidate, est: CostEstimate, dev: DeviceSpec, code: str
              ) -> tuple[tuple[str, gc.GroupObs], ...]:
    """(anchor, group without a time) of each group of ``cand`` priced ``est``; ``code``: the
    version of the code that ran it (``autotune.code_version``), part of each group's
    signature, so that a group time measured under another code generator is never taken for
    today's."""
    rw = rewritten(w, cand)
    return tuple((g.anchor, gc.GroupObs(group_signature(rw, cand, g, code),
                                        group_features(rw, cand, g, dev), g.predicted_s))
                 for g in est.groups)


def rebuild_workload(name: str, canonical_json: str, whash: str) -> Workload | None:
    """The workload a stored trial was measured on, when it is a built-in (at the stored
    dims) whose hash still matches; None otherwise (a file's workload cannot be rebuilt)."""
    if name not in builtin_names():
        return None
    try:
        dims = json.loads(canonical_json).get("dims", {})
        w = load_workload(name, {k: int(v) for k, v in dims.items()})
    except Exception:      # dims a newer built-in no longer has, a damaged row: skip it
        return None
    return w if w.hash == whash else None


class Learner:
    """The current correction of one search, and the samples it is fitted on."""

    def __init__(self, w: Workload, dev: DeviceSpec, refit_every: int = REFIT_EVERY):
        self.w, self.dev, self.refit_every = w, dev, max(1, refit_every)
        # the code version of what this learner observes (its search's plan key sets it)
        self.code = code_version()
        self.correction = Correction()
        self.groups_fit = gc.GroupCorrection()
        self._points: dict[tuple[str, str], _Point] = {}
        self._seen_ids: set[int] = set()
        self._new = 0
        # cand key -> (estimate, candidate features, its groups' obs or None: not built yet)
        self._cache: dict[str, tuple] = {}
        self.fits = 0

    # ---- predictions ---------------------------------------------------------------------
    def _entry(self, cand: Candidate):
        if cand.key not in self._cache:
            est = estimate(self.w, cand, self.dev)
            self._cache[cand.key] = (est, features(rewritten(self.w, cand), est, self.dev), None)
        return self._cache[cand.key]

    def _groups(self, cand: Candidate):
        est, x, groups = self._entry(cand)
        if groups is None:
            groups = group_obs(self.w, cand, est, self.dev, self.code)
            self._cache[cand.key] = (est, x, groups)
        return groups

    @property
    def active(self) -> bool:
        """Whether predictions are corrected at all (either fit active)."""
        return self.groups_fit.active or self.correction.active

    def predict(self, cand: Candidate) -> tuple[CostEstimate, float]:
        """(analytic breakdown, corrected seconds) of ``cand``; kept for :meth:`observe`."""
        est, x, _ = self._entry(cand)
        if self.groups_fit.active:
            obs = gc.CandidateObs(cand.key, self.w.hash, est.total_s, None,
                                  tuple(g for _, g in self._groups(cand)))
            return est, gc.predict(self.groups_fit, obs)
        return est, predict(self.correction, x, est.total_s)

    def seconds(self, cand: Candidate) -> float:
        """The corrected seconds of ``cand`` (what proposals and pruning rank by)."""
        return self.predict(cand)[1]

    def group_obs(self, cand: Candidate) -> tuple[tuple[str, gc.GroupObs], ...]:
        """(anchor, untimed group) of each group of ``cand``: its signature and features."""
        return self._groups(cand)

    def features(self, cand: Candidate) -> tuple[float, ...]:
        """The correction's features of ``cand`` (see :func:`costmodel.correction.features`)."""
        return self._entry(cand)[1]

    # ---- samples -------------------------------------------------------------------------
    def _add(self, whash: str, cand_key: str, x, analytic_s: float, measured_s: float,
             groups, group_times) -> None:
        pt = self._points.setdefault((whash, cand_key),
                                     _Point(tuple(x), analytic_s, tuple(groups)))
        if groups and not pt.groups:      # first seen in a trial whose groups were not timed
            pt.groups = tuple(groups)
        pt.times.append(float(measured_s))
        if group_times:
            pt.group_times.append(dict(group_times))
        self._new += 1

    def observe(self, cand: Candidate, measured_s: float | None, groups=()) -> bool:
        """A candidate of this workload measured ``measured_s`` (``groups``: each group's
        seconds by anchor, where timed); True when that refitted."""
        if measured_s is None or not measured_s > 0:
            return False
        est, x, _ = self._entry(cand)
        self._add(self.w.hash, cand.key, x, est.total_s, measured_s, self._groups(cand), groups)
        if self._new >= self.refit_every:
            self.refit()
            return True
        return False

    def observe_stored(self, t: StoredTrial) -> bool:
        """A trial read back from the plan DB (this search's earlier run, another worker's);
        each row counts once however often it is read.  True when that refitted."""
        if t.status != Status.OK or t.id in self._seen_ids:
            return False
        self._seen_ids.add(t.id)
        try:
            cand = t.to_candidate()
        except Exception:       # an encoding of another space version
            return False
        return self.observe(cand, t.measured_s, t.groups)

    def load(self, db, key: PlanKey) -> int:
        """Add the measured trials of ``key``'s device from the plan DB (see the module doc)
        and fit; returns how many trials were used.  ``key`` is the one this learner's own
        measurements go under: its code version is theirs."""
        self.code = stored_code_version(key.libraries_json)
        self._cache.clear()
        workloads: dict[str, Workload | None] = {self.w.hash: self.w}
        used = 0
        for t in db.measured_trials(key.device_json, DB_LIMIT):
            whash = t.key.workload_hash
            if whash not in workloads:
                row = db.workload(whash)
                workloads[whash] = rebuild_workload(row["name"], row["canonical_json"],
                                                    whash) if row else None
            w = workloads[whash]
            if w is None or t.id in self._seen_ids or not t.measured_s:
                continue
            try:
                cand = t.to_candidate()
                est = estimate(w, cand, self.dev)
            except Exception:      # a candidate this space version cannot price
                continue
            self._seen_ids.add(t.id)
            code = stored_code_version(t.key.libraries_json)
            groups = group_obs(w, cand, est, self.dev, code) if t.groups else ()
            # measured under another code generator: a population of its own (ranked apart,
            # weighed as another workload), never merged with today's times of the candidate
            sample = whash if code == self.code else f"{whash}@{code or 'unversioned'}"
            self._add(sample, cand.key, features(rewritten(w, cand), est, self.dev),
                      est.total_s, t.measured_s, groups, t.groups)
            used += 1
        self.refit()
        return used

    def samples(self, exclude: frozenset[tuple[str, str]] = frozenset()) -> list[Sample]:
        """One sample per distinct (workload hash, candidate key), but those in ``exclude``."""
        return [Sample(pt.x, pt.analytic_s, statistics.median(pt.times),
                       1.0 if whash == self.w.hash else OTHER_WEIGHT, whash)
                for (whash, ckey), pt in self._points.items() if (whash, ckey) not in exclude]

    def candidates(self, exclude: frozenset[tuple[str, str]] = frozenset()
                   ) -> list[gc.CandidateObs]:
        """The group-level fit's candidates (one per distinct (workload hash, candidate key),
        but those in ``exclude``): medians of the totals and of each group's times."""
        out = []
        for (whash, ckey), pt in self._points.items():
            if (whash, ckey) in exclude:
                continue
            groups = []
            for anchor, g in pt.groups:
                ts = [gt[anchor] for gt in pt.group_times if anchor in gt]
                groups.append(gc.GroupObs(g.signature, g.features, g.analytic_s,
                                          statistics.median(ts) if ts else None))
            out.append(gc.CandidateObs(f"{whash}:{ckey}", whash, pt.analytic_s,
                                       statistics.median(pt.times), tuple(groups),
                                       1.0 if whash == self.w.hash else OTHER_WEIGHT))
        return out

    def refit(self) -> Correction:
        self._new = 0
        self.correction = fit(self.samples())
        self.groups_fit = gc.fit(self.candidates())
        self.fits += 1
        return self.correction
