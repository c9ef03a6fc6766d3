"""The register tiles' table (``DeviceSpec.kernel_tiles``): each tile the calibration timed
beside the default, under each loop order, carries its own factor on the kernel's arithmetic
(in place of the one_vector and outer_a flags), the tile probe's fit recovers a table it is
given (synthetic times made by the model, a machine's own rate per shape, noise), the kernel's
rate comes from the default's time there and the other factors are fitted around both."""
from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from autotune.backends.cpu.kernel_probe import TILE_SHAPES, random_params, tile_params
from costmodel.devices import CPU_DEFAULT, KernelCosts
from costmodel.kernel_cost import kernel_compute_s, plain_kernel_s
from costmodel.kernel_factors import SHORT_TILE_ROWS, kernel_flags, tile_factor
from costmodel.kernel_fit import (KernelSample, default_rate, fit_kernel_costs,
                                  fit_tile_factors)
from search_spaces.kernel import KernelBounds, KernelParams, kernel_options

BOUNDS = KernelBounds(vec_bytes=(64, 32, 16), registers=32, cores=2)
BASE = replace(CPU_DEFAULT, f32_flops=0.0, kernel=KernelCosts())


def params(mr, nr, vec_bytes=64, outer="b") -> KernelParams:
    return KernelParams(mr=mr, nr=nr, mc=mr * 16, kc=256, nc=1024, vec_bytes=vec_bytes,
                        outer=outer)


def test_a_timed_tile_carries_its_own_factor():
    table = ((64, 14, 2, "b", 1.25), (64, 6, 1, "b", 1.5), (64, 14, 2, "a", 0.75))
    dev = replace(BASE, kernel=KernelCosts(one_vector=2.0, outer_a=3.0), kernel_tiles=table)
    args = (1, 512, 1024, 256)

    def ratio(p):
        return kernel_compute_s(*args, p, 4, 4e6, dev) / kernel_compute_s(
            *args, p, 4, 4e6, replace(BASE, kernel=KernelCosts()))
    assert tile_factor(params(14, 32), 4, dev) == 1.25
    assert ratio(params(14, 32)) == pytest.approx(1.25)
    # under the other order its own factor, not outer_a's
    assert not kernel_flags(params(14, 32, outer="a"), 4, 256, 1024, 4e6, dev)["outer_a"]
    assert ratio(params(14, 32, outer="a")) == pytest.approx(0.75)
    # a one-vector tile in the table: its own factor, not one_vector's
    assert not kernel_flags(params(6, 16), 4, 256, 1024, 4e6, dev)["one_vector"]
    assert ratio(params(6, 16)) == pytest.approx(1.5)
    # not in it: the flags' factors; the table is per vector width and per vectors across
    assert ratio(params(8, 16)) == pytest.approx(2.0)
    assert ratio(params(6, 16, outer="a")) == pytest.approx(2.0 * 3.0)
    assert tile_factor(params(14, 16, vec_bytes=32), 4, dev) is None     # 14 x 2 of 32 bytes
    assert tile_factor(params(14, 32), 8, dev) is None                   # float64: 4 across
    assert tile_factor(params(14, 16), 8, dev) == 1.25
    assert ratio(params(6, 64)) == pytest.approx(1.0)


def test_the_probe_times_every_tile_but_the_short_ones_with_the_defaults_blocks():
    o = kernel_options(BOUNDS, 4, 1)
    ps = tile_params(BOUNDS)
    assert ps[0] == o.default
    assert {(p.mr, p.nr, p.outer) for p in ps} == {
        (mr, nr, outer) for mr, nr in o.tiles if mr > SHORT_TILE_ROWS for outer in o.outers}
    for p in ps:
        assert (p.kc, p.pack_a, p.pack_b, p.split, p.vec_bytes) == (
            o.default.kc, o.default.pack_a, o.default.pack_b, o.default.split,
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
    truth = ((64, d.mr, dv, d.outer, 1.1), (64, 14, 2, "b", 1.3), (64, 14, 2, "a", 1.2),
             (64, 6, 2, "b", 0.9), (64, 28, 1, "a", 1.6))
    got = {t[:4]: t[4] for t in fit_tile_factors(probe_samples(truth, 0.01, 0), BASE)}
    assert got[(64, d.mr, dv, d.outer)] == 1.0               # the default: the reference
    # the others against it, whatever each shape's rate
    for vb, mr, nv, outer, f in truth[1:]:
        assert got[(vb, mr, nv, outer)] == pytest.approx(f / 1.1, rel=0.03), (mr, nv, outer)
    # tiles the table leaves out (factor 1, like the default's) come back level with it
    assert got[(64, 8, 3, "a")] == pytest.approx(1 / 1.1, rel=0.03)
    assert all(mr > SHORT_TILE_ROWS for _, mr, _, _ in got)
    assert fit_tile_factors([], BASE) == ()


def test_the_kernels_rate_is_where_the_model_gives_the_default_its_time():
    # the probe's default measured at 150 GFLOP/s at one shape and 90 at the other (factor 1):
    # the rate is their geometric mean, whatever rate the model was fitted with, and the
    # model with it puts the default between the two
    samples = probe_samples((), 0.0, 2)
    want = math.sqrt(150e9 * 90e9)
    for assumed in (50e9, 400e9):
        dev = replace(BASE, kernel_flops=assumed)
        assert default_rate(samples, dev) == pytest.approx(want, rel=1e-6)
    dev = replace(BASE, kernel_flops=want)
    errs = [math.log(s.seconds / plain_kernel_s(*s.shape, s.params, 4, dev))
            for s in samples if s.params == samples[0].params]
    assert len(errs) == 2 and sum(errs) == pytest.approx(0.0, abs=0.02)
    # never past the FMA peak
    assert default_rate(samples, replace(BASE, kernel_flops=want, f32_flops=100e9)) == 100e9


def test_the_kernels_other_factors_are_fitted_around_the_table():
    table = fit_tile_factors(probe_samples(((64, 14, 2, "b", 1.3), (64, 28, 1, "a", 1.6)),
                                           0.0, 1), BASE)
    truth = KernelCosts(unpacked_b=1.2, stream_cached=1.4, barrier_s=0.0)
    dev = replace(BASE, kernel_flops=150e9, kernel=truth, kernel_tiles=table)
    r = random.Random(3)
    samples = [KernelSample(shape, p, plain_kernel_s(*shape, p, 4, dev)
                            * math.exp(r.gauss(0.0, 0.01)))
               for i, shape in enumerate(((1, 512, 1024, 256), (1, 4096, 512, 128)))
               for p in random_params(BOUNDS, 1, 40, i)]
    with_table = fit_kernel_costs(samples, replace(BASE, kernel_tiles=table))
    assert with_table.costs.unpacked_b == pytest.approx(1.2, rel=0.05)
    assert with_table.costs.stream_cached == pytest.approx(1.4, rel=0.05)
    assert with_table.rms_log_after < 0.03
    # without the table the same samples are explained worse
    assert fit_kernel_costs(samples, BASE).rms_log_after > 2 * with_table.rms_log_after
    # with the rate given, it is kept and the factors fitted around it
    fixed = fit_kernel_costs(samples, replace(BASE, kernel_flops=150e9, kernel_tiles=table),
                             rate_fixed=True)
    assert fixed.kernel_flops == 150e9
    assert fixed.costs.unpacked_b == pytest.approx(1.2, rel=0.05)
    off = fit_kernel_costs(samples, replace(BASE, kernel_flops=100e9, kernel_tiles=table),
                           rate_fixed=True)
    assert off.kernel_flops == 100e9 and off.rms_log_after > fixed.rms_log_after
