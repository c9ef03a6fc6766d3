"""The innermost loop of a loop group's member (``cache_walk.inner_nest``): the walk with the
fewest strided accesses whose lines come back late, the dominant read's unit-stride index on
ties.  Shared by the CPU and CUDA generators and the cost model, so each case is checked on
``plan_group`` itself and on the generated C."""
from __future__ import annotations

from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.cache_walk import REUSE_BYTES, revisited_far
from search_spaces.footprint import plan_group
from search_spaces.partition import groups

from autotune.backends.cpu.codegen import generate
from tests.support.workloads import workload


# a projection of a channel-first input: g[i,k,e] = sum_c x[i,k,c] w[c,e]
PROJ = "g[i,k,e] += x[i,k,c] * w[c,e]\n"


def _plan(w, anchor, tiles, layouts):
    (g,) = [g for g in groups(w, set()) if g.anchor == anchor]
    lay = lambda t: layouts.get(t, tuple(range(len(w.shapes[t]))))
    return {m.op: m.order for m in plan_group(w, g, tiles, lay)}


def test_a_contraction_walks_its_output_channel_not_a_short_strided_row():
    w = workload(PROJ, {"I": 64, "K": 64, "C": 32, "E": 32},
                 {"x": ["I", "K", "C"], "w": ["C", "E"]}, ["g"])
    x_channel_first = {"x": (2, 0, 1)}
    order = _plan(w, "g", (32, 4, 32), x_channel_first)["g"]
    # x's unit-stride index is k (4 per tile), and walking it scatters into the accumulator:
    # the channel e is unit-stride in g and w and absent from x
    e = w.op("g").parallel[2]
    assert order[-1] == e
    cand = make_candidate([], x_channel_first, [GroupSchedule("g", (32, 4, 32))], "t")
    src, _ = generate(w, cand)
    inner = [ln for ln in src.splitlines() if "+=" in ln and "G_x[" in ln]
    assert inner and "*1L]" in inner[0].split("+=")[0]      # the accumulator walked unit-stride


def test_row_major_input_keeps_the_dominant_reads_walk():
    w = workload(PROJ, {"I": 64, "K": 64, "C": 32, "E": 32},
                 {"x": ["I", "K", "C"], "w": ["C", "E"]}, ["g"])
    order = _plan(w, "g", (32, 4, 32), {})["g"]
    # c: unit-stride in x; w walked across it is small and its lines come back soon
    assert order[-1] == w.op("g").reduction[0]


def test_a_strided_write_whose_lines_come_back_soon_keeps_the_preferred_walk():
    # y stored channel-first, I * J = 21 floats between channels: writing it along c strides,
    # but each line comes back at the next j after only C lines, spread over the cache's sets;
    # walking j instead would gather from t along its stride
    prog = "y[i,j,c] = t[i,j,c] * 2.0\n"
    w = workload(prog, {"I": 3, "J": 7, "C": 128}, {"t": ["I", "J", "C"]}, ["y"])
    order = _plan(w, "y", (1, 7, 128), {"y": (2, 0, 1)})["y"]
    assert order[-1] == w.op("y").parallel[2]   # t's unit-stride index, as before


def test_a_strided_walk_whose_lines_crowd_a_few_cache_sets_turns():
    # I * J = 256 floats (1 KiB) between channels: writing y along c puts its 128 lines in 4 of
    # L1's sets, evicted before they come back.  Measured (2-core AVX-512 host, best of 15):
    # walking c 45 us, walking j 9.5 us; at C = 2048 640 against 400 us, and at I = J = 64
    # (16 KiB apart, one set) 1,750 against 77 us
    prog = "y[i,j,c] = t[i,j,c] * 2.0\n"
    w = workload(prog, {"I": 4, "J": 64, "C": 128}, {"t": ["I", "J", "C"]}, ["y"])
    order = _plan(w, "y", (1, 64, 128), {"y": (2, 0, 1)})["y"]
    assert order[-1] == w.op("y").parallel[1]
    # a read alike: the logits' sc[h,i,j,k] + tb[h,j,k] with tb stored (j, k, h) walked i to
    # spare the small tb a gather read sc and wrote lg 256 KiB apart (0.61 s; walking k 22 ms)
    lg = "lg[h,i,j,k] = sc[h,i,j,k] + tb[h,j,k]\n"
    w = workload(lg, {"H": 4, "I": 256, "J": 16, "K": 256},
                 {"sc": ["H", "I", "J", "K"], "tb": ["H", "J", "K"]}, ["lg"])
    order = _plan(w, "lg", (4, 256, 16, 256), {"tb": (1, 2, 0)})["lg"]
    assert order[-1] == w.op("lg").parallel[3]


def test_revisited_far_counts_the_lines_inside_the_unit_stride_loop():
    st = {"a": 1, "b": 1000}
    ext = {"a": 64, "b": 128, "r": 4096}
    assert not revisited_far(st, ("a", "b"), ext)              # 128 lines: near
    big = REUSE_BYTES // 64 + 1
    assert revisited_far(st, ("a", "b"), {**ext, "b": big})     # past the budget
    assert revisited_far({"b": 1000}, ("a", "b"), ext)          # no unit-stride index
    assert not revisited_far(st, ("b", "a"), ext)               # unit-stride innermost


# a decoding step's projection: a few rows against a weight that streams past the caches
GEMV = "h[t,f] += x[t,c] * w[c,f]\n"


def test_a_few_rows_against_a_streamed_weight_walk_the_rows_inside_the_reduction(tmp_path):

    from autotune.api import make_executable
    from autotune.backends.base import verify
    from autotune.reference import reference
    w = workload(GEMV, {"T": 4, "C": 256, "F": 2048}, {"x": ["T", "C"], "w": ["C", "F"]},
                 ["h"])           # w: 2 MB, past STREAM_BYTES
    t, f = w.op("h").parallel
    (c,) = w.op("h").reduction
    # t, absent from w, between the reduction and the unit-stride walk: w read once a tile
    assert _plan(w, "h", (4, 64), {})["h"] == (c, t, f)
    cand = make_candidate([], {}, [GroupSchedule("h", (4, 64))], "t")
    src, _ = generate(w, cand)
    loops = [ln.strip() for ln in src.split("/* h[d0,d1] +=")[1].splitlines()
             if ln.strip().startswith("for")]
    assert [ln.split("long ")[1].split(" ")[0] for ln in loops[-3:]] == ["v_d2", "v_d0", "v_d1"]
    inputs = w.random_inputs(1)
    err, why = verify(make_executable(w, cand, "cpu", tmp_path)(**inputs),
                      reference(w, inputs), w.rtol)
    assert not why and err < 1e-5, why


def test_many_rows_or_a_cached_weight_keep_the_rows_outermost():
    # 64 rows (soft_kmeans's s[k,c] += r[n,k] x[n,c] ran 4.3x slower with them inside), or a
    # weight that stays in the caches: the rows stay outside
    many = workload(GEMV, {"T": 64, "C": 256, "F": 2048}, {"x": ["T", "C"], "w": ["C", "F"]},
                    ["h"])
    small = workload(GEMV, {"T": 4, "C": 64, "F": 512}, {"x": ["T", "C"], "w": ["C", "F"]},
                     ["h"])
    for w, tiles in ((many, (64, 64)), (small, (4, 64))):
        t = w.op("h").parallel[0]
        assert _plan(w, "h", tiles, {})["h"][0] == t


# cc_doubles' denominator step: a sum with its own transpose, the stored s four-index
PAIR_T = "s[a,b,i,j] = x[a,b,i,j] * 2.0\nr[a,b,i,j] = s[a,b,i,j] + s[b,a,j,i]\n"


def test_the_loop_outside_the_innermost_brings_a_transposed_reads_lines_back_soon(tmp_path):
    from autotune.api import make_executable
    from autotune.backends.base import verify
    from autotune.reference import reference
    from search_spaces.cache_walk import conflicting, revisited_far
    from search_spaces.footprint import nest_extents
    w = workload(PAIR_T, {"A": 48, "O": 24}, {"x": ["A", "A", "O", "O"]}, ["r"])
    lay = {"s": (0, 2, 1, 3)}
    tiles = (32, 48, 4, 24)
    d0, d1, d2, d3 = w.op("r").parallel
    order = _plan(w, "r", tiles, lay)["r"]
    # j innermost (unit-stride in s and in r), i right outside it: the transposed read
    # s[b,a,j,i] (unit-stride along i) is back at a line after the 24 js; the dominant read's
    # order (i outside b) brought it back after 48 x 24 lines 4.6 KiB apart, crowded into 8
    # sets of L1 (1.25-1.30 ms against 0.68-0.77 a call, measured in C on 2 cores)
    assert order[-2:] == (d2, d3)
    transposed = {d1: 27648, d0: 24, d3: 1152, d2: 1}
    ext = nest_extents(w.op("r"), (32, 48, 4, 24))
    assert not revisited_far(transposed, order, ext)
    assert not conflicting(transposed, order, ext, 4)
    dominant_order = (d0, d2, d1, d3)
    assert conflicting(transposed, dominant_order, ext, 4)
    cand = make_candidate([], lay, [GroupSchedule("s", (48, 48, 24, 24)),
                                    GroupSchedule("r", tiles)], "t")
    src, _ = generate(w, cand)
    body = src.split("/* r[d0,d1,d2,d3] =")[1]
    loops = [ln.strip().split("long ")[1].split(" ")[0] for ln in body.splitlines()
             if ln.strip().startswith("for (long v_")]
    assert loops[-2:] == ["v_d2", "v_d3"]
    inputs = w.random_inputs(3)
    err, why = verify(make_executable(w, cand, "cpu", tmp_path)(**inputs),
                      reference(w, inputs), w.rtol)
    assert not why and err < 1e-5, why


def test_no_loop_is_moved_to_trade_a_gather_for_a_scatter_into_memory():
    # outer_product_mean's out[i,j,c] = po[i,j,c] + b[c] from a channel-first po, tiles
    # (2, 64, 128): walking c gathers po, each line back after 128 others in one L1 set (far);
    # c moved outside j reads po unit-stride but scatters out in place, 64 lines back: 1.5-3.5
    # ms against 6.6-6.8 measured (2-core AVX-512 host), so the walk stays on c
    prog = "po[i,j,c] = x[i,j,c] * 2.0\nout[i,j,c] = po[i,j,c] + b[c]\n"
    w = workload(prog, {"N": 128, "C": 128}, {"x": ["N", "N", "C"], "b": ["C"]}, ["out"])
    i, j, c = w.op("out").parallel
    assert _plan(w, "out", (2, 64, 128), {"po": (2, 0, 1)})["out"] == (i, j, c)
