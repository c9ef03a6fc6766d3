"""The cost model applies each calibrated term (costmodel/rates.py): GEMM rates by shape class,
bandwidth by access pattern, per-function transcendental costs, region and call overheads; and
with the neutral defaults it is the line-granularity model the GPU presets keep; the Hopper
presets' GEMM classes reproduce cuBLAS's rates measured on an H200."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

import costmodel
from costmodel.devices import CPU_DEFAULT, AccessCosts, DeviceSpec, FunctionCosts, GemmShapes
from costmodel.rates import (BATCHED_SMALL, SKINNY_K, SKINNY_MN, copy_waste, gemm_efficiency,
                             gemm_rate, pattern_waste, precision_rate, shape_law,
                             transcendental_weight)
from search_spaces import load_workload
from search_spaces.loader import builtin_names
from search_spaces.candidate import IMPL_LIBRARY, GroupSchedule, make_candidate
from search_spaces.footprint import plan_group
from search_spaces.partition import groups
from search_spaces.plans import named_plan
from search_spaces.serial import loop_group_serial
from search_spaces.space import SearchSpace
from tests.support import ROOT
from tests.support.workloads import workload

# the cpu spec with every calibrated section at its neutral value
NEUTRAL = replace(CPU_DEFAULT, gemm_shapes=GemmShapes(), access=AccessCosts(),
                  functions=FunctionCosts(), region_s=0.0, thread_start_s=0.0, library_call_s=0.0)


def total(w, cand, spec: DeviceSpec) -> float:
    return costmodel.estimate(w, cand, spec).total_s


# ---- neutral defaults ------------------------------------------------------------------------

@pytest.mark.parametrize("spread", [1, 2, 3.5, 4, 8, 16])
def test_the_line_granularity_ratio_gives_the_spread_itself(spread):
    assert pattern_waste(spread, 16.0) == pytest.approx(spread)
    assert pattern_waste(1, 40.0) == 1.0 and pattern_waste(16, 40.0) == pytest.approx(40.0)
    assert 1.0 < pattern_waste(4, 40.0) < 40.0


def test_gpu_presets_keep_the_neutral_sections():
    # the Hopper presets' GEMM classes are measured (below); the rest stays neutral
    for name in ("a100", "h100", "h200"):
        dev = costmodel.preset(name)
        assert (dev.access, dev.functions) == (AccessCosts(), FunctionCosts())
        assert dev.region_s == dev.thread_start_s == dev.library_call_s == 0.0
    assert costmodel.preset("a100").gemm_shapes == GemmShapes()


# cuBLAS 13 on the H200 (bench/results/h200-dda7f13/gpu_gemm_shapes.json): (batch, m, n, k),
# precision, the rows' case prefix
MEASURED = [((128, 702, 702, 702), "fp32", "einsum fp32"),
            ((128, 702, 702, 702), "tf32", "einsum tf32"),
            ((1, 492804, 128, 128), "fp32", "projection fp32 492804x128 @ 128x128"),
            ((1, 492804, 128, 128), "tf32", "projection tf32 492804x128 @ 128x128"),
            ((1, 492804, 640, 128), "tf32", "projection tf32 492804x128 @ 128x640")]


@pytest.mark.parametrize("shape,precision,case", MEASURED, ids=[m[2] for m in MEASURED])
def test_hopper_gemm_rates_reproduce_the_h200_measurements(shape, precision, case):
    rows = json.loads((ROOT / "bench" / "results" / "h200-dda7f13" / "gpu_gemm_shapes.json"
                       ).read_text())["rows"]
    got = [r["flops"] / r["seconds"] for r in rows if r["case"].startswith(case)]
    assert got
    rate, products = precision_rate(costmodel.preset("h200"), precision, *shape)
    assert products == 1
    assert 0.75 < rate / float(np.median(got)) < 1.33, (rate, got)


def test_three_tf32_products_lose_to_sgemm_on_the_batched_einsum_on_hopper():
    # measured: 3.3 ms against 2.0 ms; gated_mlp's 4096 x 1024 x 4096 won (0.40 against 0.70)
    dev = costmodel.preset("h200")
    for shape, wins in (((128, 702, 702, 702), False), ((1, 4096, 4096, 1024), True)):
        fp32 = precision_rate(dev, "fp32", *shape)[0]
        rate, products = precision_rate(dev, "3xtf32", *shape)
        assert products == 3 and (rate / products > fp32) == wins


def test_device_spec_round_trips_through_a_dict():
    assert DeviceSpec.from_dict(json.loads(json.dumps(CPU_DEFAULT.to_dict()))) == CPU_DEFAULT
    h200 = costmodel.preset("h200")
    assert DeviceSpec.from_dict(json.loads(json.dumps(h200.to_dict()))) == h200


# ---- GEMM rate by shape class ----------------------------------------------------------------

def test_each_class_factor_holds_at_its_measuring_shape_and_fades_out():
    spec = replace(NEUTRAL, gemm_shapes=GemmShapes(skinny_k=0.5, skinny_mn=0.25,
                                                   batched_small=0.4))
    big = 4096
    # at and below the measuring dim, the factor; from the end dim on, nothing
    assert gemm_efficiency(spec, 1, big, big, SKINNY_K[0]) == pytest.approx(0.5)
    assert gemm_efficiency(spec, 1, big, big, SKINNY_K[1]) == pytest.approx(1.0)
    mid = gemm_efficiency(spec, 1, big, big, 256)
    assert 0.5 < mid < 1.0 and mid == pytest.approx(0.5 ** (1 - 1 / 3))   # log-linear
    assert gemm_efficiency(spec, 1, SKINNY_MN[0], big, big) == \
        pytest.approx(0.25 * shape_law(SKINNY_MN[0], big, big))
    assert gemm_efficiency(spec, 1, big, SKINNY_MN[1], big) == pytest.approx(1.0)
    # batched only when there is a batch
    s = BATCHED_SMALL[0]
    one = gemm_efficiency(spec, 1, s, s, s)
    assert gemm_efficiency(spec, 8, s, s, s) == pytest.approx(0.4 * one)
    assert gemm_efficiency(spec, 8, 1024, 1024, 1024) == pytest.approx(1.0)
    # the rate never jumps as a dim crosses a class boundary
    for k in (SKINNY_K[0], SKINNY_K[1]):
        lo, hi = gemm_rate(spec, 1, big, big, k - 1), gemm_rate(spec, 1, big, big, k + 1)
        assert hi == pytest.approx(lo, rel=0.01)


def test_a_slower_skinny_k_class_slows_the_trimul_projections_only():
    w = load_workload("trimul_outgoing", {"N": 96, "C": 128})
    cand = named_plan(SearchSpace(w), "heuristic")
    fast = costmodel.estimate(w, cand, NEUTRAL)
    slow = costmodel.estimate(w, cand, replace(NEUTRAL, gemm_shapes=GemmShapes(skinny_k=0.25)))
    changed = {g.anchor for g, h in zip(fast.groups, slow.groups) if h.predicted_s > g.predicted_s}
    # the projections (K = C = 128) are in the class; the triangle einsum (K = N) is not
    assert {"pa", "ga", "pb", "gb"} <= changed
    for g, h in zip(fast.groups, slow.groups):
        if g.impl != IMPL_LIBRARY or w.op(g.anchor).extent(w.op(g.anchor).reduction[0]) > 128:
            assert h.predicted_s == g.predicted_s


# ---- bandwidth by access pattern -------------------------------------------------------------

TRANSPOSE = "y[j,i] = x[i,j] * 2.0\n"


def transposing_group(tiles, n: int = 4096):
    w = workload(TRANSPOSE, {"I": n, "J": n}, {"x": ["I", "J"]}, ["y"])
    return w, make_candidate([], {}, [GroupSchedule("y", tiles)], "t")


def test_a_cheaper_strided_write_predicts_a_transposing_group_faster():
    w, cand = transposing_group((4096, 1))       # tiles along j: the write walks i, strided
    slow = total(w, cand, NEUTRAL)
    fast = total(w, cand, replace(NEUTRAL, access=AccessCosts(strided_write=8.0)))
    assert fast < slow
    assert total(w, cand, replace(NEUTRAL, access=AccessCosts(strided_read=8.0))) == slow
    # a write of 64 MB in whole lines at 16x, or at 8x: the difference is 8 x 64 MB
    assert slow - fast == pytest.approx(8 * 4096 * 4096 * 4 / NEUTRAL.bandwidth, rel=1e-6)


def test_a_cheaper_strided_read_predicts_a_strided_reading_group_faster():
    w, cand = transposing_group((1, 4096))       # tiles along i: the read walks j, strided
    slow = total(w, cand, NEUTRAL)
    assert total(w, cand, replace(NEUTRAL, access=AccessCosts(strided_read=8.0))) < slow
    assert total(w, cand, replace(NEUTRAL, access=AccessCosts(strided_write=8.0))) == slow


def test_a_blocked_transpose_pays_no_pattern_cost():
    # each tile's box stays in the private cache: rows of 4,160 floats put its 64 lines in 64
    # different sets of L1
    w, cand = transposing_group((64, 64), 4160)
    base = total(w, cand, NEUTRAL)
    assert total(w, cand, replace(NEUTRAL, access=AccessCosts(1.0, 1.0, 1.0))) == base


def test_a_blocked_transpose_of_power_of_two_rows_walks_its_stores_along_rows():
    # rows of 4,096 floats: walking the reads' rows, the tile's 64 stores a step would be lines
    # 16 KiB apart in one set of L1, each a miss that reads its line back; the walk goes along
    # the stores' rows instead (cache_walk.inner_nest), gathering the reads, whose lines are
    # found in the outer caches.  Measured (2-core AVX-512 host, 4096^2, best of 7): tiles
    # 64 x 64 16.5 ms walking the stores' rows, 57 ms the reads' (32 x 32: 11 against 49-56)
    w, cand = transposing_group((64, 64))
    base = total(w, cand, NEUTRAL)
    assert total(w, cand, replace(NEUTRAL, access=AccessCosts(strided_write=8.0))) == base
    (g,) = groups(w, cand.fused_pairs)
    (mp,) = plan_group(w, g, (64, 64), lambda t: (0, 1))
    assert mp.order[-1] == w.op("y").parallel[1]      # y[j, i]: i, the stores' unit stride


def test_doubled_transpose_bandwidth_predicts_a_copying_gemm_faster():
    # a[k,i,l]: the K group (k, l) is not nested in storage, so the executor copies a into the
    # (i, k l) matrix before BLAS, in runs of l's two elements: a line's eighth each
    dims = {"I": 512, "J": 512, "K": 64, "L": 2}
    w = workload("c[i,j] += a[k,i,l] * b[k,l,j]\n", dims,
                 {"a": ["K", "I", "L"], "b": ["K", "L", "J"]}, ["c"])
    cand = named_plan(SearchSpace(w), "unfused")
    assert cand.schedules[0].impl == IMPL_LIBRARY
    fast_spec = replace(NEUTRAL, access=AccessCosts(transpose_copy=8.0))
    slow, fast = total(w, cand, NEUTRAL), total(w, cand, fast_spec)
    a_bytes = 64 * 512 * 2 * 4
    assert copy_waste(2, NEUTRAL) == pytest.approx(8.0)      # a line per two elements
    assert slow - fast == pytest.approx(
        2 * a_bytes * (8.0 - copy_waste(2, fast_spec)) / NEUTRAL.bandwidth, rel=1e-6)
    assert slow > fast


@pytest.mark.parametrize("run, waste", [(2, 8.0), (4, 4.0), (16, 1.0), (64, 1.0)])
def test_a_staged_copy_costs_by_the_runs_both_sides_share(run, waste):
    """A copy whose two sides share runs of a whole line moves whole lines: a streaming copy,
    whatever ``transpose_copy`` is (rates.copy_waste); shorter runs cost geometrically more,
    up to the transpose for single elements (``copy_waste(1)``).  The runs come from the
    layouts (gemm.staged_run): a[k,i,l] stored as it reads keeps l's L elements together in
    the (i, k l) matrix."""
    dims = {"I": 512, "J": 512, "K": 64, "L": run}
    w = workload("c[i,j] += a[k,i,l] * b[k,l,j]\n", dims,
                 {"a": ["K", "I", "L"], "b": ["K", "L", "J"]}, ["c"])
    cand = named_plan(SearchSpace(w), "unfused")
    a_bytes = 64 * 512 * run * 4
    half = replace(NEUTRAL, access=AccessCosts(transpose_copy=8.0))
    free = replace(NEUTRAL, access=AccessCosts(transpose_copy=1.0))
    # NEUTRAL's transpose_copy is 16, a line per element: the waste is the lines a run wastes
    assert total(w, cand, NEUTRAL) - total(w, cand, free) == pytest.approx(
        2 * a_bytes * (waste - 1) / NEUTRAL.bandwidth, rel=1e-6, abs=1e-12)
    assert (total(w, cand, half) < total(w, cand, NEUTRAL)) == (waste > 1)


# ---- transcendentals, regions, calls ---------------------------------------------------------

def test_each_function_has_its_own_cost():
    w = workload("q[i,j] = exp(x[i,j]) + sqrt(x[i,j])\n", {"I": 64, "J": 64}, {"x": ["I", "J"]},
                 ["q"])
    cand = named_plan(SearchSpace(w), "unfused")
    base = total(w, cand, NEUTRAL)
    dearer_exp = replace(NEUTRAL, functions=FunctionCosts(exp=NEUTRAL.transcendental_flops * 3))
    assert total(w, cand, dearer_exp) > base
    # only the functions present count: a dearer tanh changes nothing
    assert total(w, cand, replace(NEUTRAL, functions=FunctionCosts(tanh=1e4))) == base
    gc = costmodel.estimate(w, cand, dearer_exp).groups[0]
    assert gc.transcendentals == 2 * 64 * 64          # the count stays a count


def test_a_call_that_does_not_vary_along_the_innermost_loop_is_priced_once_a_pass():
    # the CPU loops compute exp(u[i]) once a row of j (autotune.backends.cpu.hoist): a dearer
    # exp raises the price of exp(v[i,j]) with every element, of exp(u[i]) with every row
    dims = {"I": 64, "J": 256}
    inv = workload("y[i,j] = x[i,j] * exp(u[i])\n", dims, {"x": ["I", "J"], "u": ["I"]}, ["y"])
    var = workload("y[i,j] = x[i,j] * exp(v[i,j])\n", dims, {"x": ["I", "J"], "v": ["I", "J"]},
                   ["y"])
    dear = replace(NEUTRAL, functions=FunctionCosts(exp=NEUTRAL.transcendental_flops * 1000))

    def rise(w):
        cand = named_plan(SearchSpace(w), "unfused")
        return total(w, cand, dear) - total(w, cand, NEUTRAL)
    assert rise(var) > 0
    assert 0 <= rise(inv) < rise(var) / 100


@pytest.mark.parametrize("name", builtin_names())
def test_equal_function_weights_count_what_count_flops_counts(name):
    w = load_workload(name)         # parsing only: the default dims cost nothing here
    same = replace(NEUTRAL, functions=FunctionCosts(*[7.0] * 6))
    for op in w.ops:
        assert transcendental_weight(op.expr, same) == 7.0 * op.flops_per_iteration()[1]
        assert transcendental_weight(op.expr, NEUTRAL) == \
            NEUTRAL.transcendental_flops * op.flops_per_iteration()[1]


def test_region_and_thread_start_are_charged_per_loop_group_and_library_calls_apart():
    # (dims past search_spaces.serial's bounds: a group run on the calling thread wakes none)
    w = load_workload("gated_mlp", {"T": 128, "C": 64, "F": 64})
    cand = named_plan(SearchSpace(w), "unfused")
    assert not any(loop_group_serial(w, g.members) for g in groups(w, cand.fused_pairs))
    est = costmodel.estimate(w, cand, NEUTRAL)
    loops = sum(g.impl != IMPL_LIBRARY for g in est.groups)
    libs = len(est.groups) - loops
    assert loops and libs
    dev = replace(NEUTRAL, region_s=1e-3, thread_start_s=2e-3, library_call_s=5e-3)
    extra = dev.region_s + dev.thread_start_s * (dev.parallel_units - 1)
    assert total(w, cand, dev) - est.total_s == pytest.approx(loops * extra + libs * 5e-3)


def test_the_cpu_default_is_calibrated_past_the_neutral_values():
    # the shipped cpu defaults come from `autotune calibrate` on the development machine
    assert CPU_DEFAULT.access != AccessCosts() and CPU_DEFAULT.gemm_shapes != GemmShapes()
    assert all(getattr(CPU_DEFAULT.functions, f) is not None for f in
               ("exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh"))
    assert CPU_DEFAULT.region_s > 0 and CPU_DEFAULT.thread_start_s > 0
    assert all(math.isfinite(v) and v > 0 for v in (
        CPU_DEFAULT.access.strided_read, CPU_DEFAULT.access.strided_write,
        CPU_DEFAULT.access.transpose_copy))


def test_copy_waste_runs_from_the_transpose_to_a_streaming_copy():
    spec = replace(NEUTRAL, access=AccessCosts(transpose_copy=9.75))
    assert copy_waste(1, spec) == pytest.approx(9.75)
    assert copy_waste(16, spec) == copy_waste(1 << 20, spec) == pytest.approx(1.0)
    wastes = [copy_waste(r, spec) for r in (1, 2, 3, 4, 8, 16)]
    assert wastes == sorted(wastes, reverse=True) and len(set(wastes)) == len(wastes)
