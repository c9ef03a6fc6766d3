"""The device rates the cost model applies, term by term: a library GEMM's rate by shape class,
the DRAM cost of an access pattern, a transcendental's weight and a group's launch cost.  Pure.

Each term reads its figures from the :class:`DeviceSpec`; the calibration
(``autotune/backends/cpu/calibrate.py``) measures them at the shapes and patterns named here, so
the two stay in step.  docs/costmodel.md gives the evidence.
"""
from __future__ import annotations

import math
from dataclasses import fields, is_dataclass

from search_spaces.footprint import strides
from search_spaces.gemm import as_matrix_view, staged_run
from search_spaces.ir import TRANSCENDENTAL, Call, Expr, accesses
from search_spaces.precision import TF32_PRODUCTS
from search_spaces.serial import loop_group_serial

from .devices import DeviceSpec, GemmShapes

LINE_ELEMS = 16        # floats per 64-byte cache line: worst-case waste of a strided access
SMALL_GEMM = 64        # GEMM dims below this leave BLAS micro-kernels partly idle
GEMM_FLOOR = 0.05      # keeps degenerate GEMM shapes finite

# GEMM shape classes: (dim where the class is measured, dim from which it no longer limits).
# The class's factor holds at and below the first, 1 from the second on, log-linear between.
SKINNY_K = (128, 1024)       # K, measured at M = 32768, N = 128, K = 128 (a trimul projection)
SKINNY_MN = (32, 128)        # min(M, N), measured at M = 4096, N = 32, K = 1024
BATCHED_SMALL = (64, 128)    # cube root of M*N*K when batch > 1, measured at 256 x 64^3
# (The batch penalty is gone by a cube root of 128: NumPy's batched matmul on the 2-core
# AVX-512 host, 7 interleaved rounds, reached 161 GFLOP/s at 32 x 128^3, 198 at 8 x 256^3, 183
# at 128 x 702 x 702 x 128 against 216 at 2048^3, where a ramp up to 512 had priced them at
# 84, 129 and 138; 8 x 256 x 32 x 256 ran 120 against 53.)


# A CPU loop whose innermost loop is a reduction keeps its running value in a register: no
# store per element, a multiply-add per load, where ``loop_flops`` is the rate of loops that
# store what they compute.  Measured (the model-check databases of the built-ins, 2-core
# AVX-512 host): loop groups whose flops nearly all run such a loop were priced 2.7x too slow
# when it walks unit-stride (19 groups, median ln(measured / predicted) -0.99: layer-norm
# statistics, attention's o over a tile of keys, triangle_attention's scores) and 1.7x when it
# gathers (22 groups, -0.55, spread 0.20), both at the lanes' rate.  Applied to an
# online-softmax chain's scores (chain_cost._lanes), whose sum over the head dim is such a
# loop: the model-check rank correlation rose from 0.68 to 0.82 (attention), 0.62 to 0.81
# (causal_attention), 0.62 to 0.67 (triangle_attention_starting), fell 0.73 to 0.68 and 0.72
# to 0.71 (msa_row_attention, triangle_attention_ending).  Not applied to loop groups: there
# it moved the rank correlation by -0.036 to +0.010 (mean -0.005 over the 9 built-ins
# measured) and turned two top-1 regrets of the corrected model from 0 and 9 % to 15 and 42 %:
# other loops' errors are larger than this bias.
REDUCTION_GAIN = 2.5
STRIDED_REDUCTION_GAIN = 1.7


def reduction_gain(dev: DeviceSpec, strided: bool) -> float:
    """The factor on the lanes' rate of a chain score's innermost sum (1 on a GPU, whose
    chains run a row a thread)."""
    if dev.kind != "cpu":
        return 1.0
    return STRIDED_REDUCTION_GAIN if strided else REDUCTION_GAIN


def shape_law(m: float, n: float, k: float) -> float:
    """BLAS reaches its large-shape rate only when the matrix dims fill its register blocks;
    the K dim hurts less (it only shortens the inner loop)."""
    return min(1.0, m / SMALL_GEMM) * min(1.0, n / SMALL_GEMM) * min(1.0, k / SMALL_GEMM) ** 0.5


def ramp(x: float, lo: float, hi: float, factor: float) -> float:
    """``factor`` for ``x <= lo``, 1 for ``x >= hi``, geometric interpolation between."""
    if x <= lo:
        return factor
    if x >= hi:
        return 1.0
    return factor ** (1.0 - math.log(x / lo) / math.log(hi / lo))


def gemm_efficiency(dev: DeviceSpec, b: int, m: int, n: int, k: int,
                    shapes: GemmShapes | None = None) -> float:
    """Fraction of ``gemm_flops`` a library GEMM of ``b`` (m x k) @ (k x n) matrices reaches:
    the shape law times the calibrated factor of each shape class the shape falls in
    (``shapes``: the device's SIMT classes unless given, its tensor-core ones for TF32)."""
    s = dev.gemm_shapes if shapes is None else shapes
    eff = shape_law(m, n, k) * ramp(k, *SKINNY_K, s.skinny_k) \
        * ramp(min(m, n), *SKINNY_MN, s.skinny_mn)
    if b > 1:
        eff *= ramp((m * n * k) ** (1.0 / 3.0), *BATCHED_SMALL, s.batched_small) * s.batched
    return max(eff, GEMM_FLOOR)


def gemm_rate(dev: DeviceSpec, b: int, m: int, n: int, k: int) -> float:
    """flop/s of that library GEMM on ``dev``."""
    return dev.gemm_flops * gemm_efficiency(dev, b, m, n, k)


def precision_rate(dev: DeviceSpec, precision: str, b: int, m: int, n: int, k: int
                   ) -> tuple[float, int]:
    """(flop/s of a library GEMM of that shape in ``precision``, the products it takes): the
    SIMT rate (:func:`gemm_rate`) for float32 and float64; for "tf32" the device's tensor-core
    share of ``tf32_flops`` times its tensor-core shape classes, and the same shared by three
    products for "3xtf32" (search_spaces.precision).  A device without tensor cores runs every
    precision as float32."""
    products = TF32_PRODUCTS.get(precision, 0)
    if not products or dev.tf32_flops <= 0 or dev.gemm_flops <= 0:
        return gemm_rate(dev, b, m, n, k), 1
    eff = gemm_efficiency(dev, b, m, n, k, dev.tensor_shapes)
    return dev.tf32_flops * dev.tensor_share * eff, products


def split_extras(item: int, b: int, m: int, n: int, k: int, products: int
                 ) -> tuple[float, float, int]:
    """(bytes the GEMM's products add, bytes of separate passes, launches they add) of a
    library GEMM taken as ``products`` TF32 products (search_spaces.precision): the split reads
    A and B once and writes their high and low parts; each product reads its operands, each
    after the first reads C back.  (0, 0, 0) for one product."""
    if products <= 1:
        return 0.0, 0.0, 0
    operands = item * (b * m * k + b * k * n)
    return ((products - 1) * (operands + 2 * item * b * m * n), 3.0 * operands, products + 1)


def pattern_waste(spread: float, ratio: float) -> float:
    """DRAM bytes per useful byte of an access that uses 1/``spread`` of each line it moves
    (``spread`` in [1, LINE_ELEMS]), when using one element per line costs ``ratio`` (an
    :class:`AccessCosts` figure).  Geometric between 1 (whole lines) and ``ratio``: with the
    line-granularity default ``ratio = 16`` this is ``spread`` itself."""
    spread = min(max(spread, 1.0), float(LINE_ELEMS))
    return ratio ** (math.log(spread) / math.log(LINE_ELEMS))


# Regions (runs of a tile's box whose storage lies pages apart) a core's prefetchers follow at
# once: the calibration's probe on the development host (AMD EPYC) read 1-16 regions at 20-22 GB/s,
# 32 at 12-15, 64-256 at 10-15, each region RUN floats a step.  Priced as one region up to
# TRACKED_REGIONS, then geometrically up to the calibrated ``far_regions`` at 4x as many.
TRACKED_REGIONS = 16
PAGE_BYTES = 4096


def contiguous_run(shape, perm, box) -> int:
    """Elements of the longest contiguous run of ``box`` (a tile's part of a tensor stored in
    ``perm`` order): its extent along the innermost storage dims, further dims counting only
    while the box covers the inner ones entirely."""
    run = 1
    for d in reversed(perm):
        run *= box[d]
        if box[d] < shape[d]:
            break
    return max(run, 1)


# What a loop pays for each contiguous run its tiles cut a tensor of memory into, where its
# innermost loop walks that tensor unit-stride (a strided walk pays per element instead:
# model.STRIDED_ACCESS_FLOPS), in flop-equivalents of the loop rate (dev.loop_flops), wherever
# the lines come from: the prefetchers start over and the run's ends move part lines.
# Measured (2-core AVX-512 Xeon, bench/results/xeon-inner-nest/narrow: 18 tilings each of
# cc_doubles' r and of a plain four-index scale, one group alone, all of it in cache): the
# time follows the runs, 0.6-5 ns a run on two cores (the scale 0.25 ms in rows of 9,216
# floats, 2.1 ms cut into runs of 2), where flops alone priced it 0.45 ms throughout.  At 16
# (0.35 ns at that host's 45 GFLOP/s) Spearman's rho over r's 18 goes 0.65 -> 0.86 and over
# the scale's 0.83 -> 0.85; the 11 built-ins' model-check data re-scored
# (bench/model_check_table.py on bench/results/model-check-dbs): mean rho 0.835 -> 0.841, the
# median |log error| level (0.258 -> 0.259), every top-1 regret as before.  32 and 64 ranked
# r's tilings worse (0.79, 0.59) and raised that error (0.265, 0.294).
RUN_FLOPS = 16.0


def line_waste(shape, perm, box) -> float:
    """Lines moved per line of useful data when a tile reads (or writes) ``box`` of a tensor
    stored in ``perm`` order: a contiguous run shorter than a cache line still moves the whole
    line, so the spread is LINE_ELEMS / run, run being the box's extent along the innermost
    storage dims (further dims count only while the box covers the inner ones entirely).
    ``rates.read_waste`` / ``write_waste`` turn it into DRAM bytes per useful byte."""
    return run_waste(contiguous_run(shape, perm, box))


def run_waste(run: int) -> float:
    """:func:`line_waste` of contiguous runs of ``run`` elements."""
    return LINE_ELEMS / min(run, LINE_ELEMS)


def far_regions(shape, perm, box, item: int) -> int:
    """Runs of ``box`` (a tile's read of a tensor stored in ``perm`` order) that lie pages
    apart: the product of the box's extents along the dims outside its contiguous run whose
    stride exceeds a page (rows closer than that are one region to the prefetchers).
    ``rates.regions_waste`` prices it."""
    st = strides(shape, perm)
    regions, inside = 1, True
    for d in reversed(perm):
        if inside:
            inside = box[d] >= shape[d]
            continue
        if st[d] * item > PAGE_BYTES:
            regions *= max(box[d], 1)
    return regions


def regions_waste(regions: float, dev: DeviceSpec) -> float:
    """Time factor of a read whose every tile reads ``regions`` far-apart runs (trimul's
    channel-first t read by the centre layer norm, tile (8, 64, 128): 128 regions, the group
    0.10-0.12 s; with t stored (i, c, j), 8 regions, 0.06 s)."""
    if regions <= TRACKED_REGIONS:
        return 1.0
    span = min(math.log(regions / TRACKED_REGIONS) / math.log(4.0), 1.0)
    return dev.access.far_regions ** span


def copy_waste(run: int, dev: DeviceSpec) -> float:
    """Time factor over a streaming copy of the same bytes of a staged operand's copy whose
    two sides share contiguous runs of ``run`` elements (``search_spaces.gemm.staged_run``):
    the calibrated ``transpose_copy`` (a 2-D transpose: runs of one) where runs are single
    elements, a streaming copy from a whole line on, geometric between as for any spread
    access.  Measured (``Staging.copy`` of a (128, 128, 32, 32) float32 tensor from each of
    its 24 layouts into the row-major matrix, 2-core AMD host, calibrated transpose_copy 9.75,
    bench/results/copy-runs): runs of one 2.5-59x a streaming copy, median 8.9; runs of 32
    2.3-3.5x; of 1024 1.5x.  outer_product_mean's o stored [i, e, j, f] (runs of f, 32) was
    priced a transpose, its library product 46 ms against 21 ms for o stored as the matrix;
    both ran 29-30 ms."""
    return pattern_waste(LINE_ELEMS / min(max(run, 1), LINE_ELEMS), dev.access.transpose_copy)


def staged_copy_bytes(idx, shape, perm, groups, nbytes: float, dev: DeviceSpec) -> float:
    """Bytes (as a streaming copy's) of staging a tensor (indices ``idx``, stored in ``perm``
    order, ``nbytes`` large) into the (batch, rows, cols) matrix over ``groups``: a read and a
    write of every byte at :func:`copy_waste` of the runs both sides share; 0 where a strided
    view expresses it (``search_spaces.gemm.as_matrix_view``)."""
    if as_matrix_view(idx, shape, perm, groups):
        return 0.0
    return 2 * nbytes * copy_waste(staged_run(idx, shape, perm, groups), dev)


def read_waste(spread: float, dev: DeviceSpec) -> float:
    return pattern_waste(spread, dev.access.strided_read)


def write_waste(spread: float, dev: DeviceSpec) -> float:
    return pattern_waste(spread, dev.access.strided_write)


def transcendental_weight(e: Expr, dev: DeviceSpec,
                          varying: frozenset[str] | None = None) -> float:
    """Flop-equivalents of the transcendental calls in one evaluation of ``e``, each weighted
    by its own cost on ``dev`` (:class:`FunctionCosts`, else ``transcendental_flops``).  Walks
    every sub-expression whatever its node type, so it counts the calls ``ir.count_flops``
    counts.  ``varying``: only the calls whose arguments read an index of it (the others are
    invariant along those indices: the compiler hoists them out of their loops)."""
    own = 0.0
    if isinstance(e, Call) and e.fn in TRANSCENDENTAL and (
            varying is None or any(set(a.idx) & varying for a in accesses(e))):
        own = dev.functions.weight(e.fn, dev.transcendental_flops)
    for f in fields(e):
        v = getattr(e, f.name)
        for child in (v if isinstance(v, tuple) else (v,)):
            if is_dataclass(child):
                own += transcendental_weight(child, dev, varying)
    return own


def loop_occupancy(w, members, n_tiles: int, dev: DeviceSpec,
                   chunk: int = 1) -> tuple[float, bool]:
    """(share of the units a loop group of ``members`` keeps busy, whether it runs on the
    calling thread).  Tiles are dealt to cores/SMs in waves, on a CPU ``chunk`` at a time
    (search_spaces.footprint.tile_dealing; a GPU takes one block a tile): the last, partial
    wave leaves units idle (fewer chunks than units is the extreme case); a CPU group too
    small to share runs on one core (search_spaces.serial)."""
    if dev.kind != "cpu":
        chunk = 1
    elif loop_group_serial(w, members):
        return 1.0 / dev.parallel_units, True
    chunk = max(1, min(chunk, n_tiles))
    waves = math.ceil(math.ceil(n_tiles / chunk) / dev.parallel_units)
    return n_tiles / (waves * chunk * dev.parallel_units), False


def loop_launch_s(dev: DeviceSpec, serial: bool = False) -> float:
    """Fixed cost of a generated loop group: the call (kernel launch, or the call from Python
    into the compiled group) plus, on the CPU, its parallel region's start and the wake-up of
    each thread beyond the first (none for a group run on the calling thread:
    search_spaces.serial)."""
    woken = 0 if serial else max(dev.parallel_units - 1, 0)
    return dev.launch_s + dev.region_s + dev.thread_start_s * woken


def kernel_launch_s(dev: DeviceSpec, serial: bool = False) -> float:
    """Fixed cost of a generated-kernel group: a loop group's, plus the host-side set-up of
    its call (``dev.kernel_call_s``)."""
    return loop_launch_s(dev, serial) + dev.kernel_call_s


def library_launch_s(dev: DeviceSpec) -> float:
    """Fixed cost of a library GEMM call: the call plus its host-side set-up."""
    return dev.launch_s + dev.library_call_s


def tile_overhead_s(dev: DeviceSpec, n_tiles: int, chunk: int, members: int) -> float:
    """Seconds the cores spend dealing and opening tiles: the calibrated cost of a tile dealt
    one at a time (``dev.tile_overhead_s``) less its set-up, once per ``chunk`` tiles a thread
    takes at a time, plus each member's set-up (``dev.tile_setup_s``) per tile.  Why per
    chunk: gelu_mlp's bias add over 262,144 tiles of 2 x 1 dealt 16 at a time ran 1.08 ms,
    priced 8.0 ms at the full cost per tile and member; the dealing is a step of one shared
    counter per chunk, the set-up a few dozen instructions."""
    deal = max(dev.tile_overhead_s - dev.tile_setup_s, 0.0)
    return (deal * n_tiles / chunk + dev.tile_setup_s * n_tiles * members) / dev.parallel_units


def lane_use(tile: int, extent: int, width: int) -> float:
    """The share of the vector lanes an innermost loop keeps busy when it walks ``extent``
    elements in tiles of ``tile``: each tile's run costs whole vectors, at least one, so a run
    shorter than ``width`` lanes (a tile's or the last tile's remainder) wastes the rest.
    Measured (tiny_bmm's fused 8 x 8 by 8 x 12 products, innermost over the 12 columns, 2-core
    Xeon, 8-float vectors, one process, 21 interleaved rounds): tiles of 12 206 us, of 6 257,
    of 4 255, of 8 (runs of 8 and 4) 439, of 3 622; priced alike before for tiles of 8 and 12."""
    tile = max(1, min(tile, extent))
    runs = [tile] * (extent // tile) + ([extent % tile] if extent % tile else [])
    return min(1.0, (extent / width) / sum(max(r / width, 1.0) for r in runs))
