"""Which of the generated kernel's calibrated factors (:class:`~costmodel.devices.KernelCosts`)
apply to a configuration, and how much: ``costmodel.kernel_cost`` prices the kernel's
arithmetic with them and ``costmodel.kernel_fit`` fits them.  Pure."""
from __future__ import annotations

import math

from search_spaces.kernel import (OUTER_A, SPLIT_M, SPLIT_N, KernelParams, batch_split_pays,
                                  column_chunk)

from .devices import DeviceSpec


# A read in place: its rows' length decides the cost (short rows lie side by side as a packed
# panel does, long ones put the mr lines far apart): docs/costmodel.md, section 3.
SHORT_ROW_BYTES = 256
MAX_EXCESS = 2.0


def b_block_excess(p: KernelParams, item: int, kk: int, n: int, dev: DeviceSpec) -> float:
    """How far the KC x NC block of B that the A-panel-outer order sweeps once per A
    micro-panel outgrows half the core's L2 (``dev.tile_cache_bytes``), in L2s (0 where it
    fits).  Why graded: at 1152^2 x 1152 and 1024 x 2048 x 768 (2-core Xeon, L2 2 MiB, one
    process, 7 interleaved rounds) outer=a ran at 1.03-1.12x outer=b's rate with blocks of
    0.3-0.56 L2, and 0.90, 0.82, 0.71, 0.56x with 0.75, 0.84, 1.0, 1.5 L2: about -0.75 in the
    log per L2 past one half (bench/results/xeon-l2-spill).  Held at :data:`MAX_EXCESS`: past it
    each sweep streams B from the next level whatever its size."""
    width = column_chunk(n, p, dev.parallel_units)
    block = min(kk, p.kc) * math.ceil(width / p.nr) * p.nr * item
    if dev.tile_cache_bytes <= 0:
        return MAX_EXCESS
    return min(MAX_EXCESS, max(0.0, block / dev.tile_cache_bytes - 0.5))


def kernel_flags(p: KernelParams | None, item: int, kk: int, n: int, c_bytes: float,
                 dev: DeviceSpec) -> dict[str, float]:
    """How much of each of the :class:`~costmodel.devices.KernelCosts` factors applies to
    parameters ``p`` (none for a hand-written candidate without them): its exponent, 1 or 0
    for a choice, :func:`b_block_excess` for ``outer_a_spill``.  ``kk`` is the contraction's
    depth, ``n`` its width and ``c_bytes`` the size of what the kernel writes."""
    if p is None:
        return {}
    short = kk * item <= SHORT_ROW_BYTES
    outer_a = p.outer == OUTER_A
    flags = {"stream_cached": p.stream and kk <= p.kc and c_bytes <= dev.cache_bytes,
             "unpacked_a": not p.pack_a and not short, "unpacked_a_short": not p.pack_a and short,
             "unpacked_b": not p.pack_b, "short_tile": p.mr <= 4,
             "one_vector": p.nr <= p.lanes(item), "outer_a": outer_a,
             "split_n": p.split == SPLIT_N}
    return {**{k: float(v) for k, v in flags.items()},
            "outer_a_spill": b_block_excess(p, item, kk, n, dev) if outer_a else 0.0}


# Split "m" over a batch runs the items in lockstep: every thread takes its rows of each item
# and waits at the item's barrier for the slowest (a core the host slowed, a B panel another
# thread is still packing); split "batch" runs whole items with no wait between them.  The
# calibrated barrier_s (1-4 us) prices the barrier, not the wait, so the model ranked the two
# alike.  Measured (2-core Xeon, one process, best of 7 interleaved rounds, 6 x 64 tiles, outer
# a, kc 384 and 256): split m against batch took 1.19-1.34x at 8 x 256 x 256 x 32 (attention's
# heads), 1.05-1.17x at 4 x 512^3, 0.99-1.14x at 8 x 702^3 (the higher with B transposed, as
# the triangle einsum reads it), and trimul_outgoing N=702's einsum in its cached plan ran
# 453-470 ms split m against 352-356 ms split batch (the whole plan 1.18-1.21 s against
# 1.29-1.32 s).  The low end of that range, as a share of the arithmetic.
LOCKSTEP_WAIT = 0.10


def lockstep_factor(p: KernelParams | None, b: int, dev: DeviceSpec) -> float:
    """The factor on the arithmetic of ``b`` items that split "m" runs in lockstep where split
    "batch" could run them apart (at least as many items as cores); 1.0 otherwise."""
    cores = max(dev.parallel_units, 1)
    if p is None or dev.kind != "cpu" or p.split != SPLIT_M or not batch_split_pays(b, cores):
        return 1.0
    return 1.0 + LOCKSTEP_WAIT


# Split "n" gives each thread a chunk of C's columns and all of A's rows: a packed A is copied
# whole by every thread (for a chunk of a few register tiles, each copied element repays few
# multiply-adds), and A read in place pays no more than packed (the rows' lines are shared
# by the threads in the last-level cache).  Measured (2-core Xeon, one process, 9 interleaved
# rounds, outer a, kc 256): in place against packed 0.83x and 0.79x at 2048 x 256 x 256 (14 x 32
# and 6 x 64 tiles: attention's projections) and 0.85x and 0.88x at 512 x 256 x 1024
# (bench/results/xeon-split-n-in-place), where the fitted factors (kernel.unpacked_a 1.13, A's
# packing at PACK_A_S) priced in place 1.01x; split "m" in place 1.06x, priced 1.07x.  The
# calibration's random configurations did not tell it apart (a free factor fitted 0.99 on 125
# of them), so it is this constant: the low end of the correction those four pairs ask for.
IN_PLACE_SPLIT_N = 0.85


def in_place_split_n_factor(p: KernelParams | None, dev: DeviceSpec) -> float:
    """The factor on the arithmetic of a CPU kernel that splits "n" with A read in place
    (:data:`IN_PLACE_SPLIT_N`); 1.0 otherwise."""
    if p is None or dev.kind != "cpu" or p.split != SPLIT_N or p.pack_a:
        return 1.0
    return IN_PLACE_SPLIT_N
