"""A kernel that splits n with A read in place (costmodel.kernel_factors.IN_PLACE_SPLIT_N):
every thread of split n would copy a packed A whole, and in place measured 0.79-0.88x packed
(bench/results/xeon-split-n-in-place); under split m in place stays dearer."""
from __future__ import annotations

from dataclasses import replace

import pytest

from costmodel.devices import CPU_DEFAULT, KernelCosts
from costmodel.kernel_cost import kernel_compute_s, plain_kernel_s
from costmodel.kernel_factors import IN_PLACE_SPLIT_N, in_place_split_n_factor
from search_spaces.kernel import KernelParams

# the factors the 2-core Xeon's calibration fitted (version 14), no FMA peak to clamp at
DEV = replace(CPU_DEFAULT, parallel_units=2, f32_flops=0.0,
              kernel=KernelCosts(unpacked_a=1.13, unpacked_a_short=1.03, split_n=0.93))


def params(**kw) -> KernelParams:
    return KernelParams(**{**dict(mr=14, nr=32, mc=42, kc=256, nc=512, vec_bytes=64,
                                  outer="a"), **kw})


@pytest.mark.parametrize("shape", [(1, 2048, 256, 256), (1, 512, 256, 1024)])
def test_split_n_prices_a_in_place_below_packed_and_split_m_above(shape):
    t = {(split, packed): plain_kernel_s(*shape, params(split=split, pack_a=packed), 4, DEV)
         for split in ("n", "m") for packed in (True, False)}
    assert t["n", False] < 0.95 * t["n", True]        # measured 0.79-0.88x
    assert t["m", False] > t["m", True]               # measured 0.99x and 1.06x


def test_the_factor_applies_to_split_n_in_place_on_a_cpu_only():
    assert 0 < IN_PLACE_SPLIT_N < 1
    assert in_place_split_n_factor(params(split="n", pack_a=False), DEV) == IN_PLACE_SPLIT_N
    for p in (params(split="n"), params(split="m", pack_a=False),
              params(split="batch", pack_a=False), None):
        assert in_place_split_n_factor(p, DEV) == 1.0
    gpu = replace(DEV, kind="cuda")
    assert in_place_split_n_factor(params(split="n", pack_a=False), gpu) == 1.0
    shape = (1, 2048, 256, 256)
    packed = kernel_compute_s(*shape, params(split="n"), 4, 2e6, DEV)
    in_place = kernel_compute_s(*shape, params(split="n", pack_a=False), 4, 2e6, DEV)
    assert in_place == pytest.approx(packed * 1.13 * IN_PLACE_SPLIT_N)
