"""A correction of the analytic model learnt group by group.  Pure NumPy, no I/O.

A plan runs its fused groups one after the other, and the CPU backend times each of them, so
a measured candidate teaches one residual per group instead of one for its sum: which group
the analytic model misprices is seen, not guessed from shares of a total (the candidate-level
correction, :mod:`costmodel.correction`, is what is left where groups are not timed).  A
candidate's corrected time is

    sum over its groups of (the group's measured median, when a group of the same signature
    was measured -- the same code -- else analytic_g * exp(ridge(features_g)))
    + the part of the analytic total outside its groups
    + the glue between groups (per group, the median over this workload's measured candidates
      of (measured total - sum of its groups - that analytic part) / groups).

The ridge is fitted on ``ln(measured_g / analytic_g)`` of every timed group, weighted by the
group's share of its candidate's time (a group of microseconds times noisily and matters
little), features standardised, the penalty chosen by the closed-form leave-one-out error.
The fit is used only when its leave-one-candidate-out predictions (every group of the left-out
candidate removed from the ridge, the signatures and the glue; beyond ``HOLDOUT_FOLDS``
candidates, that many folds instead) rank the candidates better than the analytic times, within each workload, by ``RANK_GAIN``; otherwise :func:`fit` returns the
analytic fallback.  Log-factors are clipped to the residuals seen, widened by ``CLIP_WIDEN``.
"""
from __future__ import annotations

import functools
import math
import statistics
from dataclasses import asdict, dataclass

import numpy as np

from .correction import cross_fitted
from .group_features import GROUP_FEATURES
from .ranking import spearman_rho

MIN_CANDIDATES = 8
RANK_GAIN = 0.0         # any held-out gain: the fit also brings the scale, the glue, the memo
CLIP_WIDEN = math.log(2.0)
SHARE_FLOOR = 0.02          # a group's least weight, as a share of its candidate's time
ALPHAS = tuple(float(a) for a in np.logspace(-3, 3, 13))
HOLDOUT_FOLDS = 50


@dataclass(frozen=True)
class GroupObs:
    """One group of a candidate: its signature, features, analytic and measured seconds
    (None where it was not timed)."""
    signature: str
    features: tuple[float, ...]
    analytic_s: float
    measured_s: float | None = None


@dataclass(frozen=True)
class CandidateObs:
    """One candidate for the group-level fit: ``key`` unique over the fit (workload hash and
    candidate key), ``group`` its workload (rankings are compared within one), the analytic
    total, the measured total (None: not measured) and its groups."""
    key: str
    group: str
    analytic_s: float
    measured_s: float | None
    groups: tuple[GroupObs, ...]
    weight: float = 1.0

    @property
    def timed(self) -> bool:
        """Measured, and every group timed."""
        return (self.measured_s is not None and self.measured_s > 0 and bool(self.groups)
                and all(g.measured_s is not None and g.measured_s > 0 for g in self.groups))


@dataclass(frozen=True)
class GroupCorrection:
    """A fitted group-level correction, frozen and JSON-serialisable (:meth:`to_dict`); the
    default instance is the analytic fallback.  ``cv_rho``/``cv_rho_analytic``: Spearman's rho
    within workloads of the leave-one-candidate-out predictions and of the analytic times."""
    active: bool = False
    features: tuple[str, ...] = GROUP_FEATURES
    mean: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    coef: tuple[float, ...] = ()
    intercept: float = 0.0
    alpha: float = 0.0
    clip: tuple[float, float] = (0.0, 0.0)
    memo: tuple[tuple[str, float], ...] = ()       # signature -> measured median seconds
    glue: tuple[tuple[str, float], ...] = ()       # workload -> seconds per group
    candidates: int = 0
    cv_rho: float | None = None
    cv_rho_analytic: float | None = None
    reason: str = "not fitted"
    # the fallback's one scale (the median of ln(measured / analytic) of the totals): ranks as
    # the analytic model does, on the measured scale (so that the predictions of folds where
    # the fit is used and of folds where it is not can be pooled)
    log_scale: float = 0.0

    @property
    def kind(self) -> str:
        return "groups" if self.active else "analytic"

    @property
    def level(self) -> float:
        """ln of the one factor that puts this fit's predictions on the measured scale over the
        analytic one (``log_scale``, fitted or not).  Rankings ignore it; predictions of several
        fits are put on one scale by dividing it out."""
        return self.log_scale

    @functools.cached_property
    def lookup(self) -> tuple[dict[str, float], dict[str, float]]:
        """(signature -> seconds, workload -> glue seconds per group) as dicts, built once."""
        return dict(self.memo), dict(self.glue)

    def to_dict(self) -> dict:
        d = asdict(self)
        return {"kind": self.kind,
                **{k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}}


def _log_factor(c: GroupCorrection, x) -> float:
    z = (np.asarray(x, dtype=float) - np.asarray(c.mean)) / np.asarray(c.scale)
    return float(min(max(c.intercept + float(z @ np.asarray(c.coef)), c.clip[0]), c.clip[1]))


def predict(c: GroupCorrection, cand: CandidateObs) -> float:
    """The corrected seconds of ``cand`` (its analytic total times the fallback's scale under
    the fallback, or when it has no groups)."""
    if not c.active or not cand.groups or tuple(c.features) != GROUP_FEATURES:
        return cand.analytic_s * math.exp(c.log_scale)
    memo, glue = c.lookup
    total = cand.analytic_s - sum(g.analytic_s for g in cand.groups)
    for g in cand.groups:
        total += memo[g.signature] if g.signature in memo else \
            g.analytic_s * math.exp(_log_factor(c, g.features))
    return max(total + glue.get(cand.group, 0.0) * len(cand.groups), 1e-12)


# ---- fitting ----------------------------------------------------------------------------------
def _rows(cands: list[CandidateObs]):
    x, r, wt, owner = [], [], [], []
    for i, c in enumerate(cands):
        total = sum(g.measured_s for g in c.groups)
        for g in c.groups:
            x.append(g.features)
            r.append(math.log(g.measured_s / max(g.analytic_s, 1e-12)))
            wt.append(c.weight * max(g.measured_s / total, SHARE_FLOOR))
            owner.append(i)
    return (np.array(x, dtype=float), np.array(r), np.array(wt), np.array(owner))


def _ridge(z, r, wt, alpha, loo: bool = True):
    """(intercept, coefficients, leave-one-out residuals or None) of weighted ridge, intercept
    free."""
    sw = wt.sum()
    rbar = float(wt @ r) / sw
    rc = r - rbar
    zw = z * wt[:, None]
    inv = np.linalg.inv(z.T @ zw + alpha * np.eye(z.shape[1]))
    beta = inv @ (zw.T @ rc)
    if not loo:
        return rbar, beta, None
    lev = wt * ((z @ inv) * z).sum(axis=1) + wt / sw
    return rbar, beta, (rc - z @ beta) / np.maximum(1 - lev, 1e-9)


def _standardise(x, wt):
    sw = wt.sum()
    mean = (wt @ x) / sw
    sd = np.sqrt((wt @ (x - mean) ** 2) / sw)
    sd = np.where(sd > 1e-12, sd, 1.0)
    return mean, sd


def _build(cands: list[CandidateObs], alpha: float | None = None) -> GroupCorrection:
    """The correction fitted on ``cands`` (all timed); ``alpha`` None: chosen by LOO."""
    x, r, wt, _ = _rows(cands)
    mean, sd = _standardise(x, wt)
    z = (x - mean) / sd
    sw = wt.sum()
    if alpha is None:
        best = None
        for a in ALPHAS:
            _, _, loo = _ridge(z, r, wt, a * sw)
            mse = float(wt @ loo ** 2) / sw
            if best is None or mse < best[0]:
                best = (mse, a * sw)
        alpha = best[1]
    rbar, beta, _ = _ridge(z, r, wt, alpha, loo=False)
    memo: dict[str, list[float]] = {}
    glue: dict[str, list[float]] = {}
    for c in cands:
        for g in c.groups:
            memo.setdefault(g.signature, []).append(g.measured_s)
        outside = c.analytic_s - sum(g.analytic_s for g in c.groups)     # predicted anyway
        glue.setdefault(c.group, []).append(
            (c.measured_s - sum(g.measured_s for g in c.groups) - outside) / len(c.groups))
    return GroupCorrection(
        active=True, mean=tuple(map(float, mean)), scale=tuple(map(float, sd)),
        coef=tuple(map(float, beta)), intercept=rbar, alpha=float(alpha),
        clip=(float(r.min() - CLIP_WIDEN), float(r.max() + CLIP_WIDEN)),
        memo=tuple((s, float(statistics.median(v))) for s, v in sorted(memo.items())),
        glue=tuple((k, float(statistics.median(v))) for k, v in sorted(glue.items())),
        candidates=len(cands), reason="fitted")


def _ranking(pred, cands: list[CandidateObs]) -> float | None:
    """Spearman's rho of ``pred`` against the measured totals within each workload of three or
    more candidates, averaged weighted by their counts."""
    total, acc = 0, 0.0
    for grp in {c.group for c in cands}:
        idx = [i for i, c in enumerate(cands) if c.group == grp]
        if len(idx) < 3:
            continue
        rho = spearman_rho([pred[i] for i in idx], [cands[i].measured_s for i in idx])
        if not math.isnan(rho):
            acc += len(idx) * rho
            total += len(idx)
    return acc / total if total else None


def fit(cands, min_candidates: int = MIN_CANDIDATES) -> GroupCorrection:
    """Fit on the timed candidates of ``cands`` (see the module doc); the analytic fallback
    when there are too few or the fit does not rank held-out candidates better."""
    timed = [c for c in cands if c.timed and all(map(math.isfinite, (
        f for g in c.groups for f in g.features)))]
    if len(timed) < min_candidates:
        return GroupCorrection(candidates=len(timed), reason=f"too few candidates with timed "
                               f"groups ({len(timed)} < {min_candidates})")
    full = _build(timed)
    # held-out predictions: leave one candidate out, or one of HOLDOUT_FOLDS folds when there
    # are more (a search that loads thousands of trials refits in well under a second)
    k = min(len(timed), HOLDOUT_FOLDS)
    held = [0.0] * len(timed)
    for f in range(k):
        fit_f = _build([c for i, c in enumerate(timed) if i % k != f], full.alpha)
        for i in range(f, len(timed), k):
            held[i] = predict(fit_f, timed[i])
    rho = _ranking(held, timed)
    rho_analytic = _ranking([c.analytic_s for c in timed], timed)
    scale = float(np.median([math.log(c.measured_s / c.analytic_s) for c in timed]))
    figures = dict(candidates=len(timed), cv_rho=rho, cv_rho_analytic=rho_analytic,
                   log_scale=scale)
    if rho is None or rho_analytic is None or rho < rho_analytic + RANK_GAIN:
        return GroupCorrection(**figures, reason=f"held-out ranking no better (rho "
                               f"{rho if rho is None else round(rho, 3)} against "
                               f"{rho_analytic if rho_analytic is None else round(rho_analytic, 3)})")
    return GroupCorrection(**{**asdict(full), **figures})


def cross_predict(cands, extra=(), folds: int = 5, seed: int = 0
                  ) -> tuple[list[float], list[GroupCorrection]]:
    """Corrected seconds of every candidate of ``cands``, each from a fit WITHOUT it (dealt to
    ``folds`` seeded folds; each fold predicted by a fit on the others plus ``extra``)."""
    return cross_fitted(cands, extra, folds, seed, fit, predict)
