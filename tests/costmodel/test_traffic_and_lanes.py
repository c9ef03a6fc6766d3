"""costmodel.kernel_traffic.traffic_floor_s: a kernel too thin in M to be compute-bound is
priced at no less than moving its operands, whatever share of cache-resident traffic the
calibration fitted."""
from dataclasses import replace
from pathlib import Path

import pytest

import costmodel
from costmodel.devices import KernelCosts
from search_spaces.candidate import Candidate
from search_spaces.loader import load_workload, parse_workload

TINY_BMM = Path(__file__).resolve().parents[2] / "bench" / "unseen" / "tiny_bmm.toml"

DECODE = """
name = "thin"
dtype = "float32"
outputs = ["h"]
program = "h[t,f] += x[t,c] * w[c,f]"
[dims]
T = 4
C = 768
F = 3072
[inputs]
x = ["T", "C"]
w = ["C", "F"]
"""


def kernel_plan(**params):
    k = {"kc": 384, "mc": 48, "mr": 4, "nc": 4096, "nr": 64, "outer": "a", "pack_a": True,
         "pack_b": True, "split": "m", "stream": False, "vec_bytes": 64}
    k.update(params)
    return Candidate.from_dict({"fused": [], "layouts": {}, "name": "", "schedules": [
        {"anchor": "h", "impl": "kernel", "tiles": [4, 3072], "kernel": k}]})


@pytest.fixture
def cached_host():
    # the calibrated hosts: their traffic in the cache priced at a share of 0, a large cache
    base = costmodel.preset("cpu")
    return replace(base, cache_bytes=500e6, kernel=KernelCosts(cached_traffic=0.0),
                   access=replace(base.access, far_regions=2.0))


def test_a_thin_product_pays_for_its_b_and_packing_it_twice(cached_host):
    w = parse_workload(DECODE)
    b_bytes = 4.0 * 768 * 3072
    in_place = costmodel.estimate(w, kernel_plan(pack_b=False), cached_host).total_s
    packed = costmodel.estimate(w, kernel_plan(pack_b=True), cached_host).total_s
    assert in_place >= b_bytes / cached_host.bandwidth
    # the packed copy is one more pass over B (evidence: 674 against 285 us on the Xeon)
    assert packed == pytest.approx(in_place + b_bytes / cached_host.bandwidth, rel=0.05)


def test_narrow_in_place_panels_read_far_apart_rows(cached_host):
    w = parse_workload(DECODE)
    wide = costmodel.estimate(w, kernel_plan(pack_b=False, nr=64), cached_host).total_s
    narrow = costmodel.estimate(w, kernel_plan(pack_b=False, nr=16, mr=4), cached_host).total_s
    assert narrow / wide == pytest.approx(2.0, rel=0.1)


def test_a_compute_bound_product_is_priced_by_its_arithmetic(cached_host):
    # 512 x 1024 x 256 (a calibration shape): the floor stays under the arithmetic
    from costmodel.kernel_cost import kernel_compute_s, plain_kernel_parts
    from costmodel.kernel_traffic import traffic_floor_s
    from search_spaces.kernel import KernelParams
    p = KernelParams(kc=256, mc=192, mr=6, nc=8192, nr=64)
    unique = 4.0 * (512 * 256 + 256 * 1024 + 512 * 1024)
    compute = kernel_compute_s(1, 512, 1024, 256, p, 4, 4.0 * 512 * 1024, cached_host)
    assert traffic_floor_s(unique, 4.0 * 256 * 1024, True, 64, 4, cached_host) < compute
    assert plain_kernel_parts(1, 512, 1024, 256, p, 4, cached_host)[0] == compute


def test_a_tile_that_leaves_a_short_remainder_wastes_lanes():
    # costmodel.rates.lane_use: 12 columns in tiles of 8 run 8 + 4, two vectors for 1.5
    from costmodel.rates import lane_use
    assert lane_use(12, 12, 8) == 1.0
    assert lane_use(8, 12, 8) == pytest.approx(0.75)
    assert lane_use(6, 12, 8) == pytest.approx(0.75)
    assert lane_use(3, 12, 8) == pytest.approx(0.375)
    assert lane_use(16, 64, 8) == 1.0 and lane_use(4, 4, 8) == 0.5
    w = load_workload(str(TINY_BMM))
    dev = replace(costmodel.preset("cpu"), vector_width=8)

    def fused(tiles):
        c = Candidate.from_dict({"fused": ["z->y"], "layouts": {}, "name": "", "schedules": [
            {"anchor": "y", "impl": "loop", "tiles": tiles}]})
        return costmodel.estimate(w, c, dev).groups[0]
    whole, eights = fused([128, 8, 12]), fused([128, 8, 8])
    assert eights.predicted_s > whole.predicted_s and eights.flops == whole.flops



def test_tiles_dealt_a_chunk_at_a_time_leave_cores_idle_when_the_chunks_are_few():
    # costmodel.rates.loop_occupancy: three tiles on two cores run in two waves (3/4 busy);
    # dealt three at a time they are one core's work (1/2)
    from costmodel.rates import loop_occupancy
    w = load_workload(str(TINY_BMM))
    dev = replace(costmodel.preset("cpu"), parallel_units=2)
    members = tuple(op.out for op in w.ops)
    assert loop_occupancy(w, members, 3, dev) == (pytest.approx(0.75), False)
    assert loop_occupancy(w, members, 3, dev, chunk=3) == (pytest.approx(0.5), False)
    assert loop_occupancy(w, members, 64, dev, chunk=16) == (pytest.approx(1.0), False)
    assert loop_occupancy(w, members, 48, dev, chunk=16)[0] == pytest.approx(48 / 64)
    # a GPU's blocks are not dealt in chunks: the chunk leaves its occupancy as it is
    gpu = costmodel.preset("h100")
    assert loop_occupancy(w, members, 3, gpu, chunk=3) == loop_occupancy(w, members, 3, gpu)


def test_c_passes_of_a_batched_product_whose_items_fit_the_cache_are_cached_traffic():
    from costmodel.kernel_cost import micro_calls_s, plain_kernel_parts
    from costmodel.kernel_traffic import c_passes, live_c_bytes
    from search_spaces.kernel import KernelParams
    # 16 items of 702 x 702 x 702 in a 16 MB cache: C 31.5 MB, an item's 2 MB
    base = costmodel.preset("cpu")
    dev = replace(base, cache_bytes=16e6, parallel_units=2,
                  kernel=KernelCosts(cached_traffic=0.25))
    c, item_c = 16 * 702 * 702 * 4.0, 702 * 702 * 4.0
    assert live_c_bytes(c, 16, False, dev) == item_c
    assert live_c_bytes(c, 16, True, dev) == 2 * item_c
    assert live_c_bytes(c, 1, True, dev) == c
    # KC 192: four slices, six further passes, at the cached share
    assert c_passes(c, 702, 192, dev, item_c) == pytest.approx(1 + 6 * 0.25)
    # what the threads hold outgrows the cache, or C as a whole fits it (traffic_share prices
    # that): every pass at the bandwidth
    assert c_passes(c, 702, 192, dev, 20e6) == 7
    assert c_passes(8e6, 702, 192, dev, 8e6) == 7
    assert c_passes(c, 702, 768, dev, item_c) == 1
    # the model's time: KC 192 costs 6 x 0.25 more passes over C than KC 768, not 6 (and its
    # micro-kernel's calls, four times as many)
    times, calls = {}, {}
    for kc in (192, 768):
        p = KernelParams(kc=kc, mc=144, mr=6, nc=8192, nr=16, split="batch", vec_bytes=32)
        times[kc] = sum(plain_kernel_parts(16, 702, 702, 702, p, 4, dev))
        calls[kc] = micro_calls_s(16, 702, 702, 702, p, 4, dev)
    extra = times[192] - times[768] - (calls[192] - calls[768])
    assert extra == pytest.approx(6 * 0.25 * c / dev.bandwidth)
