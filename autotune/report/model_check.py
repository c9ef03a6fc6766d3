"""``autotune model-check``: how well the cost model ranks measured candidates, with and
without the correction learnt from measurements.

    check = run_model_check(load_workload("gated_mlp"), samples=40)
    print(format_table(check))

The named plans and ``samples`` random legal candidates (seeded; with ``within``, only those the
analytic model predicts within that factor of the best named plan) are measured in ``rounds``
interleaved rounds (each round runs every candidate once, shuffled, through the isolated
measuring worker; every run is verified against the float64 reference), and each candidate's
time is the median of its rounds.  A candidate that fails or times out in a round is dropped
from the later ones and left out of the figures (listed with its error).  Then the candidates
the top-1 regrets hinge on (:func:`hinges`: each model's pick and the three fastest) are
measured ``confirm_rounds`` more rounds among themselves, and their times are the medians of
all their rounds (:mod:`autotune.report.check_rounds` says why).

The corrected predictions are cross-fitted: the candidates are dealt to ``folds`` folds, and
each fold is predicted by a correction fitted on the other folds plus the plan database's
measured trials of this device (those of the checked candidates left out), so no candidate is
scored by a fit that saw it.  The correction is the one a search uses: group by group
(:mod:`costmodel.group_correction`) when the backend timed every scored candidate's groups
(the CPU backend does), on the totals (:mod:`costmodel.correction`) otherwise.  The figures
(:mod:`costmodel.ranking`): Spearman's rho, Kendall's tau, the median absolute log error and the top-1 regret, each for the analytic and the
corrected predictions.  The measurements are stored in the plan database as trials of the
study ``model-check`` (their median, every round's time, both predictions), so later fits and
searches use them.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from typing import Callable

import numpy as np

from costmodel.correction import Sample, cross_fitted, fit, predict
from costmodel.group_correction import CandidateObs, GroupObs
from costmodel.group_correction import fit as group_fit
from costmodel.group_correction import predict as group_predict
from costmodel.ranking import kendall_tau, median_abs_log_error, spearman_rho, top1_regret
from db.keys import PlanKey
from db.records import Status, TrialOutcome
from search_spaces.candidate import Candidate
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace
from search_spaces.workload import Workload

from autotune.backends.base import MeasureSettings
from autotune.report.check_rounds import FIRST, State, confirm, measure_rounds
from autotune.search.learning import Learner

STUDY = "model-check"
CONFIRM_TOP = 3                  # the fastest this many are confirmed, beside each model's pick
FIGURES = ("spearman_rho", "kendall_tau", "median_abs_log_error", "top1_regret")


@dataclass(frozen=True)
class CheckedCandidate:
    """One candidate of the check: its predictions, its round times, what became of it."""
    name: str
    key: str
    status: Status
    predicted_s: float
    corrected_s: float | None = None       # cross-fitted; None when not measured
    ranked_s: float | None = None          # corrected_s with its fold's scale divided out
    measured_s: float | None = None        # median over the rounds
    times: tuple[float, ...] = ()
    error: str = ""
    confirmed: bool = False                # measured in the confirmation's rounds too

    def to_dict(self) -> dict:
        return {**asdict(self), "status": str(self.status), "times": list(self.times)}


@dataclass(frozen=True)
class ModelCheck:
    """What ``autotune model-check`` found; :meth:`to_dict` is its JSON (the figures at the
    top level, None where undefined)."""
    workload: str
    dims: dict
    device: str
    device_name: str
    samples: int                     # candidates measured and scored
    candidates: int                  # candidates chosen (named plans included)
    rounds: int
    confirm_rounds: int              # more rounds of the candidates the figures hinge on
    folds: int
    db_samples: int                  # plan-DB samples each fold's fit also used
    figures: dict                    # FIGURES and their ``_corrected`` twins -> float | None
    fold_corrections: tuple[str, ...]  # each fold's correction: its kind and reason
    correction: dict                 # the fit on everything (what a search would start from)
    points: tuple[CheckedCandidate, ...]

    def to_dict(self) -> dict:
        d = {k: v for k, v in asdict(self).items() if k not in ("figures", "points")}
        return {**d, **self.figures, "fold_corrections": list(self.fold_corrections),
                "points": [p.to_dict() for p in self.points]}


def _finite(v: float) -> float | None:
    return float(v) if v is not None and math.isfinite(v) else None


def figures(predicted, corrected, measured, ranked=None) -> dict:
    """The figures of the analytic and the corrected predictions against the measurements;
    the rank figures of the corrected ones from ``ranked`` where given (the cross-fitted
    predictions, each with its fold's scale divided out: see :func:`score`)."""
    out = {}
    for suffix, pred in (("", predicted), ("_corrected", corrected)):
        m = np.asarray(measured, dtype=float)
        for name, fn in zip(FIGURES, (spearman_rho, kendall_tau, median_abs_log_error,
                                      top1_regret)):
            use = ranked if suffix and ranked is not None and name != "median_abs_log_error" \
                else pred
            p = np.asarray(use, dtype=float)
            out[name + suffix] = _finite(fn(p, m)) if len(p) else None
    return out


def choose(w: Workload, space: SearchSpace, predict: Callable[[Candidate], float],
           samples: int, seed: int, within: float | None = None) -> list[Candidate]:
    """The named plans, then ``samples`` distinct random legal candidates (with ``within``:
    predicted at most that many times the best named plan's prediction)."""
    named = [named_plan(space, n) for n in FIRST]
    seen = {c.key for c in named}
    bar = within * min(predict(c) for c in named) if within else math.inf
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(max(200 * samples, 1000)):
        if len(out) >= samples:
            break
        c = space.random(rng)
        if c.key in seen or not predict(c) <= bar:
            continue
        seen.add(c.key)
        out.append(c)
    return named + out


def hinges(points) -> set[str]:
    """The keys the top-1 regrets hinge on: the analytic and the corrected pick (the first of
    equal predictions, as :func:`costmodel.ranking.top1_regret` takes it) and the
    :data:`CONFIRM_TOP` fastest measured."""
    ok = [p for p in points if p.status == Status.OK and p.measured_s is not None]
    if not ok:
        return set()
    keys = {min(ok, key=lambda p: p.predicted_s).key}
    if all(p.ranked_s is not None for p in ok):
        keys.add(min(ok, key=lambda p: p.ranked_s).key)
    return keys | {p.key for p in sorted(ok, key=lambda p: p.measured_s)[:CONFIRM_TOP]}


def group_medians(rounds: list[dict]) -> dict[str, float]:
    """Each group's median seconds over the rounds that timed it."""
    anchors = {a for r in rounds for a in r}
    return {a: float(np.median([r[a] for r in rounds if a in r])) for a in sorted(anchors)}


def score(w: Workload, cands, predicted: dict, state: State, learner: Learner, folds: int,
          seed: int, confirmed: frozenset[str] = frozenset()):
    """(points, figures, fold corrections, the correction fitted on everything, the DB's
    samples each fold also used).  Group by group (:mod:`costmodel.group_correction`) when
    the backend timed every scored candidate's groups, as a search would; on the totals
    otherwise.  ``confirmed``: the keys the confirmation measured (marked in the points).

    Each fold's fit carries its own scale from measured to analytic time (its ``level``: the
    fallback's median ratio, a ridge's intercept), learnt from its own training candidates, and
    pooling predictions of five fits whose scales differ by a few percent reorders candidates
    that are that close, which one fit in a search never does (five folds whose fits all fell
    back to the analytic ranking scored rho 0.923 against the analytic 0.931).  So the rank
    figures (rho, tau, regret) compare the cross-fitted predictions with each fold's level
    divided out (``ranked_s``: folds that fell back then rank exactly as the analytic model);
    the log error keeps the measured scale (``corrected_s``)."""
    ok = [c for c in cands if state[c.key][0] == Status.OK and state[c.key][1]]
    measured = {c.key: float(np.median(state[c.key][1])) for c in ok}
    exclude = frozenset((w.hash, c.key) for c in cands)
    samples = [Sample(learner.features(c), predicted[c.key], measured[c.key], 1.0, w.hash)
               for c in ok]
    obs = [CandidateObs(c.key, w.hash, predicted[c.key], measured[c.key], tuple(
        GroupObs(g.signature, g.features, g.analytic_s, group_medians(state[c.key][3]).get(a))
        for a, g in learner.group_obs(c))) for c in ok]
    if ok and all(o.timed for o in obs):
        extra = learner.candidates(exclude)
        pairs, fitted = cross_fitted(obs, extra, folds, seed, group_fit,
                                     lambda f, o: (group_predict(f, o), f.level))
        overall = group_fit(obs + extra)
    else:
        extra = learner.samples(exclude)
        pairs, fitted = cross_fitted(
            samples, extra, folds, seed, fit,
            lambda f, s: (predict(f, s.features, s.analytic_s), f.level))
        overall = fit(samples + extra)
    corrected = [q for q, _ in pairs]
    ranked = [q * math.exp(-level) for q, level in pairs]
    by_key = {c.key: (q, r) for c, q, r in zip(ok, corrected, ranked)}
    points = []
    for c in cands:
        status, times, error, _ = state[c.key]
        scored = c.key in by_key
        q, r = by_key.get(c.key, (None, None))
        points.append(CheckedCandidate(c.name, c.key, status if scored else Status.FAILED,
                                       predicted[c.key], q, r, measured.get(c.key), tuple(times),
                                       error or ("" if scored else "not measured"),
                                       c.key in confirmed))
    figs = figures([s.analytic_s for s in samples], corrected, [s.measured_s for s in samples],
                   ranked)
    notes = tuple(f"{c.kind}: {c.reason}" for c in fitted)
    return points, figs, notes, overall, len(extra)


def run_model_check(w: Workload, device: str = "cpu", db=None, samples: int = 40,
                    rounds: int = 3, folds: int = 5, seed: int = 0, within: float | None = None,
                    log: Callable[[str], None] | None = None, confirm_rounds: int = 5
                    ) -> ModelCheck:
    """Measure, confirm, cross-fit and score (see the module doc); the measurements go to the
    DB."""
    from autotune.api import cache_root, open_db
    from autotune.backends.factory import backend_kind, resolve
    say = log or (lambda s: None)
    env = resolve(device)
    kind = backend_kind(env.kind)
    dev = kind.device_spec(env)
    space = SearchSpace(w, kind.tile_bounds)
    store = open_db(db)
    try:
        key = PlanKey.for_env(w.hash, env)
        learner = Learner(w, dev)
        learner.load(store, key)
        cands = choose(w, space, lambda c: learner.predict(c)[0].total_s, samples, seed, within)
        predicted = {c.key: learner.predict(c)[0].total_s for c in cands}
        others = len(learner.samples(exclude=frozenset((w.hash, c.key) for c in cands)))
        say(f"{w.name}: {len(cands)} candidates ({len(cands) - len(FIRST)} random + "
            f"{len(FIRST)} named), {rounds} rounds; {others} other measured candidates "
            f"of this device in {store.path}")
        backend = kind.backend(w, seed, cache_root(store.path), MeasureSettings(repeats=1))
        try:
            state = measure_rounds(backend, cands, rounds, seed, kind.min_timeout_s, say)
            confirmed = confirm(
                backend, cands, state,
                lambda st: hinges(score(w, cands, predicted, st, learner, folds, seed)[0]),
                confirm_rounds, seed, kind.min_timeout_s, say)
        finally:
            backend.close()
        points, figs, notes, overall, n_extra = score(
            w, cands, predicted, state, learner, folds, seed, confirmed)
        store.add_workload(w.hash, w.name, json.dumps(w.canonical(), sort_keys=True))
        for c, p in zip(cands, points):
            store.append_trial(key, STUDY, TrialOutcome(
                candidate=c, status=p.status, predicted_s=p.predicted_s,
                measured_s=p.measured_s, error=p.error or None, times=p.times,
                corrected_s=p.corrected_s,
                groups=tuple(group_medians(state[c.key][3]).items())
                if p.status == Status.OK else ()))
    finally:
        store.close()
    return ModelCheck(w.name, dict(w.dims), env.kind, env.name,
                      sum(p.status == Status.OK for p in points), len(cands), rounds,
                      confirm_rounds if confirmed else 0, max(1, min(folds, len(points))), n_extra, figs, notes,
                      overall.to_dict(), tuple(points))


def format_table(mc: ModelCheck) -> str:
    """The figures side by side, then what was measured and fitted."""
    dims = ",".join(f"{k}={v}" for k, v in mc.dims.items())
    lines = [f"{mc.workload} {dims} on {mc.device_name}: {mc.samples} of {mc.candidates} "
             f"candidates measured ({mc.rounds} interleaved rounds, medians); corrections "
             f"cross-fitted over {mc.folds} folds + {mc.db_samples} other trials of the DB",
             f"confirmed: {sum(p.confirmed for p in mc.points)} candidates (each model's pick "
             f"and the fastest) over {mc.confirm_rounds} more rounds",
             f"{'':24s}{'analytic':>12s}{'corrected':>12s}"]
    for name in FIGURES:
        a, c = mc.figures[name], mc.figures[name + "_corrected"]
        fmt = (lambda v: "-" if v is None else f"{100 * v:.1f} %") if name == "top1_regret" \
            else (lambda v: "-" if v is None else f"{v:.3f}")
        lines.append(f"{name:24s}{fmt(a):>12s}{fmt(c):>12s}")
    kinds = sorted(set(n.split(":")[0] for n in mc.fold_corrections))
    lines.append(f"fold corrections: {', '.join(kinds)}; fit on all: "
                 f"{mc.correction['kind']} ({mc.correction['reason']})")
    failed = [p for p in mc.points if p.status != Status.OK]
    for p in failed:
        lines.append(f"  not scored: {p.name or p.key[:12]}: {p.error}")
    return "\n".join(lines)
