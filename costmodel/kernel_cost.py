"""The cost of a group run by the generated contraction kernel (impl ``kernel``, CPU).  Pure.

The kernel's arithmetic at its rate, less the share of partial register tiles, plus the
traffic its blocking implies (added, not overlapped: the evidence is in ``kernel_group``): A
read once per NC block of columns, B once, C written once per KC slice (and read back on each
later one; there is no zeroing pass).  Packing absorbs any layout: an operand that is no
strided matrix at all is packed through offset tables (search_spaces.gemm.gathered), and only
a pair's, which its packer interleaves, is copied first (as for a library GEMM).  An epilogue
or a prologue (search_spaces.kernel_fusion) adds its arithmetic at the loop rate and one read of
each tensor it reads (a prologue's per packing pass of its operand); C is then the epilogue's
result and A (or B) the prologue's main input, and the fused intermediate is never stored or
loaded again: that saving is the difference from the unfused plan.  A pair (two contractions
over a shared operand under one epilogue) is one kernel over twice the paired extent (padded to
whole tile halves), its whole K in one slice; it reads both non-shared operands (the packing
routine interleaves them into its micro-panels) and stores only the epilogue's result.  A
packed B costs one more pass over it (:func:`packed_b_bytes`), a packed A its packing time
(:func:`packed_a_s`); no configuration runs under the time of moving its operands once
(:func:`~costmodel.kernel_traffic.traffic_floor_s`).  A symmetric product computes the tiles
on and above its diagonal and stores their mirror images (search_spaces.symmetry).
docs/costmodel.md gives the reasons.
"""
from __future__ import annotations

import math
from dataclasses import replace

from search_spaces.candidate import IMPL_KERNEL
from search_spaces.kernel_fusion import Prologue, extra_strides, kernel_parts, pair_operands
from search_spaces.kernel_reads import gathered_operands
from search_spaces.footprint import strides
from search_spaces.gemm import (as_matrix_view, gathered, gemm_form, group_size, operand_groups,
                                 staged_run)
from search_spaces.ir import accesses
from search_spaces.kernel import (PACK_ALL_BYTES, SPLIT_BATCH, SPLIT_N, KernelParams,
                                  column_chunk, pair_params)
from search_spaces.partition import Group
from search_spaces.serial import kernel_serial
from search_spaces.symmetry import computed_share, symmetric_kernel

from .devices import DeviceSpec
from .estimate import FusedProducer, GroupCost
from .kernel_factors import in_place_split_n_factor, kernel_flags, lockstep_factor
from .kernel_traffic import (c_passes, live_c_bytes, packed_b_bytes, traffic_floor_s,
                             traffic_share)
from .rates import GEMM_FLOOR, SMALL_GEMM, copy_waste, kernel_launch_s, transcendental_weight


def tile_use(extent: int, tile: int) -> float:
    """The share of the register tiles' lanes that hold real elements along one dim."""
    return extent / (math.ceil(extent / tile) * tile) if extent else 1.0


def padding_s(compute: float, m: int, n: int, p: KernelParams | None) -> float:
    """The share of the arithmetic ``compute`` that partial register tiles spend on padding,
    which a kernel bound by its traffic (:func:`~costmodel.kernel_traffic.traffic_floor_s`)
    pays beside it.  Measured (decode_mlp's 4 x 768 x 3072 and 4 x 3072 x 768 with B in place,
    2-core Xeon, one process, 15 interleaved rounds): MR = 14 (4 of 14 rows used) 533-627 us a
    group, MR = 4 266-301, where the floor is 345 us and the padding 125-185."""
    if p is None:
        return 0.0
    return compute * (1.0 - tile_use(m, p.mr) * tile_use(n, p.nr))


def kernel_operands(w, fused, anchor: str, layout_of, item: int):
    """The group's KernelParts and (tensor, bytes, role, copied, run) for everything the
    kernel group anchored at ``anchor`` touches: what it packs as A and B (``role`` "a", "b":
    the operand, or its prologue's main input), C ("c"), the prologues' other tensors (read
    with their operand: "a", "b") and the epilogue's ("e"); ``copied``: bytes the executor
    copies first (a tensor no strided view expresses and the kernel does not gather), in runs
    of ``run`` contiguous elements on both sides (``search_spaces.gemm.staged_run``; 1 for a
    broadcast copy)."""
    parts = kernel_parts(w, fused, anchor)
    p = parts.contraction
    op = w.op(p)
    form = gemm_form(op)
    ext = dict(zip(op.domain, op.extents))
    ga, gb, go = operand_groups(form)
    rows = []
    for role, read, grp, pro in (("a", form.a, ga, parts.prologue_a),
                                 ("b", form.b, gb, parts.prologue_b)):
        if pro is None:
            rows.append(_row(w, read.tensor, read.idx, grp, role, layout_of, item,
                             not parts.pair))
            continue
        to_p = pro.to_contraction(w)
        rows.append(_row(w, pro.main, tuple(to_p[i] for i in pro.main_idx), grp, role,
                         layout_of, item, not parts.pair))
        rows += _others(w, pro.producer, lambda a, pro=pro: (a.tensor, a.idx) == (
            pro.main, pro.main_idx), to_p, grp, ext, role, layout_of, item)
    if parts.epilogue is None:
        rows.append(_row(w, p, op.parallel, go, "c", layout_of, item))
    else:
        epi = parts.epilogue
        to_p = epi.to_contraction(w)
        c = w.op(epi.consumer)
        rows.append(_row(w, epi.consumer, tuple(to_p[i] for i in c.parallel), go, "c",
                         layout_of, item))
        rows += _others(w, epi.consumer, lambda a: a.tensor in (p, parts.pair), to_p, go, ext,
                        "e", layout_of, item)
    if parts.pair:
        # the second's non-shared operand, read with the first's (interleaved as packed)
        _, other, role = pair_operands(w, parts.epilogue)
        rows.append((other.tensor, math.prod(w.shapes[other.tensor]) * item, role, 0.0, 1))
    return parts, rows


def _row(w, tensor, idx, grp, role, layout_of, item, gather: bool = False):
    """``gather``: an operand no view expresses is read through offset tables
    (``search_spaces.gemm.gathered``: the CPU kernel outside a pair), not copied."""
    nbytes = math.prod(w.shapes[tensor]) * item
    perm = layout_of(tensor)
    if as_matrix_view(idx, w.shapes[tensor], perm, grp) or \
            (gather and gathered(idx, w.shapes[tensor], perm, grp)):
        return tensor, nbytes, role, 0.0, 1
    return tensor, nbytes, role, nbytes, staged_run(idx, w.shapes[tensor], perm, grp)


def _others(w, fused_op, is_value, to_p, grp, ext, role, layout_of, item):
    """Rows for the tensors a fused op reads besides its value: each once, plus the bytes of
    the executor's copy over the groups it has indices in where ``kernel_fusion.extra_strides``
    says it copies (its layout nests neither the groups nor the batch split before its last
    index)."""
    out = []
    for t, idx in dict.fromkeys((a.tensor, a.idx) for a in accesses(w.op(fused_op).expr)
                                if not is_value(a)):
        st, copied = extra_strides(tuple(to_p[i] for i in idx), w.shapes[t], layout_of(t), grp,
                                   ext)
        copy = item * math.prod(ext[i] for g, s in zip(grp, st) if s for i in g) if copied \
            else 0.0
        out.append((t, math.prod(w.shapes[t]) * item, role, copy, 1))
    return out


def kernel_threads(b: int, m: int, n: int, kk: int, p: KernelParams | None,
                   dev: DeviceSpec, item: int = 4) -> tuple[float, int]:
    """(share of the cores kept busy, barriers between them) for a ``b`` x (m x n x kk) product.
    Split "batch" (with more than one item) gives each thread whole items, no barrier; split
    "n" deals out chunks of columns (:func:`~search_spaces.kernel.column_chunk`) of each item
    as threads come free, no barrier; split "m" shares each item's row blocks between all
    threads (and, where they are fewer than the threads, column chunks of each), with a
    barrier after each NC x KC block of C where B is packed (its panels packed on demand, no
    barrier before the compute: gemm_sync.lazy_source; one after a column block where all its
    K slices fit in PACK_ALL_BYTES), none where it is read in place (gemm_driver.item_shared).
    A product too small to share runs on one thread (search_spaces.serial)."""
    cores = max(dev.parallel_units, 1)
    if p is None:
        return 1.0, 0
    if dev.kind == "cpu" and kernel_serial(b, m, n, kk, item):
        return 1.0 / cores, 0
    if p.split == SPLIT_BATCH and b > 1:
        return b / (math.ceil(b / cores) * cores), 0
    if p.split == SPLIT_N:      # whole chunks' worth of work over the waves they take
        cw = column_chunk(n, p, cores)
        return min(1.0, b * n / cw / (math.ceil(b * math.ceil(n / cw) / cores) * cores)), 0
    rows = math.ceil(math.ceil(m / cores) / p.mr) * p.mr
    busy = min(cores, math.ceil(m / rows))
    if busy < cores:
        # rows too few to go round: each row block's columns are cut into chunks of whole
        # micro-panels, one per idle thread (gemm_driver._entry)
        width = min(n, p.nc)
        chunk = math.ceil(math.ceil(width / math.ceil(cores / busy)) / p.nr) * p.nr
        busy = min(cores, busy * math.ceil(width / chunk))
    slices = max(1, math.ceil(kk / p.kc))
    width = math.ceil(min(n, p.nc) / p.nr) * p.nr
    if slices > 1 and kk * width * item <= PACK_ALL_BYTES:
        slices = 1          # every K slice of a column block packed at once
    blocks = math.ceil(n / p.nc) * slices
    # B read in place shares nothing between the threads: they run on without barriers
    return busy / cores, (b * blocks if p.pack_b else 0)


def kernel_compute_s(b: int, m: int, n: int, kk: int, p: KernelParams | None, item: int,
                     c_bytes: float, dev: DeviceSpec, share: float = 1.0) -> float:
    """The kernel's arithmetic time: its flops (the ``share`` of its register tiles it
    computes: a symmetric product's, search_spaces.symmetry) at the kernel's rate, less the
    share of partial register tiles and idle cores, times the calibrated factors of its
    parameters, plus its barriers."""
    flops = 2.0 * b * m * n * kk * share
    mr, nr = (p.mr, p.nr) if p is not None else (1, 1)
    occ, barriers = kernel_threads(b, m, n, kk, p, dev, item)
    eff = tile_use(m, mr) * tile_use(n, nr) * min(1.0, kk / SMALL_GEMM) ** 0.5 * occ
    factor = math.prod(getattr(dev.kernel, name) ** on for name, on in kernel_flags(
        p, item, kk, n, c_bytes, dev).items() if on) * lockstep_factor(p, b, dev) \
        * in_place_split_n_factor(p, dev)
    rate = dev.kernel_flops or dev.gemm_flops
    # no configuration outruns the FMA peak on the lanes and cores it keeps busy (a factor
    # under 1, outer=a's, would price one above it)
    arith = max(flops / (rate * max(eff, GEMM_FLOOR)) * factor,
                flops / (peak_flops(dev, item) * max(eff, GEMM_FLOOR)))
    return arith + barriers * dev.kernel.barrier_s


# Each call of the micro-kernel (one register tile, one K slice) loads and stores its C tile
# and sets up its loops: seconds per call and core.  Why: the rate prices flops alone, and KC =
# 64 makes four times KC = 256's calls (measured 24-33 ns of wall time a call on the 2-core
# AVX-512 host, attention's weighted sum of v 108 us at KC = 64 against 97: docs/costmodel.md).
MICRO_CALL_S = 50e-9


def micro_calls_s(b: int, m: int, n: int, kk: int, p: KernelParams | None, item: int,
                  dev: DeviceSpec, share: float = 1.0) -> float:
    """Time of the micro-kernel's calls beyond their flops (the ``share`` of the tiles it
    computes), spread over the busy cores (no factor of the parameters scales it:
    :mod:`costmodel.kernel_fit`)."""
    if p is None or dev.kind != "cpu":
        return 0.0
    occ, _ = kernel_threads(b, m, n, kk, p, dev, item)
    calls = b * math.ceil(m / p.mr) * math.ceil(n / p.nr) * max(1, math.ceil(kk / p.kc)) * share
    return calls * MICRO_CALL_S / max(occ * max(dev.parallel_units, 1), 1.0)


def peak_flops(dev: DeviceSpec, item: int) -> float:
    """The FMA peak for elements of ``item`` bytes (float64: half the lanes); infinite where
    the device's peak is not known (0)."""
    return dev.f32_flops * 4 / item if dev.f32_flops > 0 else math.inf


# Packing A into micro-panels: seconds per element and core.  Its packed block stays in the
# core's L2, so it moves no DRAM bytes, but the packing pass and the micro-kernel's re-reading
# of the panels cost time per element, which only N multiply-adds per element repay: at N = 32
# (attention's weighted sum of v, 8 heads of 256 x 32 x 256) the product ran 136 us with A
# packed against 85 us read in place, and at N = 128 (trimul's output projections, 492804 x
# 128 x 128) 54 / 51 ms against 45 / 44 ms (the cached plans rebuilt with pack_a off, one
# process, 81 and 7 interleaved calls, group clocks): about 0.2 ns an element on each core.
PACK_A_S = 0.2e-9


def packed_a_s(b: int, m: int, kk: int, n: int, nc: int, packed: bool, dev: DeviceSpec) -> float:
    """Time of packing the kernel's A (``b`` items of ``m`` x ``kk``, once per block of ``nc``
    columns of ``n``) shared by the cores; none when A is read in place."""
    if not packed or dev.kind != "cpu":
        return 0.0
    return b * m * kk * math.ceil(n / max(nc, 1)) * PACK_A_S / max(dev.parallel_units, 1)


def unscaled_s(b: int, m: int, n: int, kk: int, p: KernelParams | None, packed_a: bool,
               item: int, dev: DeviceSpec, share: float = 1.0) -> float:
    """The kernel's time that no factor of its parameters scales beyond its traffic and launch:
    A's packing (where ``packed_a``) and the micro-kernel's calls.  One sum for the plan's
    groups (:func:`kernel_group`) and the calibration's plain kernel
    (:func:`plain_kernel_parts`), so the two cannot drift apart."""
    nc = column_chunk(n, p, dev.parallel_units)
    return packed_a_s(b, m, kk, n, nc, packed_a, dev) \
        + micro_calls_s(b, m, n, kk, p, item, dev, share)


def plain_kernel_parts(b: int, m: int, n: int, kk: int, p: KernelParams, item: int,
                       dev: DeviceSpec) -> tuple[float, float]:
    """(arithmetic, the rest: traffic, launch and A's packing) of :func:`plain_kernel_s`;
    no factor of the kernel's parameters scales the rest (:mod:`costmodel.kernel_fit`)."""
    a, bb, c = (float(b * x * y * item) for x, y in ((m, kk), (kk, n), (m, n)))
    live = live_c_bytes(c, b, p.split == SPLIT_BATCH, dev)
    moved = a * math.ceil(n / column_chunk(n, p, dev.parallel_units)) + bb \
        + c * c_passes(c, kk, p.kc, dev, live) + packed_b_bytes(b, kk, n, item, p.pack_b)
    compute = kernel_compute_s(b, m, n, kk, p, item, c, dev)
    serial = dev.kind == "cpu" and kernel_serial(b, m, n, kk, item)
    traffic = moved / dev.bandwidth * traffic_share(a + bb + c, dev)
    floor = traffic_floor_s(a + bb + c, bb, p.pack_b, p.nr, item, dev) \
        + padding_s(compute, m, n, p)
    return compute, (max(traffic, floor - compute) + kernel_launch_s(dev, serial)
                     + unscaled_s(b, m, n, kk, p, p.pack_a, item, dev))


def plain_kernel_s(b: int, m: int, n: int, kk: int, p: KernelParams, item: int,
                   dev: DeviceSpec) -> float:
    """The model's time for the kernel alone on contiguous row-major operands (no fusion, no
    copy): what ``autotune calibrate`` compares its measurements with.  The traffic adds to
    the arithmetic (the evidence is in :func:`kernel_group`)."""
    return sum(plain_kernel_parts(b, m, n, kk, p, item, dev))


def prologue_flops(w, form, pro: Prologue, kc: int, dev: DeviceSpec) -> float:
    """Flop-equivalents per element of a prologue as the packing evaluates it: its arithmetic
    and the transcendental calls that vary along the contraction's K, plus, shared by the ``kc``
    elements of a row's K slice, the calls that do not (a layer norm's ``rsqrt(var[row] +
    eps)``). Why: GCC (12, -O3 and the generated flags) hoists such a call out of a packer's
    loop over K where the panel is unrolled across the rows (pack_a's assembly: one vsqrtps per
    panel of MR rows, none in the K loop; bench_pack.c: the call adds nothing to pack_b's
    unrolled panel, and 0.11 ns an element, vectorised, to its ``omp simd`` loop over unit-
    stride rows). Priced per element, the 32 kernel groups with a layer-norm prologue in the
    model-check databases of msa_row_attention, pair_transition, gelu_mlp and the trimuls
    (2-core AMD host) were over-priced by a median ln(measured / predicted) of -0.34; hoisted,
    -0.21 (median |error| 0.34 -> 0.26)."""
    x = w.op(pro.producer)
    f, _ = x.flops_per_iteration()
    to_p = pro.to_contraction(w)
    k_names = frozenset(i for i, j in to_p.items() if j in form.k)
    varying = transcendental_weight(x.expr, dev, k_names)
    invariant = transcendental_weight(x.expr, dev) - varying
    return f + varying + invariant / max(1, min(kc, group_size(w.op(pro.contraction), form.k)))


def prologue_rate(w, form, pro: Prologue, layout_of, dev: DeviceSpec) -> float:
    """The rate a packing routine evaluates a prologue at: the loop rate where its main input
    walks unit-stride along the operand's rows or its K (the packers run one of them innermost,
    or unroll a panel across it, and GCC vectorises either), else the scalar rate (every
    element gathered).  Measured (bench/results/copy-runs/hoist/bench_pack.c, GCC 12, one core
    of the AMD host): a layer norm's prologue packed from a 4096 x 256 operand ran 0.17 ns an
    element rows-contiguous and 0.37 K-contiguous, where the scalar rate priced 2.5 ns; trimul
    N=32's triangle product with a's gate as its prologue, ``ga[i,k,c]`` channel-last (neither
    its rows i nor its K k unit-stride), ran ~5.6 ns an evaluation (1513 us a call against 778
    us with ``a`` materialized) where the loop rate priced 0.6 ns."""
    rows = form.m if pro.operand == "a" else form.n
    to_p = pro.to_contraction(w)
    st = dict(zip(pro.main_idx, strides(w.shapes[pro.main], layout_of(pro.main))))
    ext = dict(zip(pro.main_idx, w.shapes[pro.main]))
    for grp in (rows, form.k):
        live = [i for i in pro.main_idx if to_p.get(i) in grp and ext[i] > 1]
        if live and min(st[i] for i in live) == 1:
            return dev.loop_flops
    return dev.loop_flops / max(1, dev.vector_width)


def kernel_group(w, g: Group, fused, k: KernelParams | None, layout_of, dev: DeviceSpec,
                 item: int) -> GroupCost:
    """The group ``g`` (a contraction, with its epilogue or alone) run by the kernel with
    parameters ``k`` (None: a hand-written candidate that left them out, priced as one block
    without padding)."""
    parts, rows = kernel_operands(w, fused, g.anchor, layout_of, item)
    if k is not None and dev.kind == "cpu" and gathered_operands(w, layout_of, parts):
        k = replace(k, pack_a=True, pack_b=True)    # a kernel that gathers packs both
    p = parts.contraction
    op = w.op(p)
    form = gemm_form(op)
    b_, m, n, kk = (group_size(op, g) for g in (form.batch, form.m, form.n, form.k))
    if parts.pair:
        # one kernel over both: twice the paired extent, in halves of the tile
        k = pair_params(k, kk, item) if k is not None else None
        h = ((k.mr if (parts.epilogue.shared == "b") else k.nr) // 2) if k is not None else 1
        if parts.epilogue.shared == "a":
            n = math.ceil(n / h) * 2 * h
        else:
            m = math.ceil(m / h) * 2 * h
    flops = 2.0 * b_ * m * n * kk
    # A is read (and packed) once per column block, or per chunk of split "n"
    nc, kc = column_chunk(n, k, dev.parallel_units), (k.kc if k is not None else max(kk, 1))
    c_bytes = sum(nbytes for _, nbytes, role, *_ in rows if role == "c")
    live = live_c_bytes(c_bytes, b_, k is not None and k.split == SPLIT_BATCH, dev)
    passes = {"a": math.ceil(n / nc), "b": 1, "c": c_passes(c_bytes, kk, kc, dev, live), "e": 1}
    # B is packed where the parameters say so (a pair's: pair_params, above) and under a prologue
    packed_b = k is None or k.pack_b or parts.prologue_b is not None
    bytes_ = sum(nbytes * passes[role] for _, nbytes, role, *_ in rows) \
        + packed_b_bytes(b_, kk, n, item, packed_b)
    unique = sum(nbytes for _, nbytes, *_ in rows)
    # a copy reads and writes each byte with one side strided
    copy_bytes = sum(2 * copied * copy_waste(run, dev) for *_, copied, run in rows)
    # a symmetric product computes the tiles not wholly below the diagonal, each storing its
    # elements' mirror images in the skipped ones: those lines fetched and written once more
    sym = k is not None and symmetric_kernel(w, parts)
    share = computed_share(m, k.mr, k.nr) if sym else 1.0
    if sym:
        bytes_ += b_ * m * n * item
    compute = kernel_compute_s(b_, m, n, kk, k, item, c_bytes, dev, share)
    # A is packed where the parameters say so (a pair's rows: pair_params) and under a prologue
    compute += unscaled_s(b_, m, n, kk, k, k is None or k.pack_a or parts.prologue_a is not None,
                          item, dev, share)
    # the fused ops' arithmetic: an epilogue once per element of C at the loop rate (applied
    # to the register tile's vectors), a prologue once per element of its operand and packing
    # pass, at the rate prologue_rate gives
    fused_flops = trans = 0.0
    if parts.epilogue:
        x = w.op(parts.epilogue.consumer)
        f, t = x.flops_per_iteration()
        fused_flops += float(f * x.out_size)
        trans += float(t * x.out_size)
        compute += x.out_size * share * (f + transcendental_weight(x.expr, dev)) / dev.loop_flops
    for pro in (parts.prologue_a, parts.prologue_b):
        if pro:
            x = w.op(pro.producer)
            f, t = x.flops_per_iteration()
            times = passes[pro.operand]
            fused_flops += float(f * x.out_size * times)
            trans += float(t * x.out_size * times)
            compute += x.out_size * times * prologue_flops(w, form, pro, kc, dev) \
                / prologue_rate(w, form, pro, layout_of, dev)
    memory = bytes_ / dev.bandwidth * traffic_share(unique, dev)
    # The kernel's traffic adds to its arithmetic instead of hiding under it: over the 580
    # kernel groups of the model-check measurements of nine built-ins (aligned plans, AMD EPYC
    # 2-core host), the time-weighted mean |log(measured / predicted)| was 0.81 with the
    # maximum of the two (every workload under-priced, +0.72 signed) and 0.44 with the sum
    # (+0.21).  At the K=128 projections C is written once per 128 multiply-adds per element
    # and its lines are fetched for ownership; the micro-kernel's prefetch does not hide that.
    serial = dev.kind == "cpu" and kernel_serial(b_, m, n, kk, item)
    b_bytes = sum(nbytes for _, nbytes, role, *_ in rows if role == "b")
    floor = traffic_floor_s(unique, b_bytes, packed_b, k.nr if k is not None else 1, item, dev) \
        + padding_s(compute, m, n, k)
    total = max(compute + memory, floor) + kernel_launch_s(dev, serial) \
        + copy_bytes / dev.bandwidth
    return GroupCost(ops=tuple(g.members), anchor=g.anchor, impl=IMPL_KERNEL, tiles=(),
                     predicted_s=total, flops=flops + fused_flops, recomputed_flops=0.0,
                     transcendentals=trans, bytes=bytes_ + copy_bytes, unique_bytes=unique,
                     launches=1, bound="compute" if compute >= max(memory, floor) else "memory",
                     fused=tuple(FusedProducer(m, 1.0) for m in parts.members
                                 if m != g.anchor))


def kernel_copy_bytes(w, fused, anchor: str, layout_of, item: int) -> int:
    """Bytes of the copies the executor makes around the kernel group (peak memory)."""
    _, rows = kernel_operands(w, fused, anchor, layout_of, item)
    return int(sum(copied for *_, copied, _ in rows))
