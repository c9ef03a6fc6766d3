"""The register tiles' table (``DeviceSpec.kernel_tiles``): each tile the calibration timed
beside the default carries its own factor on the kernel's arithmetic (in place of the
one_vector flag), the tile probe's fit recovers a table it is given (synthetic times made by
the model, a machine's own rate per shape, noise) and the kernel's other factors are fitted
around it."""
from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from autotune.backends.cpu.kernel_probe import TILE_SHAPES, random_params, tile_params
from costmodel.devices import CPU_DEFAULT, KernelCosts
from costmodel.kernel_cost import kernel_compute_s, plain_kernel_s
from costmodel.kernel_factors import SHORT_TILE_ROWS, kernel_flags, tile_factor
from costmodel.kernel_fit import KernelSample, fit_kernel_costs, fit_tile_factors
from search_spaces.kernel import KernelBounds, KernelParams, kernel_options

BOUNDS = KernelBounds(vec_bytes=(64, 32, 16), registers=32, cores=2)
BASE = replace(CPU_DEFAULT, f32_flops=0.0, kernel=KernelCosts())


def params(mr, nr, vec_bytes=64) -> KernelParams:
    return KernelParams(mr=mr, nr=nr, mc=mr * 16, kc=256, nc=1024, vec_bytes=vec_bytes)


def test_a_timed_tile_carries_its_own_factor():
    table = ((64, 14, 2, 1.25), (64, 6, 1, 1.5))
    dev = replace(BASE, kernel=KernelCosts(one_vector=2.0), kernel_tiles=table)
    args = (1, 512, 1024, 256)

    def ratio(p):
        return kernel_compute_s(*args, p, 4, 4e6, dev) / kernel_compute_s(
            *args, p, 4, 4e6, replace(BASE, kernel=KernelCosts()))
    assert tile_factor(params(14, 32), 4, dev) == 1.25
    assert ratio(params(14, 32)) == pytest.approx(1.25)
    # a one-vector tile in the table: its own factor, not one_vector's
    assert not kernel_flags(params(6, 16), 4, 256, 1024, 4e6, dev)["one_vector"]
    assert ratio(params(6, 16)) == pytest.approx(1.5)
    # one not in it: one_vector's; the table is per vector width and per vectors across
    assert ratio(params(8, 16)) == pytest.approx(2.0)
    assert tile_factor(params(14, 16, vec_bytes=32), 4, dev) is None     # 14 x 2 of 32 bytes
    assert tile_factor(params(14, 32), 8, dev) is None                   # float64: 4 across
    assert tile_factor(params(14, 16), 8, dev) == 1.25
    assert ratio(params(6, 64)) == pytest.approx(1.0)


def test_the_probe_times_every_tile_but_the_short_ones_with_the_defaults_blocks():
    o = kernel_options(BOUNDS, 4, 1)
    ps = tile_params(BOUNDS)
    assert ps[0] == o.default
    assert {(p.mr, p.nr) for p in ps} == {t for t in o.tiles if t[0] > SHORT_TILE_ROWS}
    for p in ps:
        assert (p.kc, p.outer, p.pack_a, p.pack_b, p.split, p.vec_bytes) == (
            o.default.kc, o.default.outer, o.default.pack_a, o.default.pack_b, o.default.split,
            o.default.vec_bytes)
        assert p.mc % p.mr == 0 and p.nc % p.nr == 0


def probe_samples(table, noise: float, seed: int) -> list[KernelSample]:
    """The tile probe's samples made by the model with ``table``, each shape at its own rate
    (as if another part of the machine's model were off there)."""
    r = random.Random(seed)
    out = []
    for i, shape in enumerate(TILE_SHAPES.values()):
        dev = replace(BASE, kernel_flops=(150e9, 90e9)[i % 2], kernel_tiles=table)
        for p in tile_params(BOUNDS):
            t = plain_kernel_s(*shape, p, 4, dev) * math.exp(r.gauss(0.0, noise))
            out.append(KernelSample(shape, p, t))
    return out


def test_the_tile_fit_recovers_the_table_it_is_given():
    d = tile_params(BOUNDS)[0]
    dv = d.nr // 16
    truth = ((64, d.mr, dv, 1.1), (64, 14, 2, 1.3), (64, 6, 2, 0.9), (64, 28, 1, 1.6))
    got = {t[:3]: t[3] for t in fit_tile_factors(probe_samples(truth, 0.01, 0), BASE)}
    assert got[(64, d.mr, dv)] == 1.0                    # the default: the reference
    # the others against it, whatever each shape's rate
    for vb, mr, nv, f in truth[1:]:
        assert got[(vb, mr, nv)] == pytest.approx(f / 1.1, rel=0.03), (mr, nv)
    # tiles the table leaves out (factor 1, like the default's) come back level with it
    assert got[(64, 8, 3)] == pytest.approx(1 / 1.1, rel=0.03)
    assert all(mr > SHORT_TILE_ROWS for _, mr, _ in got)
    assert fit_tile_factors([], BASE) == ()


def test_the_kernels_other_factors_are_fitted_around_the_table():
    table = fit_tile_factors(probe_samples(((64, 14, 2, 1.3), (64, 28, 1, 1.6)), 0.0, 1),
                             BASE)
    truth = KernelCosts(unpacked_b=1.2, outer_a=0.9, barrier_s=0.0)
    dev = replace(BASE, kernel_flops=150e9, kernel=truth, kernel_tiles=table)
    r = random.Random(3)
    samples = [KernelSample(shape, p, plain_kernel_s(*shape, p, 4, dev)
                            * math.exp(r.gauss(0.0, 0.01)))
               for i, shape in enumerate(((1, 512, 1024, 256), (1, 4096, 512, 128)))
               for p in random_params(BOUNDS, 1, 40, i)]
    with_table = fit_kernel_costs(samples, replace(BASE, kernel_tiles=table))
    assert with_table.costs.unpacked_b == pytest.approx(1.2, rel=0.05)
    assert with_table.costs.outer_a == pytest.approx(0.9, rel=0.05)
    assert with_table.rms_log_after < 0.03
    # without the table the same samples are explained worse
    assert fit_kernel_costs(samples, BASE).rms_log_after > 2 * with_table.rms_log_after
