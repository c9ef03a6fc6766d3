"""How well predicted times rank measured ones: rank correlations and the figures
``autotune model-check`` reports.  Pure NumPy (no SciPy), no I/O.

Every function takes two equally long sequences, ``predicted`` and ``measured`` seconds (or any
values to correlate), and returns a float; NaN where the figure is undefined (fewer than two
points, a constant side).
"""
from __future__ import annotations

import math

import numpy as np


def _pair(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"two 1-d sequences of one length expected, got {x.shape} and {y.shape}")
    return x, y


def rankdata(a) -> np.ndarray:
    """Ranks 1..n of ``a``, ties given the average of the ranks they span."""
    a = np.asarray(a, dtype=float)
    order = np.argsort(a, kind="mergesort")
    sorted_a = a[order]
    ranks = np.empty(len(a), dtype=float)
    i = 0
    while i < len(a):
        j = i
        while j + 1 < len(a) and sorted_a[j + 1] == sorted_a[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def spearman_rho(x, y) -> float:
    """Spearman's rank correlation: Pearson's correlation of the (tie-averaged) ranks."""
    x, y = _pair(x, y)
    if len(x) < 2:
        return math.nan
    rx, ry = rankdata(x) - (len(x) + 1) / 2, rankdata(y) - (len(y) + 1) / 2
    den = math.sqrt(float(rx @ rx) * float(ry @ ry))
    return float(rx @ ry) / den if den > 0 else math.nan


def kendall_tau(x, y) -> float:
    """Kendall's tau-b: (concordant - discordant pairs) / sqrt(pairs untied in x * pairs
    untied in y).  O(n^2) memory and time: meant for the hundreds of points of a check."""
    x, y = _pair(x, y)
    if len(x) < 2:
        return math.nan
    iu = np.triu_indices(len(x), k=1)
    sx = np.sign(x[:, None] - x[None, :])[iu]
    sy = np.sign(y[:, None] - y[None, :])[iu]
    den = math.sqrt(float(np.abs(sx).sum()) * float(np.abs(sy).sum()))
    return float((sx * sy).sum()) / den if den > 0 else math.nan


def median_abs_log_error(predicted, measured) -> float:
    """The median of |ln(predicted / measured)|: 0.69 is "typically off by 2x"."""
    p, m = _pair(predicted, measured)
    if len(p) == 0:
        return math.nan
    return float(np.median(np.abs(np.log(p) - np.log(m))))


def top1_regret(predicted, measured) -> float:
    """How much slower the model's pick (the lowest prediction; the first of equals) measured
    than the best measured: ``measured[argmin predicted] / min(measured) - 1``."""
    p, m = _pair(predicted, measured)
    if len(p) == 0:
        return math.nan
    return float(m[int(np.argmin(p))] / m.min() - 1.0)
