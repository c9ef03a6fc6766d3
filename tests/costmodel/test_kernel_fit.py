"""The generated kernel's cost terms: which parameter choices the model prices (occupancy,
barriers, the calibrated factors), and the calibration's fit, which must recover factors it is
given (synthetic times made by the model itself, with noise) and leave a factor the samples
cannot tell apart at 1."""
from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from autotune.backends.cpu.kernel_probe import random_params
from costmodel.devices import CPU_DEFAULT, KernelCosts
from costmodel.kernel_cost import kernel_compute_s, kernel_threads, plain_kernel_s
from costmodel.kernel_factors import b_block_excess, kernel_flags
from costmodel.kernel_fit import KernelSample, fit_kernel_costs
from search_spaces.kernel import KernelBounds, KernelParams

BOUNDS = KernelBounds(vec_bytes=(64, 32, 16), registers=32, cores=2)
SHAPES = ((1, 512, 1024, 256), (8, 256, 256, 32), (1, 4096, 512, 128), (1, 512, 2048, 512))


def params(**kw) -> KernelParams:
    base = dict(mr=6, nr=64, mc=192, kc=256, nc=8192, vec_bytes=64)
    return KernelParams(**{**base, **kw})


def test_the_flags_of_a_configuration():
    dev = CPU_DEFAULT
    p = params(mr=4, nr=16, pack_a=False, stream=True, outer="a")
    on = kernel_flags(p, 4, 128, 256, 1e6, dev)
    assert on == {"stream_cached": 1.0, "unpacked_a": 1.0, "unpacked_a_short": 0.0,
                  "unpacked_b": 0.0, "short_tile": 1.0, "one_vector": 1.0, "outer_a": 1.0,
                  "outer_a_spill": 0.0, "split_n": 0.0}
    assert kernel_flags(params(split="n"), 4, 128, 256, 1e6, dev)["split_n"] == 1.0
    # streaming pays off (no factor) when C outgrows the cache or takes more than one K slice
    assert not kernel_flags(p, 4, 128, 1024, 10 * dev.cache_bytes, dev)["stream_cached"]
    assert not kernel_flags(p, 4, 512, 1024, 1e6, dev)["stream_cached"]
    assert kernel_flags(None, 4, 128, 1024, 1e6, dev) == {}


def test_the_a_panel_outer_order_pays_for_a_b_block_past_half_the_l2():
    """outer=a sweeps the KC x NC block of B once per A micro-panel: its spill factor's
    exponent is the block's excess over half the core's L2, in L2s, and nothing for outer=b."""
    dev = replace(CPU_DEFAULT, tile_cache_bytes=2 * 2**20)
    p = params(outer="a", kc=256, nc=8192)
    # 256 x 1024 floats: 1 MiB, half the L2: no excess; 256 x 2048: 2 MiB, half an L2 past
    assert b_block_excess(p, 4, 512, 1024, dev) == 0.0
    assert b_block_excess(p, 4, 512, 2048, dev) == pytest.approx(0.5)
    # the block is KC deep at most (K shorter: K) and NC wide at most, in whole micro-panels
    assert b_block_excess(p, 4, 128, 4096, dev) == pytest.approx(0.5)
    assert b_block_excess(params(outer="a", kc=256, nc=1024), 4, 512, 4096, dev) == 0.0
    assert b_block_excess(p, 4, 512, 1000, dev) == b_block_excess(p, 4, 512, 1024, dev)
    assert b_block_excess(p, 8, 512, 2048, dev) == pytest.approx(1.5)
    # split "n": each thread sweeps its own chunk of columns, an even share at most (two
    # cores: 1024 of 2048 columns, no excess where the shared block has half an L2)
    two = replace(dev, parallel_units=2)
    assert b_block_excess(params(outer="a", kc=256, split="n"), 4, 512, 2048, two) == 0.0
    assert kernel_flags(p, 4, 512, 2048, 1e9, dev)["outer_a_spill"] == pytest.approx(0.5)
    assert kernel_flags(params(kc=256), 4, 512, 2048, 1e9, dev)["outer_a_spill"] == 0.0
    # the factor is raised to that exponent: the same block on a core with half the L2
    # (1.5 L2s past) pays it three times over
    base = replace(dev, f32_flops=0.0, kernel=KernelCosts())
    dear = replace(base, kernel=KernelCosts(outer_a_spill=2.0))
    for l2, f in ((2 * 2**20, 2.0 ** 0.5), (2**20, 2.0 ** 1.5), (8 * 2**20, 1.0)):
        args = (1, 512, 2048, 512, p, 4, 4e6)
        got = kernel_compute_s(*args, replace(dear, tile_cache_bytes=l2))
        assert got == pytest.approx(f * kernel_compute_s(*args, replace(base,
                                                                        tile_cache_bytes=l2)))


def test_a_read_in_place_is_priced_by_its_rows_length():
    # float32 rows of 64 elements (256 bytes) are short, 65 long; float64 rows half as many
    p = params(pack_a=False)
    for kk, item, short in ((32, 4, True), (64, 4, True), (65, 4, False), (256, 4, False),
                            (32, 8, True), (33, 8, False)):
        on = kernel_flags(p, item, kk, 1024, 1e6, CPU_DEFAULT)
        assert (on["unpacked_a_short"], on["unpacked_a"]) == (short, not short), (kk, item)
    packed = kernel_flags(params(), 4, 32, 1024, 1e6, CPU_DEFAULT)
    assert not packed["unpacked_a"] and not packed["unpacked_a_short"]
    # each factor scales only its own configurations' arithmetic (no FMA peak to bound it)
    base = replace(CPU_DEFAULT, f32_flops=0.0, kernel=KernelCosts())
    dev = replace(base, kernel=KernelCosts(unpacked_a=2.0, unpacked_a_short=0.5))
    for kk, f in ((32, 0.5), (256, 2.0)):
        got = kernel_compute_s(1, 512, 1024, kk, p, 4, 1e6, dev)
        assert got == pytest.approx(f * kernel_compute_s(1, 512, 1024, kk, p, 4, 1e6, base))
        packed = params()
        assert kernel_compute_s(1, 512, 1024, kk, packed, 4, 1e6, dev) == pytest.approx(
            kernel_compute_s(1, 512, 1024, kk, packed, 4, 1e6, base))


def test_threads_split_items_or_rows():
    dev = replace(CPU_DEFAULT, parallel_units=4)
    # 6 items on 4 cores: two waves, the second half idle
    assert kernel_threads(6, 64, 64, 32, params(split="batch"), dev) == (0.75, 0)
    # split m: B's panels packed on demand, one barrier after the row blocks, per column block
    # and item where all K slices of a column block fit in PACK_ALL_BYTES (512 x 512 floats)
    occ, barriers = kernel_threads(3, 4096, 1024, 512, params(nc=512, kc=256), dev)
    assert occ == 1.0 and barriers == 3 * 2
    # ... and per K slice where they do not (4096 x 512 floats: 8 MiB)
    assert kernel_threads(3, 4096, 1024, 4096, params(nc=512, kc=256), dev)[1] == 3 * 2 * 16
    # B read in place: nothing shared, no barrier (gemm_driver: nowait between K slices)
    assert kernel_threads(3, 4096, 1024, 512, params(nc=512, kc=256, pack_b=False),
                          dev)[1] == 0
    # fewer rows than threads x the register tile, one micro-panel of columns: threads idle
    assert kernel_threads(1, 6, 64, 32, params(), dev)[0] == 0.25
    # ... with columns to cut, every thread takes a chunk of them (gemm_driver: a decoding
    # step's 4 tokens through a weight on two cores)
    assert kernel_threads(1, 6, 1024, 32, params(), dev)[0] == 1.0
    two = replace(CPU_DEFAULT, parallel_units=2)
    gemv = params(mr=4, nr=24, mc=48, kc=256, nc=4096, pack_b=False)
    assert kernel_threads(1, 4, 3072, 768, gemv, two)[0] == 1.0
    assert kernel_threads(1, 64, 3072, 768, gemv, two)[0] == 1.0
    assert kernel_threads(1, 4, 24, 768, gemv, two)[0] == 0.5    # one micro-panel: not cut
    # one item cannot be split by batch: it falls back to rows
    assert kernel_threads(1, 4096, 64, 32, params(split="batch"), dev)[1] == 1


def test_split_n_deals_column_chunks_and_reads_a_once_per_chunk():
    """Split n: chunks of whole micro-panels, at most NC and an even share of the columns,
    dealt as threads come free: no barrier, idle cores only in the last wave; A is read (and
    packed) once per chunk, where split m reads it once per column block."""
    from search_spaces.kernel import column_chunk
    from costmodel.kernel_cost import plain_kernel_parts
    two = replace(CPU_DEFAULT, parallel_units=2)
    p = params(mr=6, nr=64, nc=512, split="n")
    assert column_chunk(2048, p, 2) == 512 and column_chunk(256, p, 2) == 128
    assert column_chunk(100, params(nr=32, split="n"), 2) == 64      # 4 panels, 2 each
    assert column_chunk(2048, params(nc=512), 2) == 512                # split m: NC
    assert kernel_threads(1, 512, 2048, 256, p, two) == (1.0, 0)      # 4 chunks, 2 waves
    assert kernel_threads(1, 512, 1536, 256, p, two) == (0.75, 0)     # 3 chunks, 2 waves
    assert kernel_threads(1, 512, 100, 256, params(nr=32, split="n"), two)[0] == \
        pytest.approx(100 / 128)                                      # 2 chunks, 1 narrower
    # A's traffic: 4 chunks read it 4 times, split m's one column block of 2048 once
    wide_m, wide_n = params(nc=2048), params(nc=512, split="n")
    bare = replace(two, kernel=KernelCosts(), f32_flops=0.0)
    rest_m = plain_kernel_parts(1, 4096, 2048, 256, wide_m, 4, bare)[1]
    rest_n = plain_kernel_parts(1, 4096, 2048, 256, wide_n, 4, bare)[1]
    assert rest_n > rest_m


def test_factors_and_barriers_move_the_time():
    neutral = replace(CPU_DEFAULT, kernel=KernelCosts(barrier_s=10e-6))
    dev = replace(neutral, kernel=KernelCosts(short_tile=1.5, barrier_s=10e-6))
    short = params(mr=4)
    barriers = kernel_threads(1, 4096, 512, 128, short, dev)[1] * 10e-6
    assert barriers == 10e-6
    plain = kernel_compute_s(1, 4096, 512, 128, short, 4, 8e6, neutral)
    # the factor scales the arithmetic, not the barriers
    assert kernel_compute_s(1, 4096, 512, 128, short, 4, 8e6, dev) == \
        pytest.approx(1.5 * (plain - barriers) + barriers)
    # a configuration no factor applies to is priced the same on both
    assert kernel_compute_s(1, 4096, 512, 128, params(), 4, 8e6, dev) == \
        kernel_compute_s(1, 4096, 512, 128, params(), 4, 8e6, neutral)


def test_items_in_lockstep_pay_a_wait_that_split_batch_does_not():
    """Split m over a batch meets at every item's barrier (the faster thread waits): its
    arithmetic pays LOCKSTEP_WAIT more than split batch's, which had priced the two alike
    (the triangle einsum of trimul N=702 ran 25 % faster split batch, its plan ~9 %)."""
    from costmodel.kernel_factors import LOCKSTEP_WAIT, lockstep_factor
    dev = replace(CPU_DEFAULT, parallel_units=2, kernel=KernelCosts(barrier_s=0.0),
                  f32_flops=0.0)
    shape = (8, 702, 702, 702)
    lock = kernel_compute_s(*shape, params(), 4, 4e6, dev)
    apart = kernel_compute_s(*shape, params(split="batch"), 4, 4e6, dev)
    assert lock == pytest.approx((1 + LOCKSTEP_WAIT) * apart) and LOCKSTEP_WAIT > 0
    assert plain_kernel_s(*shape, params(), 4, dev) > plain_kernel_s(*shape, params(
        split="batch"), 4, dev)
    # one item (split m is the only way to share it), fewer items than cores, or no
    # parameters: no alternative, no factor
    assert lockstep_factor(params(), 1, dev) == lockstep_factor(None, 8, dev) == 1.0
    assert lockstep_factor(params(), 3, replace(dev, parallel_units=4)) == 1.0
    assert lockstep_factor(params(), 4, replace(dev, parallel_units=4)) == 1 + LOCKSTEP_WAIT


def test_no_configuration_is_priced_above_the_fma_peak():
    fast = replace(CPU_DEFAULT, f32_flops=200e9, kernel_flops=300e9,
                   kernel=KernelCosts(outer_a=0.5, barrier_s=0.0))
    shape, p = (1, 512, 1024, 256), params(outer="a", mr=6, nr=16, vec_bytes=32)
    flops = 2.0 * math.prod(shape)
    occ, _ = kernel_threads(*shape, p, fast)
    t = kernel_compute_s(*shape, p, 4, 8e6, fast)
    # 300 GFLOP/s / 0.5 would be 600: the peak (on the cores and lanes it keeps busy) holds
    assert t >= flops / 200e9 and t == pytest.approx(
        kernel_compute_s(*shape, p, 4, 8e6, replace(fast, kernel_flops=200e9)))
    # float64 has half the lanes: half the peak
    assert kernel_compute_s(*shape, p, 8, 8e6, fast) == pytest.approx(2 * t)
    # a peak nobody measured (0) bounds nothing
    free = replace(fast, f32_flops=0.0)
    assert kernel_compute_s(*shape, p, 4, 8e6, free) < t
    assert occ == 1.0


def test_the_fitted_rate_is_held_at_the_peak():
    """Samples whose no-factor rate would be 150 GFLOP/s, on a machine whose FMA peak is 120:
    the rate is held at 120 and the factors fitted around it still rank the choices."""
    truth = KernelCosts(short_tile=1.3, one_vector=1.2, barrier_s=0.0)
    # operands past the cache: no share of the traffic to trade for the rate (a smaller share
    # is what a rate above the peak usually says, as on the Xeon: kernel_cost.traffic_share)
    unbounded = replace(CPU_DEFAULT, f32_flops=0.0, cache_bytes=1e5)
    samples = synthetic(truth, 150e9, 0.0, 3, unbounded)
    fit = fit_kernel_costs(samples, replace(CPU_DEFAULT, f32_flops=120e9, cache_bytes=1e5))
    assert fit.costs.cached_traffic == 1.0
    assert fit.kernel_flops == pytest.approx(120e9)
    assert fit.costs.short_tile > 1.05 and fit.costs.one_vector > 1.0
    # free of the peak, the same samples give back the rate they were made with
    assert fit_kernel_costs(samples, unbounded).kernel_flops == pytest.approx(150e9, rel=0.01)


def test_a_kernel_call_costs_its_set_up_beyond_a_loop_groups(small):
    """Every kernel group pays the calibrated kernel_call_s once, whatever its size: a whole
    plan's kernel groups and the kernel alone (what the calibration fits its rate on) alike."""
    from costmodel import estimate
    from tests.autotune.backends.test_kernel_epilogue import kernel_plan, space_of
    base = replace(CPU_DEFAULT, kernel_call_s=0.0)
    dear = replace(CPU_DEFAULT, kernel_call_s=50e-6)
    assert plain_kernel_s(1, 8, 8, 8, params(), 4, dear) == \
        pytest.approx(plain_kernel_s(1, 8, 8, 8, params(), 4, base) + 50e-6)
    w = small("trimul_outgoing")
    cand = kernel_plan(space_of(w), 0)
    kernels = sum(s.impl == "kernel" for s in cand.schedules)
    assert kernels >= 3
    assert estimate(w, cand, dear).total_s == \
        pytest.approx(estimate(w, cand, base).total_s + kernels * 50e-6)


def synthetic(costs: KernelCosts, rate: float, noise: float, seed: int,
              base=CPU_DEFAULT) -> list[KernelSample]:
    dev = replace(base, kernel_flops=rate, kernel=costs)
    r = random.Random(seed)
    out = []
    for i, shape in enumerate(SHAPES):
        for p in random_params(BOUNDS, shape[0], 30, seed + i):
            t = plain_kernel_s(*shape, p, 4, dev) * math.exp(r.gauss(0.0, noise))
            out.append(KernelSample(shape, p, t))
    return out


def test_the_fit_recovers_the_factors_it_is_given():
    truth = KernelCosts(stream_cached=1.6, unpacked_a=1.0, unpacked_b=1.2, short_tile=1.3,
                        one_vector=1.1, outer_a=0.9, outer_a_spill=2.0, barrier_s=16e-6)
    # a 512 KiB L2: the samples' B blocks range from inside half of it to a few L2s past
    dev = replace(CPU_DEFAULT, tile_cache_bytes=512 * 1024)
    samples = synthetic(truth, 150e9, 0.03, 0, dev)
    assert 0 < sum(kernel_flags(s.params, 4, s.shape[3], s.shape[2], 1e9, dev)["outer_a_spill"]
                   > 0 for s in samples) < len(samples)
    fit = fit_kernel_costs(samples, dev)
    assert fit.kernel_flops == pytest.approx(150e9, rel=0.05)
    for name in ("stream_cached", "unpacked_a", "unpacked_b", "short_tile", "one_vector",
                 "outer_a", "outer_a_spill"):
        assert getattr(fit.costs, name) == pytest.approx(getattr(truth, name), rel=0.06), name
    assert fit.costs.barrier_s == pytest.approx(16e-6, rel=0.5)
    assert fit.rms_log_after < fit.rms_log_before
    assert fit.rms_log_after < 0.06


def test_a_short_or_narrow_tile_is_never_fitted_faster():
    """Samples that say 4-row and one-vector tiles run faster (0.8): those factors are held at
    1 (AT_LEAST_ONE) and the others fitted around them."""
    truth = KernelCosts(short_tile=0.8, one_vector=0.8, outer_a=0.8, unpacked_b=1.2,
                        barrier_s=0.0)
    fit = fit_kernel_costs(synthetic(truth, 150e9, 0.0, 4), CPU_DEFAULT)
    assert fit.costs.short_tile == 1.0 and fit.costs.one_vector == 1.0
    # the rest absorbs what the held factors cannot say; the fit still explains more than the
    # rate alone
    assert fit.costs.outer_a < 1.0 and fit.rms_log_after < fit.rms_log_before
    # where the samples agree with the bound, nothing is held
    fit = fit_kernel_costs(synthetic(replace(truth, short_tile=1.3), 150e9, 0.0, 4),
                           CPU_DEFAULT)
    assert fit.costs.short_tile == pytest.approx(1.3, rel=0.06)


def test_a_choice_the_samples_never_vary_keeps_factor_one():
    samples = [s for s in synthetic(KernelCosts(short_tile=2.0), 150e9, 0.0, 1)
               if s.params.pack_a]
    fit = fit_kernel_costs(samples, CPU_DEFAULT)
    assert fit.costs.unpacked_a == 1.0
    assert fit.costs.short_tile == pytest.approx(2.0, rel=0.02)
    with pytest.raises(ValueError, match="no kernel samples"):
        fit_kernel_costs([], CPU_DEFAULT)


def test_a_prologue_is_priced_at_its_packing_rate_an_epilogue_at_the_vector_rate(small):
    """The packing routines apply a prologue element by element (gemm_pack.packers), at the
    rate prologue_rate gives; the epilogue works on the register tile's vectors."""
    from costmodel import estimate
    from costmodel.kernel_cost import prologue_flops, prologue_rate
    from search_spaces.gemm import gemm_form
    from search_spaces.kernel_fusion import kernel_parts
    from tests.autotune.backends.test_kernel_epilogue import kernel_plan, space_of
    w = small("trimul_outgoing")
    cand = kernel_plan(space_of(w), 0)
    with_prologue = [s.anchor for s in cand.schedules if s.impl == "kernel" and (
        kernel_parts(w, cand.fused_pairs, s.anchor).prologue_a
        or kernel_parts(w, cand.fused_pairs, s.anchor).prologue_b)]
    assert with_prologue, cand.to_json()
    wide, narrow = replace(CPU_DEFAULT, vector_width=8), replace(CPU_DEFAULT, vector_width=1)
    layout_of = lambda t: cand.layout(t, len(w.shapes[t]))
    for anchor in with_prologue:
        parts = kernel_parts(w, cand.fused_pairs, anchor)
        pro = [p.producer for p in (parts.prologue_a, parts.prologue_b) if p]
        assert len(pro) == 1
        x = w.op(pro[0])
        one = parts.prologue_a or parts.prologue_b
        form = gemm_form(w.op(parts.contraction))
        kc = cand.schedule(anchor).kernel.kc
        work = x.out_size * prologue_flops(w, form, one, kc, wide)
        rate = prologue_rate(w, form, one, layout_of, wide)
        assert rate in (wide.loop_flops, wide.loop_flops / 8)
        got = {dev.vector_width: next(g.predicted_s for g in estimate(w, cand, dev).groups
                                      if g.anchor == anchor) for dev in (wide, narrow)}
        # at one lane the scalar rate is the loop rate
        assert got[8] - got[1] == pytest.approx(
            work * (1 / rate - 1 / CPU_DEFAULT.loop_flops), rel=1e-6, abs=1e-15)


def test_a_prologue_runs_at_the_loop_rate_only_where_its_input_is_unit_stride():
    """The packers vectorise a prologue along the operand's rows or its K; a gate read
    channel-last by the triangle product (batch c innermost) gathers every element."""
    from costmodel.kernel_cost import prologue_rate
    from search_spaces.gemm import gemm_form
    from search_spaces.kernel_fusion import prologue_of
    from search_spaces.loader import load_workload
    w = load_workload("trimul_outgoing", {"N": 16, "C": 8})
    gate = prologue_of(w, "a", "t")
    form = gemm_form(w.op("t"))
    assert gate.main in ("ga", "pa")
    scalar, loop = CPU_DEFAULT.loop_flops / CPU_DEFAULT.vector_width, CPU_DEFAULT.loop_flops
    as_given = lambda t: tuple(range(len(w.shapes[t])))
    channel_first = lambda t: (2, 0, 1) if t == gate.main else as_given(t)
    assert prologue_rate(w, form, gate, as_given, CPU_DEFAULT) == scalar
    assert prologue_rate(w, form, gate, channel_first, CPU_DEFAULT) == loop
    norm = prologue_of(w, "tn", "po")        # t[i,j,h] row-major: its K, h, unit-stride
    assert prologue_rate(w, gemm_form(w.op("po")), norm, as_given, CPU_DEFAULT) == loop


def test_a_prologues_calls_that_k_leaves_alone_are_priced_once_per_row_slice():
    """A layer norm's ``rsqrt(var[row] + eps)`` does not vary along the contraction's K: the
    packing's K loop evaluates it once per row of its slice (GCC hoists it); a gate's sigmoid
    of the operand itself varies along K and is priced per element."""
    from costmodel.kernel_cost import prologue_flops
    from costmodel.rates import transcendental_weight
    from search_spaces.gemm import gemm_form
    from search_spaces.kernel_fusion import prologue_of
    from search_spaces.loader import load_workload
    w = load_workload("trimul_outgoing", {"N": 16, "C": 8})
    dev = CPU_DEFAULT
    norm = prologue_of(w, "tn", "po")            # tn = tc * rsqrt(var2[i,j] + eps) * w + b
    gate = prologue_of(w, "a", "t")              # a = mask * sigmoid(ga[i,k,h] + b) * (...)
    assert norm is not None and gate is not None
    for pro, hoisted in ((norm, True), (gate, False)):
        x = w.op(pro.producer)
        form = gemm_form(w.op(pro.contraction))
        f = x.flops_per_iteration()[0]
        calls = transcendental_weight(x.expr, dev)
        assert calls > 0
        k = 1
        for i in form.k:
            k *= w.op(pro.contraction).extent(i)
        for kc in (1, 4, 64):
            want = f + (calls / min(kc, k) if hoisted else calls)
            assert prologue_flops(w, form, pro, kc, dev) == pytest.approx(want)


def test_operands_in_the_cache_pay_the_calibrated_share_of_their_traffic():
    """kernel_cost.traffic_share: a product whose operands fit in the last-level cache pays
    kernel.cached_traffic of its traffic's DRAM time, one that outgrows it all of it."""
    from costmodel.kernel_cost import plain_kernel_parts, traffic_share
    hidden = replace(CPU_DEFAULT, kernel=KernelCosts(cached_traffic=0.0))
    shape, p = (1, 512, 1024, 256), params()
    small = 4.0 * (512 * 256 + 256 * 1024 + 512 * 1024)
    assert small <= CPU_DEFAULT.cache_bytes
    assert traffic_share(small, hidden) == 0.0 and traffic_share(small, CPU_DEFAULT) == 1.0
    full = plain_kernel_parts(*shape, p, 4, CPU_DEFAULT)[1]
    none = plain_kernel_parts(*shape, p, 4, hidden)[1]
    # one K slice (kc = K): A, C once; B packed: once more
    moved = 4.0 * (512 * 256 + 256 * 1024 * 2 + 512 * 1024)
    assert full - none == pytest.approx(moved / CPU_DEFAULT.bandwidth)
    # past the cache every byte is DRAM traffic, whatever the share
    tiny = replace(hidden, cache_bytes=1e5)
    assert plain_kernel_parts(*shape, p, 4, tiny)[1] == pytest.approx(
        plain_kernel_parts(*shape, p, 4, replace(CPU_DEFAULT, cache_bytes=1e5))[1])


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_the_fit_recovers_the_cached_traffic_share(share):
    truth = KernelCosts(unpacked_b=1.2, one_vector=1.3, cached_traffic=share, barrier_s=0.0)
    fit = fit_kernel_costs(synthetic(truth, 150e9, 0.01, 2), CPU_DEFAULT)
    assert fit.costs.cached_traffic == share
    assert fit.costs.one_vector == pytest.approx(1.3, rel=0.05)
    assert fit.rms_log_after < 0.03
