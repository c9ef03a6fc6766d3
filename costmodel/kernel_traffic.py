"""What the generated contraction kernel (impl ``kernel``, CPU) moves through memory: how often
C crosses the bus, the packed copy of B, the share of its traffic a cache-resident product pays,
and the least time any configuration needs to move its operands at all.  Pure."""
from __future__ import annotations

import math

from .devices import DeviceSpec

# An in-place B is read by the micro-kernel in panels of NR columns, one run a row of K: runs
# shorter than this many bytes leave each row its own far-apart region (traffic_floor_s).
PANEL_RUN_BYTES = 128


def c_passes(c_bytes: float, kk: int, kc: int, dev: DeviceSpec,
             live_bytes: float | None = None) -> float:
    """Times C crosses the memory bus: written after the first K slice, read and written
    after each further one, unless the cores' shares of it stay in their private caches
    between slices (a C of a few rows: a decoding step's 4 x 3072 is 24 KB a core).  Where C
    outgrows the last-level cache but the part the threads hold between slices
    (``live_bytes``: :func:`live_c_bytes`) does not, the further passes are cached traffic
    (``kernel.cached_traffic``, as :func:`traffic_share` prices a product in the cache).  Why:
    on the AVX2 EPYC host 16 items of 702 x 702 x 702 (C 31.5 MB, an item's 2 MB) ran 149,
    142 and 149 GFLOP/s at KC = 768, 384 and 192 split by items, and 137, 137 and 139 split by
    rows (bench/gemm_kernel.py, 7 interleaved rounds), where every pass at the bandwidth
    priced KC = 192 17 % slower than KC = 768 (bench/results/epyc-avx2-3462ffb)."""
    if c_bytes <= dev.tile_cache_bytes * max(dev.parallel_units, 1) / 2:
        return 1
    extra = 2 * max(1, math.ceil(kk / kc)) - 2
    live = c_bytes if live_bytes is None else live_bytes
    if live <= dev.cache_bytes < c_bytes:
        return 1 + extra * dev.kernel.cached_traffic
    return 1 + extra


def live_c_bytes(c_bytes: float, b: int, split_batch: bool, dev: DeviceSpec) -> float:
    """The part of a ``b``-item product's C (``c_bytes`` in all) its threads hold between K
    slices: one item's, which they share (split "m"), or one item each (split "batch")."""
    per = c_bytes / max(b, 1)
    return per * min(b, max(dev.parallel_units, 1)) if split_batch and b > 1 else per


def packed_b_bytes(b: int, kk: int, n: int, item: int, packed: bool) -> float:
    """Bytes of the packed copy of the kernel's B (``b`` items of ``kk`` x ``n``, none when it
    is read in place), priced as one more pass over B beside the micro-kernels' own reading.
    Why only B: its packed block (KC x NC, sized to the shared cache) is written by all threads
    and read back from there by every row block, where A's (MC x KC, sized to half a core's L2)
    never leaves the core.  Measured on the 2-core AVX-512 host (bench/gemm_kernel.py, one
    process, interleaved rounds): a decoding step's 4 x 3072 x 768 product ran 351 us with B
    packed against 186 us in place (4 x 768 x 3072: 218 against 133), where one pass over B at
    the calibrated bandwidth is 154 us (38); at 65536 x 640 x 128 and 512 x 1024 x 256 packing A
    or not changed nothing (417 / 421 and 398 / 400 GFLOP/s), packing B gained up to 5 %."""
    return float(b * kk * n * item) if packed else 0.0


def traffic_share(unique_bytes: float, dev: DeviceSpec) -> float:
    """The share of its traffic's DRAM time a product pays whose operands and result take
    ``unique_bytes``: all of it, unless they fit in the last-level cache (the calibrated
    ``kernel.cached_traffic``).  Why: the calibration's products (2-10 MB) fit it, and with
    their traffic priced at the DRAM bandwidth the fit of the kernel's rate and factors left a
    log error of 0.30 (2-core Xeon) and 0.23 (2-core AMD EPYC), and ranked the configurations
    of one shape at Spearman 0.35-0.64 and 0.21-0.72; with the traffic's share fitted (0 on
    both), 0.19 and 0.17, and 0.75-0.79 and 0.10-0.84 (bench/results/xeon-ffd0fe7)."""
    return dev.kernel.cached_traffic if unique_bytes <= dev.cache_bytes else 1.0


def traffic_floor_s(unique_bytes: float, b_bytes: float, packed_b: bool, nr: int, item: int,
                    dev: DeviceSpec) -> float:
    """The least time the kernel can take, whatever its arithmetic: its operands and result
    (``unique_bytes``) moved once at the bandwidth, its B (``b_bytes``) once more where it is
    packed, and an in-place B read in panels under :data:`PANEL_RUN_BYTES` wide at the
    calibrated far-regions factor.  Why: a product too small in M to be compute-bound streams
    its B, and :func:`traffic_share` prices cache-resident traffic at the share the
    compute-bound calibration shapes fit (0 on both hosts), which priced a decoding step's
    4 x 768 x 3072 (B 9.4 MB) at 50 us whatever its packing.  Measured (2-core Xeon, calibrated
    27.5 GB/s, far regions 2.17; decode_mlp's two kernel groups, one process, 15 interleaved
    rounds, group clocks): B packed 674 / 478 us, in place with NR = 64 285 / 283, NR = 32
    343 / 308, NR = 16 577 / 594, where this floor gives 687, 345, 345 and 750 us."""
    extra = b_bytes if packed_b else (
        b_bytes * (dev.access.far_regions - 1.0) if nr * item < PANEL_RUN_BYTES else 0.0)
    return (unique_bytes + extra) / dev.bandwidth
