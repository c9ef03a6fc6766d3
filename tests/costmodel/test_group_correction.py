"""The group-level correction on synthetic candidates: what it learns, what it refuses, and
that a held-out candidate is never predicted from its own measurement."""
from __future__ import annotations

import math

import numpy as np
import pytest

from costmodel import group_correction as gc
from costmodel.group_features import GROUP_FEATURES
from costmodel.ranking import spearman_rho

FLAG = GROUP_FEATURES.index("kernel_unpacked_b")
SCALE = GROUP_FEATURES.index("log_predicted_s")


def group(rng, i: int, flag: bool, factor: float, noise: float, sig: str | None = None):
    analytic = float(rng.uniform(0.01, 0.1))
    x = [0.0] * len(GROUP_FEATURES)
    x[FLAG] = float(flag)
    x[SCALE] = math.log(analytic)
    measured = analytic * (factor if flag else 1.0) * float(rng.lognormal(0, noise))
    return gc.GroupObs(sig or f"g{i}", tuple(x), analytic, measured)


def candidates(n: int, factor: float = 3.0, noise: float = 0.02, seed: int = 0,
               glue: float = 0.0):
    rng = np.random.default_rng(seed)
    out = []
    for c in range(n):
        groups = tuple(group(rng, 10 * c + k, bool(rng.integers(2)), factor, noise)
                       for k in range(4))
        total = sum(g.analytic_s for g in groups)
        out.append(gc.CandidateObs(f"c{c}", "w", total + 0.001,
                                   sum(g.measured_s for g in groups) + glue * len(groups),
                                   groups))
    return out


def test_a_factor_of_one_kind_of_group_is_learnt_and_ranks_held_out_candidates():
    """Groups with the flag run 3x their analytic time: the analytic totals rank the candidates
    poorly, the cross-fitted group correction almost perfectly."""
    cands = candidates(40)
    pred, fits = gc.cross_predict(cands, folds=5)
    measured = [c.measured_s for c in cands]
    analytic = spearman_rho([c.analytic_s for c in cands], measured)
    assert all(f.active for f in fits)
    assert spearman_rho(pred, measured) > 0.95 > analytic + 0.2
    # the fit on everything: about ln 3 on the flag's (standardised) coefficient
    full = gc.fit(cands)
    x = list(cands[0].groups[0].features)
    x[FLAG] = 1.0
    on = gc.GroupObs("new-a", tuple(x), 0.05)
    x[FLAG] = 0.0
    off = gc.GroupObs("new-b", tuple(x), 0.05)
    one = lambda g: gc.predict(full, gc.CandidateObs("n", "w", 0.05, None, (g,)))
    assert one(on) / one(off) == pytest.approx(3.0, rel=0.1)
    assert full.to_dict()["kind"] == "groups" and full.cv_rho > full.cv_rho_analytic


def test_a_measured_signature_is_its_measured_time_and_glue_is_added():
    cands = candidates(20, glue=0.002)
    full = gc.fit(cands)
    assert full.active and dict(full.glue)["w"] == pytest.approx(0.002 - 0.001 / 4, abs=1e-9)
    known = cands[3].groups[1]
    probe = gc.CandidateObs("p", "w", known.analytic_s, None,
                            (gc.GroupObs(known.signature, known.features, known.analytic_s),))
    assert gc.predict(full, probe) == pytest.approx(known.measured_s + 0.002 - 0.001 / 4)


def test_a_held_out_candidate_is_not_predicted_from_its_own_groups():
    """One candidate whose groups (signatures of its own) ran 10x slower than anything else
    teaches: cross-fitted, its prediction is far below what it measured (the fold never saw
    it); fitted with it, its signatures give it back exactly."""
    cands = candidates(30)
    odd = cands[0]
    slow = tuple(gc.GroupObs(g.signature, g.features, g.analytic_s, 10 * g.measured_s)
                 for g in odd.groups)
    cands[0] = gc.CandidateObs(odd.key, "w", odd.analytic_s,
                               sum(g.measured_s for g in slow), slow)
    pred, _ = gc.cross_predict(cands, folds=5)
    assert pred[0] < 0.5 * cands[0].measured_s
    assert gc.predict(gc.fit(cands), cands[0]) == pytest.approx(cands[0].measured_s)


def test_too_few_or_untimed_candidates_fall_back_to_the_analytic_time():
    few = gc.fit(candidates(5))
    assert not few.active and "too few" in few.reason
    c = candidates(1)[0]
    assert gc.predict(few, c) == c.analytic_s
    untimed = [gc.CandidateObs(c.key, c.group, c.analytic_s, c.measured_s,
                               tuple(gc.GroupObs(g.signature, g.features, g.analytic_s)
                                     for g in c.groups)) for c in candidates(20)]
    assert not gc.fit(untimed).active


def test_noise_alone_teaches_nothing():
    """Residuals that are pure noise (no factor): no held-out gain, the analytic fallback."""
    corr = gc.fit(candidates(30, factor=1.0, noise=0.3, seed=3))
    assert not corr.active and "no better" in corr.reason
