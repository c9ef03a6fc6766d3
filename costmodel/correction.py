"""A correction of the analytic model learnt from measurements.  Pure NumPy, no I/O.

The analytic model (:mod:`costmodel.model`) is a roofline per group with rates from a device
spec; what it leaves out (cache effects it does not model, a generated loop that vectorises
worse than assumed, the true cost of a transposing copy) shows as a residual
``ln(measured / analytic)`` that depends on what the candidate spends its time on.  The
correction predicts that residual from features of the cost breakdown
(:func:`costmodel.features.features`) with ridge
regression, and multiplies the analytic time by ``exp(residual)``:

* the coefficients are learnt from the variation within each workload (residuals and features
  centred per workload: a workload whose times are all off by one factor says nothing about
  which of its candidates is faster), features standardised, the penalty chosen by exact
  leave-one-out cross-validation (the closed form of ridge: residual / (1 - leverage), the
  workload means counted in the leverage); the intercept is the mean residual;
* the fit is used only when it helps on held-out points: its leave-one-out error must beat
  a scale per workload (the analytic ranking) by ``MARGIN`` and by ``SIGNIFICANCE``
  standard errors of the paired per-sample differences, and its leave-one-out predictions must
  rank the measurements (Spearman, within each workload) better than the analytic times do, by
  ``RANK_GAIN`` (pruning and proposals use rankings only).  Otherwise :func:`fit` returns the
  analytic fallback, whose :func:`predict` is the analytic time itself;
* a prediction's log-factor is clipped to the range of residuals seen in training (widened by
  ``CLIP_WIDEN``): a candidate unlike anything measured is not extrapolated to absurd times.

Callers give one :class:`Sample` per distinct (workload, candidate), its measurements merged:
a candidate present twice would leak into its own held-out prediction.
"""
from __future__ import annotations

import enum
import math
from dataclasses import asdict, dataclass

import numpy as np

from .features import FEATURES
from .ranking import spearman_rho

MIN_SAMPLES = 10
MARGIN = 0.05                # held-out error must drop by 5 % to trust a fit ...
SIGNIFICANCE = 1.0           # ... and by more than this many standard errors of the drop,
RANK_GAIN = 0.02             # and held-out rho must gain this much (what pruning relies on)
CLIP_WIDEN = math.log(2.0)
ALPHAS = tuple(float(a) for a in np.logspace(-4, 2, 13))   # x sum of weights


class CorrectionKind(enum.StrEnum):
    """What :func:`predict` does: nothing (the analytic time) or the fitted ridge factor."""
    ANALYTIC = "analytic"
    RIDGE = "ridge"


@dataclass(frozen=True)
class Sample:
    """One measured candidate: its features, analytic and measured seconds, its weight in
    the fit, and its group (the workload's hash: rankings are compared within one)."""
    features: tuple[float, ...]
    analytic_s: float
    measured_s: float
    weight: float = 1.0
    group: str = ""


@dataclass(frozen=True)
class Correction:
    """A fitted correction, frozen and JSON-serialisable (:meth:`to_dict`).  The default
    instance is the analytic fallback.  ``cv_*``: leave-one-out figures of the fit (mean
    squared log error within workloads, Spearman's rho within workloads) beside those of the
    analytic model with one scale per workload; ``reason`` says why it is (not) used."""
    kind: CorrectionKind = CorrectionKind.ANALYTIC
    features: tuple[str, ...] = FEATURES
    mean: tuple[float, ...] = ()
    scale: tuple[float, ...] = ()
    coef: tuple[float, ...] = ()
    intercept: float = 0.0
    alpha: float = 0.0
    clip: tuple[float, float] = (0.0, 0.0)
    samples: int = 0
    cv_mse: float | None = None
    cv_mse_analytic: float | None = None
    cv_rho: float | None = None
    cv_rho_analytic: float | None = None
    reason: str = "not fitted"

    def __post_init__(self):
        object.__setattr__(self, "kind", CorrectionKind(self.kind))

    @property
    def active(self) -> bool:
        """A fitted ridge on today's features (one of other features, read back from an
        older record, corrects nothing)."""
        return self.kind == CorrectionKind.RIDGE and tuple(self.features) == FEATURES

    @property
    def level(self) -> float:
        """ln of the one factor that puts this fit's predictions on the measured scale over the
        analytic one (the intercept, the mean residual; 0 for the fallback).  Rankings ignore
        it; predictions of several fits are put on one scale by dividing it out."""
        return self.intercept if self.active else 0.0

    def log_factor(self, x) -> float:
        """ln(corrected / analytic) for a feature vector ``x``."""
        if not self.active:
            return 0.0
        z = (np.asarray(x, dtype=float) - np.asarray(self.mean)) / np.asarray(self.scale)
        v = self.intercept + float(z @ np.asarray(self.coef))
        return float(min(max(v, self.clip[0]), self.clip[1]))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["kind"] = str(self.kind)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @staticmethod
    def from_dict(d: dict) -> "Correction":
        tup = {"features", "mean", "scale", "coef", "clip"}
        return Correction(**{k: tuple(v) if k in tup else v for k, v in d.items()})


def predict(corr: Correction, x, analytic_s: float) -> float:
    """The corrected seconds of a candidate with features ``x`` and analytic time
    ``analytic_s`` (that time itself when ``corr`` is the analytic fallback or the analytic
    time is not a positive finite number)."""
    if not corr.active or not (math.isfinite(analytic_s) and analytic_s > 0):
        return analytic_s
    return analytic_s * math.exp(corr.log_factor(x))


# ---- fitting ----------------------------------------------------------------------------------
def _usable(samples) -> list[Sample]:
    out = []
    for s in samples:
        if len(s.features) != len(FEATURES) or not all(map(math.isfinite, s.features)):
            continue
        if not (math.isfinite(s.analytic_s) and s.analytic_s > 0 and
                math.isfinite(s.measured_s) and s.measured_s > 0 and s.weight > 0):
            continue
        out.append(s)
    return out


def _ranking(pred_log: np.ndarray, measured: np.ndarray, groups: tuple[str, ...]
             ) -> float | None:
    """Spearman's rho of predictions against measurements within each group of three or
    more samples, averaged weighted by group size; None without such a group."""
    total, acc = 0, 0.0
    for g in set(groups):
        idx = [i for i, h in enumerate(groups) if h == g]
        if len(idx) < 3:
            continue
        rho = spearman_rho(pred_log[idx], np.log(measured[idx]))
        if math.isnan(rho):
            continue
        acc += len(idx) * rho
        total += len(idx)
    return acc / total if total else None


def _ridge_loo(z: np.ndarray, rc: np.ndarray, w: np.ndarray, alpha: float, group_lev: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """(coefficients, leave-one-out residuals) of weighted ridge on group-centred data; the
    unpenalised group means add ``group_lev`` to each point's leverage."""
    zw = z * w[:, None]
    inv = np.linalg.inv(z.T @ zw + alpha * np.eye(z.shape[1]))
    beta = inv @ (zw.T @ rc)
    lev = w * np.einsum("ij,jk,ik->i", z, inv, z) + group_lev
    return beta, (rc - z @ beta) / np.maximum(1 - lev, 1e-9)


def _group_means(v: np.ndarray, w: np.ndarray, groups: tuple[str, ...]) -> np.ndarray:
    """Each row's weighted mean over its group (rows of ``v``, 1-d or 2-d)."""
    out = np.empty_like(v, dtype=float)
    for g in set(groups):
        idx = np.array([i for i, h in enumerate(groups) if h == g])
        out[idx] = (w[idx] @ v[idx]) / w[idx].sum()
    return out


def fit(samples, min_samples: int = MIN_SAMPLES, margin: float = MARGIN) -> Correction:
    """Fit the correction on ``samples`` (see the module doc); the analytic fallback when there
    are too few usable samples or the fit does not help on held-out points.  Groups of one
    sample are left out: they hold no variation within a workload."""
    usable = _usable(samples)
    sizes = {g: sum(s.group == g for s in usable) for g in {s.group for s in usable}}
    usable = [s for s in usable if sizes[s.group] >= 2]
    n = len(usable)
    if n < min_samples:
        return Correction(samples=n, reason=f"too few measured candidates ({n} < {min_samples})")
    x = np.array([s.features for s in usable], dtype=float)
    analytic = np.array([s.analytic_s for s in usable])
    measured = np.array([s.measured_s for s in usable])
    wt = np.array([s.weight for s in usable], dtype=float)
    groups = tuple(s.group for s in usable)
    r = np.log(measured) - np.log(analytic)
    sw = wt.sum()
    totals = {g: float(sum(w for w, h in zip(wt, groups) if h == g)) for g in sizes}
    group_w = np.array([totals[g] for g in groups])
    xc = x - _group_means(x, wt, groups)
    rc = r - _group_means(r, wt, groups)
    sd = np.sqrt((wt @ xc ** 2) / sw)
    sd = np.where(sd > 1e-12, sd, 1.0)
    z = xc / sd
    group_lev = wt / group_w
    base = (rc / (1 - group_lev)) ** 2          # a scale per group only: the analytic ranking
    best = None
    for a in ALPHAS:
        beta, loo = _ridge_loo(z, rc, wt, a * sw, group_lev)
        mse = float(wt @ loo ** 2) / sw
        if best is None or mse < best[0]:
            best = (mse, a * sw, beta, loo)
    mse, alpha, beta, loo = best
    base_mse = float(wt @ base) / sw
    rho = _ranking(np.log(analytic) + r - loo, measured, groups)
    rho_analytic = _ranking(np.log(analytic), measured, groups)
    figures = dict(features=FEATURES, samples=n, cv_mse=mse, cv_mse_analytic=base_mse,
                   cv_rho=rho, cv_rho_analytic=rho_analytic)
    # the gain must be a real one: MARGIN of the baseline's error, and more than SIGNIFICANCE
    # standard errors of the paired per-sample differences (a small noisy sample can show a
    # held-out gain by chance, which a fold of new candidates then does not keep)
    diff = loo ** 2 - base
    n_eff = sw ** 2 / float(wt @ wt)
    se = math.sqrt(float(wt @ (diff - diff @ wt / sw) ** 2) / sw / max(n_eff - 1, 1))
    if not (mse < (1 - margin) * base_mse and mse - base_mse + SIGNIFICANCE * se < 0):
        return Correction(**figures, reason=f"no held-out gain (error {mse:.3g} against "
                                            f"{base_mse:.3g} +- {se:.2g})")
    if rho is not None and rho_analytic is not None and rho < rho_analytic + RANK_GAIN:
        return Correction(**figures, reason=f"held-out ranking no better (rho {rho:.3f} "
                                            f"against {rho_analytic:.3f})")
    rbar = float(wt @ r) / sw
    return Correction(kind=CorrectionKind.RIDGE, mean=tuple(map(float, (wt @ x) / sw)),
                      scale=tuple(map(float, sd)), coef=tuple(map(float, beta)),
                      intercept=rbar, alpha=float(alpha),
                      clip=(float(r.min() - CLIP_WIDEN), float(r.max() + CLIP_WIDEN)),
                      reason="fitted", **figures)


def cross_fitted(items, extra, folds: int, seed: int, fit_fn, predict_fn
                 ) -> tuple[list[float], list]:
    """``predict_fn(fit, item)`` of every item from a fit WITHOUT it: the items are dealt to
    ``folds`` folds (seeded), and each fold is predicted by ``fit_fn`` of the other folds plus
    ``extra`` (never scored).  Returns (predictions in the order of ``items``, each fold's fit).
    One dealing for the candidate-level and the group-level corrections."""
    items = list(items)
    n = len(items)
    if n == 0:
        return [], []
    k = max(1, min(folds, n))
    fold_of = np.random.default_rng(seed).permutation(n) % k
    out = [math.nan] * n
    fitted = []
    for f in range(k):
        corr = fit_fn([s for i, s in enumerate(items) if fold_of[i] != f] + list(extra))
        fitted.append(corr)
        for i in np.flatnonzero(fold_of == f):
            out[i] = predict_fn(corr, items[i])
    return out, fitted


def cross_predict(samples, extra=(), folds: int = 5, seed: int = 0
                  ) -> tuple[list[float], list[Correction]]:
    """Corrected seconds of every sample, each from a correction fitted WITHOUT it: the
    samples are dealt to ``folds`` folds (seeded), and each fold is predicted by a fit on the
    other folds plus ``extra`` (samples never scored, such as the plan DB's other trials).
    Returns (predictions in the order of ``samples``, the correction of each fold)."""
    return cross_fitted(samples, extra, folds, seed, fit,
                        lambda corr, s: predict(corr, s.features, s.analytic_s))
