"""Fitting the generated kernel's terms (:class:`~costmodel.devices.KernelCosts` and its rate)
to measurements of random legal configurations.  Pure: NumPy arithmetic, no I/O.

The model's time for a configuration (``kernel_cost.plain_kernel_s``) is its arithmetic at the
kernel's rate times one factor per parameter choice that applies, plus its barriers, its
traffic, A's packing and the micro-kernel's calls (which no factor scales, so they are taken
off the measurement first).  In logs the factors are linear:
``ln((measured - traffic - barriers) / neutral) = c0 + sum(c_i * flag_i)``,
where ``neutral`` is the model's arithmetic with every factor at 1; least squares gives the c_i
(the factors are ``exp(c_i)``) and c0 (the kernel's rate is the assumed one over ``exp(c0)``).
The cost of a barrier and the share of its traffic a product held in the cache pays
(``kernel_cost.traffic_share``) are chosen from grids by the fit's error on the seconds.  A
choice the samples never make (or always make) cannot be told apart from the rate and keeps
its factor at 1.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np

from search_spaces.kernel import KernelParams

from .devices import DeviceSpec, KernelCosts
from .kernel_cost import kernel_threads, peak_flops, plain_kernel_parts, plain_kernel_s
from .kernel_factors import kernel_flags

FACTORS = tuple(f.name for f in fields(KernelCosts) if f.name not in ("barrier_s",
                                                                       "cached_traffic"))
BARRIER_GRID_S = (0.0, 0.5e-6, 1e-6, 2e-6, 4e-6, 8e-6, 16e-6, 32e-6, 64e-6)
# kernel.cached_traffic (kernel_cost.traffic_share), the whole traffic first: kept on a tie
CACHED_GRID = (1.0, 0.75, 0.5, 0.25, 0.0)
# a factor outside this range says more about a few noisy samples than about the machine
FACTOR_RANGE = (0.5, 4.0)
# Factors that cannot speed a configuration up, whatever a few noisy samples say: a register
# tile of 4 rows (short_tile) uses each loaded B vector 4 times against 6 or more, one vector
# wide (one_vector) each broadcast A element once.  Fitted free, short_tile came out 0.85 on
# the 2-core Xeon (75 samples, log error 0.17), and the search's first picks were 4 x 64 tiles:
# gated_mlp's best plan (two such kernel groups) ran 4.09 ms against 3.81 with 6 x 64 tiles
# (one process, 15 interleaved rounds); the micro-kernel alone, operands in cache, one core:
# 4 x 64 143 GFLOP/s, 6 x 64 168, 12 x 32 171.
AT_LEAST_ONE = ("short_tile", "one_vector")


@dataclass(frozen=True)
class KernelSample:
    """One measured configuration: ``shape`` is (batch, m, n, k) of a row-major product."""
    shape: tuple[int, int, int, int]
    params: KernelParams
    seconds: float


@dataclass(frozen=True)
class KernelFit:
    """The fitted rate and factors, with the fit's quality: the RMS of the log residual of the
    model with the rate alone (no factor, no barrier cost) and with everything fitted."""
    kernel_flops: float
    costs: KernelCosts
    rms_log_before: float
    rms_log_after: float
    samples: int


def _bounded_lstsq(x: np.ndarray, y: np.ndarray, used: list[str], c0_min: float) -> np.ndarray:
    """Least squares for [c0, c_i...] with c0 >= ``c0_min`` and each factor of
    :data:`AT_LEAST_ONE` at 1 or more: a coefficient past its bound is held there and the rest
    fitted again, until none is."""
    held: dict[int, float] = {}
    while True:
        free = [j for j in range(x.shape[1]) if j not in held]
        rest = y - sum((x[:, j] * v for j, v in held.items()), np.zeros_like(y))
        sol = np.linalg.lstsq(x[:, free], rest, rcond=None)[0] if free else np.zeros(0)
        coef = np.zeros(x.shape[1])
        coef[free] = sol
        for j, v in held.items():
            coef[j] = v
        past = [j for j in free if (j == 0 and coef[0] < c0_min)
                or (j > 0 and used[j - 1] in AT_LEAST_ONE and coef[j] < 0.0)]
        if not past:
            return coef
        for j in past:
            held[j] = c0_min if j == 0 else 0.0


def _flags(s: KernelSample, item: int, dev: DeviceSpec) -> dict[str, float]:
    b, m, n, k = s.shape
    return kernel_flags(s.params, item, k, n, float(b * m * n * item), dev)


def fit_kernel_costs(samples: list[KernelSample], dev: DeviceSpec, item: int = 4) -> KernelFit:
    """The kernel terms that best explain ``samples`` (measured on ``dev``'s machine; ``dev``
    supplies the rest of the model: bandwidth, launch costs, cores, cache size)."""
    if not samples:
        raise ValueError("no kernel samples to fit")
    rate0 = dev.kernel_flops or dev.gemm_flops
    flags = [_flags(s, item, dev) for s in samples]
    # a factor is fitted where the samples vary its exponent (and some have it)
    used = [f for f in FACTORS if len({fl[f] for fl in flags}) > 1]
    x = np.array([[1.0] + [float(fl[f]) for f in used] for fl in flags])
    barriers = [kernel_threads(*s.shape, s.params, dev)[1] for s in samples]
    # (the neutral arithmetic without the peak's floor: the fit stays linear in the logs)
    d0 = replace(dev, kernel_flops=rate0, f32_flops=0.0, kernel=KernelCosts(barrier_s=0.0))
    neutral = np.log([plain_kernel_parts(*s.shape, s.params, item, d0)[0] for s in samples])
    # the rate is the intercept, the kernel with every factor at 1, a configuration the
    # samples may never hold: left free, it came out above the machine's FMA peak (257 against
    # 205 GFLOP/s; the fastest sample ran 179) and priced the good configurations' groups
    # at 1.6x the speed they ran, relative to the library GEMM's (the model's median error
    # over 497 kernel groups of 33 blocks: 2.47x; the library's: 1.54x).  So it is held at the
    # peak at most and the factors fitted around it.
    c0_min = math.log(rate0 / peak_flops(dev, item)) if dev.f32_flops > 0 else -math.inf
    seconds = np.log([max(s.seconds, 1e-12) for s in samples])
    lo, hi = FACTOR_RANGE
    best = None
    for share in CACHED_GRID:
        # the traffic (its cached share), A's packing, the calls and the barriers (no rate or
        # factor in them) off each measurement, never below a tenth of it: what is left is the
        # arithmetic, which the factors scale
        ds = replace(dev, kernel=KernelCosts(cached_traffic=share))
        rest = [plain_kernel_parts(*s.shape, s.params, item, ds)[1] for s in samples]
        for barrier in BARRIER_GRID_S:
            y = np.log([max(s.seconds - r - nb * barrier, 0.1 * s.seconds, 1e-12)
                        for s, r, nb in zip(samples, rest, barriers)]) - neutral
            coef = _bounded_lstsq(x, y, used, c0_min)
            factors = {f: min(hi, max(lo, math.exp(c))) for f, c in zip(used, coef[1:])}
            costs = KernelCosts(barrier_s=barrier, cached_traffic=share, **factors)
            fitted = replace(dev, kernel_flops=rate0 / math.exp(coef[0]), kernel=costs)
            # judged on the seconds themselves: the share changes what y is
            err = seconds - np.log([plain_kernel_s(*s.shape, s.params, item, fitted)
                                    for s in samples])
            rss = float(np.sum(err ** 2))
            if best is None or rss < best[0]:
                best = (rss, fitted, err)
    _, fitted, after = best
    rate, costs = fitted.kernel_flops, fitted.kernel
    d0 = replace(dev, kernel_flops=rate0, kernel=KernelCosts())
    y0 = seconds - np.log([plain_kernel_s(*s.shape, s.params, item, d0) for s in samples])
    before = y0 - np.mean(y0)
    return KernelFit(rate, costs, float(np.sqrt(np.mean(before ** 2))),
                     float(np.sqrt(np.mean(after ** 2))), len(samples))
