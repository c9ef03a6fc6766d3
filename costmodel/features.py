"""Features of a candidate's cost breakdown, for the learned correction
(:mod:`costmodel.correction`).  Pure, no I/O.

Each feature says where the analytic model puts a candidate's time, or how it priced it: shares
of the time by kind of kernel (library GEMMs, the generated contraction kernel, memory-bound
loops, loops that reduce), layout
copies, recomputation, transcendentals, bytes moved per byte touched, the number of groups and
tiles, and (time-weighted over the generated loops) the share of cores the tiles keep busy, the
flop rate the model assumed and the tile size.  A residual of the model that follows one of
these (a kind of kernel it over- or under-rates on this device) is what the correction learns.
"""
from __future__ import annotations

import math

from search_spaces.candidate import IMPL_KERNEL, IMPL_LIBRARY, STANDALONE_IMPLS

from .devices import DeviceSpec
from .estimate import CostEstimate

FEATURES = (
    "log_analytic_s",        # the scale: lets the fit learn a slope other than 1
    "library_share",         # analytic time in library GEMMs / total
    "loop_memory_share",     # analytic time in memory-bound generated loops / total
    "loop_reduction_share",  # analytic time in generated loops that reduce (contractions)
    "library_copy_share",    # layout copies around library GEMMs (strided, transposing)
    "recompute_share",       # recomputed flops / all flops
    "transcendental_share",  # transcendentals / flops
    "log_byte_waste",        # ln(bytes moved / bytes touched once): strides, reloads, spills
    "log_groups",            # ln(number of groups): launches, parallel regions
    "fusion_degree",         # fused producers / ops
    "log_tiles",             # ln(1 + tiles of all loop groups)
    "occupancy",             # time-weighted share of cores the last wave of tiles keeps busy
    "log_loop_rate",         # time-weighted ln(flop rate the model gives a compute-bound
                             # loop / the device's loop rate): its SIMD and occupancy penalties
    "log_tile_elems",        # time-weighted ln(elements per anchor tile)
    "kernel_share",          # analytic time in the generated contraction kernel / total
)


def features(w, est: CostEstimate, dev: DeviceSpec) -> tuple[float, ...]:
    """The feature vector (in :data:`FEATURES` order) of a candidate's cost breakdown ``est``
    on ``dev``; ``w`` is its workload (for the tile counts)."""
    total = max(est.total_s, 1e-12)
    lib = [g for g in est.groups if g.impl == IMPL_LIBRARY]
    kern = [g for g in est.groups if g.impl == IMPL_KERNEL]
    loops = [g for g in est.groups if g.impl not in STANDALONE_IMPLS]
    flops = max(sum(g.flops for g in est.groups), 1.0)
    moved = sum(g.bytes for g in est.groups)
    touched = max(sum(g.unique_bytes for g in est.groups), 1.0)
    # a kernel group's bytes include its blocking's re-reads: only a library GEMM's excess is
    # all layout copies
    copies = sum(max(g.bytes - g.unique_bytes, 0.0) for g in lib) / dev.bandwidth
    loop_s = sum(g.predicted_s for g in loops)
    tiles = occ = rate = elems = reducing = 0.0
    known = {op.out for op in w.ops}
    for g in loops:
        if g.anchor not in known:
            # an intermediate of a contraction order the caller's workload does not have (pass
            # search_spaces.rewrite.rewritten(w, cand) for the exact figure): no tile counts
            continue
        shape = w.op(g.anchor).out_shape
        n = math.prod(math.ceil(e / max(t, 1)) for e, t in zip(shape, g.tiles))
        tiles += n
        share = g.predicted_s / loop_s if loop_s > 0 else 1.0 / len(loops)
        waves = math.ceil(n / dev.parallel_units)
        occ += share * n / (waves * dev.parallel_units)
        elems += share * math.log(max(math.prod(g.tiles), 1))
        if any(o in known and w.op(o).reduction for o in g.ops):
            reducing += g.predicted_s / total
        if g.bound == "compute" and g.predicted_s > 0:
            work = g.flops + g.transcendentals * dev.transcendental_flops
            r = work / (g.predicted_s * dev.loop_flops)
            rate += share * math.log(min(max(r, 1e-4), 10.0))
    if not loops:
        occ = 1.0
    return (math.log(total),
            sum(g.predicted_s for g in lib) / total,
            sum(g.predicted_s for g in loops if g.bound == "memory") / total,
            reducing,
            min(copies / total, 1.0),
            sum(g.recomputed_flops for g in est.groups) / flops,
            sum(g.transcendentals for g in est.groups) / flops,
            math.log(max(moved, 1.0) / touched),
            math.log(max(len(est.groups), 1)),
            sum(len(g.fused) for g in est.groups) / max(len(w.ops), 1),
            math.log1p(tiles), occ, rate, elems,
            sum(g.predicted_s for g in kern) / total)
