"""Calibration probes of the generated contraction kernel: random legal configurations timed
at four shape classes, and the kernel's terms fitted to them (:mod:`costmodel.kernel_fit`);
and every register tile timed side by side with the default's blocks (the tile probe).

The shapes are where the kernel's parameters matter in the built-in blocks: a mid-size product
(an MLP layer), a batch of small products with a short K (attention heads), a tall product
with K = 128 (the trimul projections), and a wide one whose KC x NC blocks of B reach past a
core's L2 (an MLP's 4x expansion: the A-panel-outer order's cost, kernel.outer_a_spill).  Each
configuration's result is checked against the float64 product before it is timed; one that is
wrong stops the calibration (the kernel would be wrong in plans too).  The random
configurations' times are the best of interleaved rounds (``probes.best_times``), the tiles'
medians of interleaved batches (:func:`median_times`).

Why a tile probe: among random configurations the tile varies with everything else, and no
factor of the fit described it (per tile width, 100 samples of the 2-core Xeon fitted 14 x 32
tiles 3 % under 6 x 64); side by side, blocks fixed, each tile kept its place within a few
per cent over three probes, and they differ by up to 1.45x (bench/results/xeon-kernel-tiles).
"""
from __future__ import annotations

import random
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from costmodel.devices import DeviceSpec
from costmodel.kernel_factors import SHORT_TILE_ROWS
from costmodel.kernel_fit import (KernelSample, default_rate, fit_kernel_costs,
                                  fit_tile_factors)
from search_spaces.kernel import (KernelBounds, KernelParams, chosen_params, kernel_options,
                                  legalize)

from autotune.backends.buffers import aligned_full
from autotune.backends.cpu.probes import best_times

KERNEL_SHAPES = {"mlp": (1, 512, 1024, 256), "heads": (8, 256, 256, 32),
                 "projection": (1, 4096, 512, 128), "wide": (1, 512, 2048, 512)}
# the tile probe's shapes: an MLP layer and a tall projection, where the register tile's width
# is what the search picks among (bench/results/xeon-kernel-tiles)
TILE_SHAPES = {name: KERNEL_SHAPES[name] for name in ("mlp", "projection")}
DEFAULT_SAMPLES = 24      # random configurations per shape (plus the default one)
TOLERANCE = 1e-4          # float32 products of K <= 512 unit normals, relative to the largest


def random_params(bounds: KernelBounds, batch: int, count: int, seed: int,
                  item: int = 4) -> list[KernelParams]:
    """The default configuration and ``count`` random legal ones, drawn among the choices the
    search space offers (``search_spaces.kernel.chosen_params``)."""
    o = kernel_options(bounds, item, batch)
    r = random.Random(seed)
    out = [o.default] + [chosen_params(o, lambda _, vals: r.choice(vals), item)
                         for _ in range(count)]
    return list(dict.fromkeys(out))


def tile_params(bounds: KernelBounds, item: int = 4) -> list[KernelParams]:
    """The tile probe's configurations, the default first: every register tile the search
    offers (but those of 4 rows or fewer, which short_tile prices) under each loop order, with
    the default configuration's blocks and packing (rounded to the tile), so that the tile and
    the order alone differ."""
    o = kernel_options(bounds, item, 1)
    return list(dict.fromkeys([o.default] + [
        legalize(replace(o.default, mr=mr, nr=nr, outer=outer), item)
        for mr, nr in o.tiles if mr > SHORT_TILE_ROWS for outer in o.outers]))


def measure_kernel(bounds: KernelBounds, cache_dir: Path, repeats: int, samples: int,
                   shapes: dict[str, tuple[int, int, int, int]] | None = None,
                   seed: int = 0) -> list[KernelSample]:
    """Time ``samples`` random configurations (and the default) at each shape."""
    rng = np.random.default_rng(seed)
    return [s for i, (name, shape) in enumerate((shapes or KERNEL_SHAPES).items())
            for s in _timed(name, shape, random_params(bounds, shape[0], samples, seed + i),
                            cache_dir, repeats, rng, median_times)]


def measure_tiles(bounds: KernelBounds, cache_dir: Path, repeats: int,
                  shapes: dict[str, tuple[int, int, int, int]] | None = None,
                  seed: int = 0) -> list[KernelSample]:
    """Time every :func:`tile_params` configuration side by side at each shape (default
    :data:`TILE_SHAPES`): the evidence of ``costmodel.kernel_fit.fit_tile_factors``."""
    rng = np.random.default_rng(seed)
    return [s for name, shape in (shapes or TILE_SHAPES).items()
            for s in _timed(name, shape, tile_params(bounds), cache_dir, repeats, rng,
                            median_times)]


# The kernel probes' rounds: tiles differ by a few per cent, so each configuration's time is
# the median over rounds of the median of a batch of calls (about BATCH_S of them), not the
# best run: on the 2-core Xeon the best of up to 50 runs (probes.best_times) put 6 x 32 tiles
# at 0.99-1.01x the rate of 6 x 64 at 512 x 1024 x 256 and 1.08-1.11x at 4096 x 512 x 128
# over three probes, where medians of 7 rounds of 20 calls put them at 0.95 and 0.98, and a C
# driver's at 0.93 and 0.97 (bench/results/xeon-kernel-tiles).  Plans are timed by medians too.
TILE_ROUNDS = 7
BATCH_S = 0.02


def median_times(calls: dict, repeats: int) -> dict:
    """The median over ``max(repeats, TILE_ROUNDS)`` interleaved rounds of each call's median
    time in a batch of calls lasting about :data:`BATCH_S`."""
    batch = {}
    for j, fn in calls.items():
        fn(0)
        t0 = time.perf_counter()
        fn(0)
        batch[j] = max(3, min(200, int(BATCH_S / max(time.perf_counter() - t0, 1e-6))))
    rounds: dict = {j: [] for j in calls}
    for r in range(max(repeats, TILE_ROUNDS)):
        for j, fn in calls.items():
            ts = []
            for _ in range(batch[j]):
                t0 = time.perf_counter()
                fn(r)
                ts.append(time.perf_counter() - t0)
            rounds[j].append(float(np.median(ts)))
    return {j: float(np.median(v)) for j, v in rounds.items()}


def _timed(name: str, shape: tuple[int, int, int, int], configs: list[KernelParams],
           cache_dir: Path, repeats: int, rng, timer=best_times) -> list[KernelSample]:
    """Each of ``configs`` built, checked against the float64 product and timed by ``timer``
    (interleaved rounds), on one set of random float32 operands."""
    from autotune.backends.cpu.executor import load_gemm_kernel
    from autotune.backends.cpu.gemm_call import store_for
    from autotune.backends.cpu.gemm_kernel import KernelSpec
    b, m, n, k = shape
    a = rng.standard_normal((b, m, k), dtype=np.float32)
    bm = rng.standard_normal((b, k, n), dtype=np.float32)
    ref = np.matmul(a.astype(np.float64), bm.astype(np.float64))
    calls, params = {}, {}
    for j, p in enumerate(configs):
        c = aligned_full((b, m, n), np.nan, np.float32)     # as a plan's outputs are
        kern = load_gemm_kernel(KernelSpec(p, "float32", store_for(c)), str(cache_dir))
        kern(a, bm, c)
        err = float(np.abs(c - ref).max() / max(float(np.abs(ref).max()), 1e-30))
        if not err <= TOLERANCE:
            raise RuntimeError(f"kernel probe {name} {shape}: {p} is wrong (relative error "
                               f"{err:.2e})")
        calls[j] = lambda r, kern=kern, c=c: kern(a, bm, c)
        params[j] = p
    times = timer(calls, repeats)
    return [KernelSample(tuple(shape), params[j], times[j]) for j in calls]


def kernel_terms(samples: list[KernelSample], dev: DeviceSpec,
                 tiles: list[KernelSample] = ()) -> dict:
    """The calibration record's kernel terms (``kernel_flops``, the ``kernel`` section and the
    fit's quality) from ``samples`` measured on the machine ``dev`` describes, with the
    register tiles' table (``kernel_tiles``) from the tile probe's ``tiles``, the other
    factors fitted around it, and the kernel's rate set where the model gives the probe's
    default configuration its measured time (``kernel_fit.default_rate``; no tiles: the
    fit's rate)."""
    tiles = list(tiles)
    table = fit_tile_factors(tiles, dev)
    fit = fit_kernel_costs(samples, replace(dev, kernel_tiles=table))
    rate = default_rate(tiles, replace(dev, kernel_flops=fit.kernel_flops, kernel=fit.costs,
                                       kernel_tiles=table)) if tiles else fit.kernel_flops
    return {"kernel_flops": rate, "kernel": asdict(fit.costs),
            "kernel_tiles": [list(t) for t in table],
            "kernel_fit": {"rms_log_before": fit.rms_log_before,
                           "rms_log_after": fit.rms_log_after, "samples": fit.samples}}


def sample_records(samples: list[KernelSample]) -> list[dict]:
    """The samples as the calibration's evidence stores them (JSON)."""
    return [{"shape": list(s.shape), "params": s.params.to_dict(), "seconds": s.seconds}
            for s in samples]


def samples_from_records(recs: list[dict]) -> list[KernelSample]:
    return [KernelSample(tuple(int(x) for x in r["shape"]), KernelParams.from_dict(r["params"]),
                         float(r["seconds"])) for r in recs]
