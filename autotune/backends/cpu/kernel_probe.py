"""Calibration probe of the generated contraction kernel: random legal configurations timed
at three shape classes, and the kernel's terms fitted to them (:mod:`costmodel.kernel_fit`).

The shapes are where the kernel's parameters matter in the built-in blocks: a mid-size product
(an MLP layer), a batch of small products with a short K (attention heads), a tall product
with K = 128 (the trimul projections), and a wide one whose KC x NC blocks of B reach past a
core's L2 (an MLP's 4x expansion: the A-panel-outer order's cost, kernel.outer_a_spill).  Each configuration's result is checked against the
float64 product before it is timed; one that is wrong stops the calibration (the kernel would
be wrong in plans too).  Times are the best of interleaved rounds (``probes.best_times``).
"""
from __future__ import annotations

import random
from dataclasses import asdict
from pathlib import Path

import numpy as np

from costmodel.devices import DeviceSpec
from costmodel.kernel_fit import KernelSample, fit_kernel_costs
from search_spaces.kernel import KernelBounds, KernelParams, chosen_params, kernel_options

from autotune.backends.buffers import aligned_full
from autotune.backends.cpu.probes import best_times

KERNEL_SHAPES = {"mlp": (1, 512, 1024, 256), "heads": (8, 256, 256, 32),
                 "projection": (1, 4096, 512, 128), "wide": (1, 512, 2048, 512)}
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


def measure_kernel(bounds: KernelBounds, cache_dir: Path, repeats: int, samples: int,
                   shapes: dict[str, tuple[int, int, int, int]] | None = None,
                   seed: int = 0) -> list[KernelSample]:
    """Time ``samples`` random configurations (and the default) at each shape."""
    from autotune.backends.cpu.executor import load_gemm_kernel
    from autotune.backends.cpu.gemm_call import store_for
    from autotune.backends.cpu.gemm_kernel import KernelSpec
    rng = np.random.default_rng(seed)
    out: list[KernelSample] = []
    for i, (name, shape) in enumerate((shapes or KERNEL_SHAPES).items()):
        b, m, n, k = shape
        a = rng.standard_normal((b, m, k), dtype=np.float32)
        bm = rng.standard_normal((b, k, n), dtype=np.float32)
        ref = np.matmul(a.astype(np.float64), bm.astype(np.float64))
        calls, params = {}, {}
        for j, p in enumerate(random_params(bounds, b, samples, seed + i)):
            c = aligned_full((b, m, n), np.nan, np.float32)     # as a plan's outputs are
            kern = load_gemm_kernel(KernelSpec(p, "float32", store_for(c)), str(cache_dir))
            kern(a, bm, c)
            err = float(np.abs(c - ref).max() / max(float(np.abs(ref).max()), 1e-30))
            if not err <= TOLERANCE:
                raise RuntimeError(f"kernel probe {name} {shape}: {p} is wrong (relative error "
                                   f"{err:.2e})")
            calls[j] = lambda r, kern=kern, c=c: kern(a, bm, c)
            params[j] = p
        times = best_times(calls, repeats)
        out += [KernelSample(tuple(shape), params[j], times[j]) for j in calls]
    return out


def kernel_terms(samples: list[KernelSample], dev: DeviceSpec) -> dict:
    """The calibration record's kernel terms (``kernel_flops``, the ``kernel`` section and the
    fit's quality) from ``samples`` measured on the machine ``dev`` describes."""
    fit = fit_kernel_costs(samples, dev)
    return {"kernel_flops": fit.kernel_flops, "kernel": asdict(fit.costs),
            "kernel_fit": {"rms_log_before": fit.rms_log_before,
                           "rms_log_after": fit.rms_log_after, "samples": fit.samples}}


def sample_records(samples: list[KernelSample]) -> list[dict]:
    """The samples as the calibration's evidence stores them (JSON)."""
    return [{"shape": list(s.shape), "params": s.params.to_dict(), "seconds": s.seconds}
            for s in samples]


def samples_from_records(recs: list[dict]) -> list[KernelSample]:
    return [KernelSample(tuple(int(x) for x in r["shape"]), KernelParams.from_dict(r["params"]),
                         float(r["seconds"])) for r in recs]
