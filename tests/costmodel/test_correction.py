"""The learned correction on synthetic data: it finds a known multiplicative error (and then
ranks held-out points better than the analytic model), and falls back to the analytic model
where there is nothing to learn.  Its features come from real cost breakdowns."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from costmodel import estimate
from costmodel.correction import Correction, CorrectionKind, Sample, cross_predict, fit, predict
from costmodel.features import FEATURES, features
from costmodel.devices import CPU_DEFAULT
from costmodel.ranking import spearman_rho
from search_spaces.kernel import KernelBounds
from search_spaces.space import SearchSpace, TileBounds

P = len(FEATURES)
LIB, MEM = FEATURES.index("library_share"), FEATURES.index("loop_memory_share")


def synthetic(n: int, seed: int, effect: float, noise: float = 0.05) -> list[Sample]:
    """Analytic times spread over a decade; measured = analytic x exp(effect x (feature
    LIB - feature MEM)) x noise: a multiplicative error the features explain."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, P))
    analytic = np.exp(rng.uniform(-3, 0, n))
    measured = analytic * np.exp(effect * (x[:, LIB] - x[:, MEM]) + noise * rng.normal(size=n))
    return [Sample(tuple(x[i]), float(analytic[i]), float(measured[i]), 1.0, "w")
            for i in range(n)]


def ranks(corr: Correction, held: list[Sample]) -> tuple[float, float]:
    """Spearman's rho of the analytic and of the corrected times against the measured ones."""
    meas = [s.measured_s for s in held]
    return (spearman_rho([s.analytic_s for s in held], meas),
            spearman_rho([predict(corr, s.features, s.analytic_s) for s in held], meas))


def test_a_known_multiplicative_error_is_learnt_and_ranks_held_out_points_better():
    corr = fit(synthetic(60, seed=1, effect=1.0))
    assert corr.kind == CorrectionKind.RIDGE and corr.active and corr.reason == "fitted"
    assert corr.cv_mse < 0.2 * corr.cv_mse_analytic and corr.cv_rho > corr.cv_rho_analytic
    held = synthetic(80, seed=2, effect=1.0)           # points the fit never saw
    rho_analytic, rho_corrected = ranks(corr, held)
    assert rho_corrected > 0.9 > rho_analytic + 0.2
    # the learnt coefficients point the way of the error: LIB up, MEM down, others small
    coef = np.array(corr.coef) / np.array(corr.scale)
    assert coef[LIB] > 0.8 and coef[MEM] < -0.8
    assert max(abs(c) for i, c in enumerate(coef) if i not in (LIB, MEM)) < 0.2


def test_no_error_to_learn_falls_back_to_the_analytic_model():
    for seed in range(5):
        corr = fit(synthetic(60, seed=seed, effect=0.0, noise=0.2))
        assert corr.kind == CorrectionKind.ANALYTIC and not corr.active, corr.reason
        assert "no held-out gain" in corr.reason or "ranking no better" in corr.reason
        x = synthetic(1, seed=99, effect=0.0)[0]
        assert predict(corr, x.features, x.analytic_s) == x.analytic_s    # exactly analytic


def test_too_few_or_unusable_samples_fall_back():
    few = synthetic(9, seed=3, effect=1.0)
    assert fit(few).reason == "too few measured candidates (9 < 10)"
    bad = [Sample((math.nan,) * P, 1.0, 1.0)] * 20 + [Sample((0.0,) * P, 1.0, -1.0)] * 20 + \
        [Sample((0.0,) * 3, 1.0, 1.0)] * 20
    assert fit(bad).samples == 0 and not fit(bad).active


def test_a_global_scale_alone_does_not_switch_the_correction_on():
    """Measured = 3 x analytic with noise: nothing a feature explains, rankings unchanged."""
    s = synthetic(60, seed=4, effect=0.0, noise=0.2)
    scaled = [Sample(x.features, x.analytic_s, 3 * x.measured_s, 1.0, "w") for x in s]
    assert not fit(scaled).active


def test_a_feature_that_only_tells_workloads_apart_is_not_learnt():
    """Two workloads off by different factors (e^2 and e^-2), a feature that differs between
    them but says nothing within either: nothing for ranking candidates of one workload, so
    no correction (a fit across workloads would have "explained" the offsets with it)."""
    rng = np.random.default_rng(8)
    samples = []
    for group, offset in (("a", 2.0), ("b", -2.0)):
        for _ in range(30):
            x = rng.normal(size=P)
            x[LIB] = offset / 2 + 0.1 * rng.normal()
            a = float(np.exp(rng.uniform(-3, 0)))
            samples.append(Sample(tuple(x), a, a * float(np.exp(offset + 0.2 * rng.normal())),
                                  1.0, group))
    corr = fit(samples)
    assert not corr.active, corr.reason
    # the same data with the effect inside each workload is learnt
    within = [Sample(s.features, s.analytic_s,
                     s.measured_s * float(np.exp(1.0 * (s.features[MEM]))), 1.0, s.group)
              for s in samples]
    assert fit(within).active


def test_predictions_are_clipped_and_the_record_round_trips_through_json():
    corr = fit(synthetic(60, seed=5, effect=1.0))
    far = tuple([0.0] * LIB + [1e6] + [0.0] * (P - LIB - 1))   # far outside the training data
    assert predict(corr, far, 1.0) == pytest.approx(math.exp(corr.clip[1]))
    back = Correction.from_dict(json.loads(json.dumps(corr.to_dict())))
    assert back == corr and back.kind is CorrectionKind.RIDGE
    stale = Correction.from_dict({**corr.to_dict(), "features": ["something", "else"]})
    assert not stale.active and predict(stale, far, 2.0) == 2.0
    assert predict(corr, far, math.inf) == math.inf


def test_cross_prediction_never_scores_a_point_with_a_fit_that_saw_it():
    s = synthetic(40, seed=6, effect=1.0)
    # a poisoned copy of one sample in ``extra`` would not matter: the point itself is what
    # each fold leaves out.  Every fold is fitted on the other 4/5 of the points.
    pred, fitted = cross_predict(s, folds=5, seed=0)
    assert len(pred) == 40 and len(fitted) == 5 and all(c.samples == 32 for c in fitted)
    meas = [x.measured_s for x in s]
    assert spearman_rho(pred, meas) > spearman_rho([x.analytic_s for x in s], meas) + 0.2
    extra = synthetic(30, seed=7, effect=1.0)
    _, fitted = cross_predict(s, extra, folds=4, seed=0)
    assert all(c.samples == 30 + 30 for c in fitted)
    assert cross_predict([], folds=5) == ([], [])


@pytest.mark.parametrize("name", ["gated_mlp", "trimul_outgoing", "attention"])
def test_features_of_real_breakdowns_are_finite_and_vary(small, name):
    w = small(name)
    space = SearchSpace(w)
    rng = np.random.default_rng(0)
    xs = np.array([features(w, estimate(w, space.random(rng), CPU_DEFAULT), CPU_DEFAULT)
                   for _ in range(30)])
    assert xs.shape == (30, P) and np.isfinite(xs).all()
    shares = xs[:, [LIB, MEM, FEATURES.index("recompute_share"), FEATURES.index("loop_reduction_share"),
                    FEATURES.index("occupancy")]]
    assert (shares >= 0).all() and (shares <= 1 + 1e-9).all()
    assert xs[:, FEATURES.index("log_analytic_s")].std() > 0


def test_features_of_kernel_candidates(small):
    """Kernel groups (with and without epilogues) count as neither library nor loop time."""
    w = small("trimul_outgoing")
    space = SearchSpace(w, TileBounds(1, 256, KernelBounds()))
    rng = np.random.default_rng(1)
    xs = np.array([features(w, estimate(w, space.random(rng), CPU_DEFAULT), CPU_DEFAULT)
                   for _ in range(30)])
    assert np.isfinite(xs).all()
    kern = xs[:, FEATURES.index("kernel_share")]
    assert (kern >= 0).all() and (kern <= 1 + 1e-9).all() and kern.max() > 0 and kern.min() == 0
    assert (kern + xs[:, LIB] <= 1 + 1e-9).all()
