"""Rank correlations and the figures of `autotune model-check`, against values worked by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest

from costmodel.ranking import (kendall_tau, median_abs_log_error, rankdata, spearman_rho,
                               top1_regret)


# ---- Spearman's rho (moved from tests/autotune/bench/test_bench.py) --------------------------
def test_spearman_rho_of_a_known_permutation():
    # ranks differ by d = (-1, 1, -1, 1, 0): rho = 1 - 6 * 4 / (5 * (25 - 1)) = 0.8
    assert spearman_rho([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    assert spearman_rho([0.1, 0.5, 9.0], [3, 20, 1000]) == pytest.approx(1.0)
    assert spearman_rho([1, 2, 3, 4], [40, 30, 20, 10]) == pytest.approx(-1.0)
    assert math.isnan(spearman_rho([1], [2]))


def test_ranks_average_ties():
    assert list(rankdata([10, 20, 20, 30])) == [1, 2.5, 2.5, 4]
    # with ties rho is Pearson's r of the average ranks: x ranks (1, 2.5, 2.5, 4), y (1..4)
    rx, ry = np.array([1, 2.5, 2.5, 4]), np.arange(1, 5.0)
    want = np.corrcoef(rx, ry)[0, 1]
    assert spearman_rho([10, 20, 20, 30], [1, 2, 3, 4]) == pytest.approx(want)


def test_spearman_by_the_d_squared_formula():
    # x ranks (1..6), y = (3, 1, 2, 6, 4, 5): d = (-2, 1, 1, -2, 1, 1), sum d^2 = 12
    # rho = 1 - 6 * 12 / (6 * 35) = 1 - 72/210 = 0.657142...
    assert spearman_rho([1, 2, 3, 4, 5, 6], [3, 1, 2, 6, 4, 5]) == pytest.approx(1 - 72 / 210)
    assert math.isnan(spearman_rho([1, 1, 1], [1, 2, 3]))          # a constant side
    with pytest.raises(ValueError):
        spearman_rho([1, 2], [1, 2, 3])


# ---- Kendall's tau ---------------------------------------------------------------------------
def test_kendall_tau_without_ties():
    # pairs of (1,2,3,4) vs (1,3,2,4): 6 pairs, one discordant (2-3): (5 - 1) / 6
    assert kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]) == pytest.approx(4 / 6)
    # the permutation of the Spearman test: (1..5) vs (2,1,4,3,5): 10 pairs, 2 discordant
    assert kendall_tau([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(6 / 10)
    assert kendall_tau([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    assert kendall_tau([0.1, 0.5, 9.0], [3, 20, 1000]) == pytest.approx(1.0)
    assert math.isnan(kendall_tau([1], [1]))


def test_kendall_tau_b_with_ties():
    # x = (1, 2, 2, 3), y = (1, 2, 3, 4): pairs 6; x ties 1 pair (2,2); y none.
    # concordant: (1,2)(1,3)(1,4)(2,4)(3,4) = 5, discordant 0, tied-in-x 1
    # tau_b = (5 - 0) / sqrt((6 - 1) * (6 - 0)) = 5 / sqrt(30)
    assert kendall_tau([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(5 / math.sqrt(30))
    # ties on both sides in the same pair: x = (1,1,2), y = (5,5,6): 1 tied, 2 concordant
    assert kendall_tau([1, 1, 2], [5, 5, 6]) == pytest.approx(2 / math.sqrt(2 * 2))
    assert math.isnan(kendall_tau([2, 2, 2], [1, 2, 3]))


# ---- the error figures -----------------------------------------------------------------------
def test_median_abs_log_error_and_top1_regret():
    pred, meas = [1.0, 2.0, 8.0], [2.0, 2.0, 1.0]
    # |ln(1/2)|, 0, |ln 8| -> median ln 2
    assert median_abs_log_error(pred, meas) == pytest.approx(math.log(2))
    # the model picks the first (1.0 predicted): measured 2.0 against the best 1.0
    assert top1_regret(pred, meas) == pytest.approx(1.0)
    assert top1_regret([3.0, 1.0, 2.0], [5.0, 4.0, 4.5]) == 0.0
    assert math.isnan(top1_regret([], []))
