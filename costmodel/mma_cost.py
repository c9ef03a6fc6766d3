"""The cost of a group run by the CUDA backend's tensor-core kernel (impl ``kernel`` on a GPU,
autotune.backends.cuda.mma_kernel).  Pure.

A roofline like a library GEMM's (arithmetic and traffic overlap on a GPU): the contraction's
multiply-adds (twice for a pair) times the precision's products (three for the float32-accurate
split) at the device's tensor-core rate times ``dev.mma_share``, less the share of
partial block tiles; against the bytes of everything the kernel touches once (a re-read of an
operand slice by another block is served by the L2: a 702^2 x 128 operand is 252 MB, but the
blocks that share a slice run together), an operand or result whose tiles no unit stride
crosses (channel-last trimul's einsum operands, one batch item per block) at a sector per
element.  The fused ops' arithmetic is added at the loop rate:
an epilogue once per element of C, a prologue once per element of its operand and block that
loads it (each block applies it to the slice it stages).  The fused intermediates are never
stored or loaded: that saving is the difference from the unfused plan.
"""
from __future__ import annotations

import math

from search_spaces.candidate import IMPL_KERNEL
from search_spaces.gemm import gemm_form, group_size
from search_spaces.kernel import KernelParams, gpu_params
from search_spaces.kernel_reads import kernel_accesses, unit_stride_side
from search_spaces.partition import Group
from search_spaces.precision import TF32_PRODUCTS

from .devices import DeviceSpec
from .estimate import FusedProducer, GroupCost
from .kernel_cost import kernel_operands, tile_use
from .rates import kernel_launch_s, transcendental_weight

# The generated kernel's share of the tensor-core rate cuBLAS reaches (dev.tf32_flops *
# dev.tensor_share) is dev.mma_share: by default (0.35) an estimate, not a measurement, until
# `autotune calibrate --device cuda` measures it.  The kernel issues mma.sync (Hopper's wgmma
# is reserved to warpgroup-wide asynchronous code) from shared memory loaded synchronously (no
# cp.async pipeline, no ldmatrix), and splits its fragments in registers; kernels of that
# build reach a third to a half of the library's rate in public write-ups of hand-written
# Ampere/Hopper GEMMs.
# a GPU moves global memory in 32-byte sectors: a warp's loads that lie a stride apart move one
# each per element (the tile loads' thread order follows the unit-stride side where there is one)
SECTOR_BYTES = 32
# The L2's bandwidth as a multiple of the DRAM's: an estimate (Hopper's L2 serves several times
# HBM's rate in public microbenchmarks), to be measured with the kernel's rates
L2_RATIO = 3.0


def mma_rate(dev: DeviceSpec, p: KernelParams, m: int, n: int, k: int) -> float:
    """Tensor-core flop/s of the generated kernel at these extents (the lanes of partial block
    tiles and K slices wasted)."""
    peak = dev.tf32_flops * dev.tensor_share if dev.tf32_flops > 0 else dev.f32_flops
    use = tile_use(m, p.mc) * tile_use(n, p.nc) * tile_use(k, p.kc)
    return peak * dev.mma_share * use


def gpu_kernel_group(w, g: Group, fused, k: KernelParams | None, layout_of, dev: DeviceSpec,
                     item: int, precision: str) -> GroupCost:
    """The group ``g`` (a contraction with its fusions) run by the GPU's tensor-core kernel
    with parameters ``k`` in ``precision`` ("3xtf32" or "tf32")."""
    parts, rows = kernel_operands(w, fused, g.anchor, layout_of, item)
    p = gpu_params(k, bool(parts.pair))
    op = w.op(parts.contraction)
    form = gemm_form(op)
    b_, m, n, kk = (group_size(op, x) for x in (form.batch, form.m, form.n, form.k))
    flops = 2.0 * b_ * m * n * kk * (2 if parts.pair else 1)
    products = TF32_PRODUCTS.get(precision, 1)
    compute = flops * products / mma_rate(dev, p, m, n, kk)
    # DRAM: every tensor once (the executor copies nothing around this kernel).  L2: each
    # block stages its own slices, so A is loaded once per column block of C and B once per
    # row block; a slice whose tile no unit stride crosses (channel-last trimul's einsum
    # operands: one batch item per block) moves a 32-byte sector per element
    acc = kernel_accesses(w, parts)
    groups = {"a": (form.batch, form.m, form.k), "b": (form.batch, form.k, form.n),
              "c": (form.batch, form.m, form.n)}
    loads = {"a": math.ceil(n / p.nc), "b": math.ceil(m / p.mc), "c": 1}
    main = [(acc.a, "a"), (acc.b, "b"), (acc.out, "c")] + (
        [(acc.pair, acc.pair_role)] if acc.pair else [])
    dram = l2 = 0.0
    for read, side in main:
        nbytes = math.prod(w.shapes[read.tensor]) * item
        spread = 1 if unit_stride_side(w, layout_of, read, groups[side]) else SECTOR_BYTES / item
        dram += nbytes
        l2 += nbytes * loads[side] * spread
    seen = {read.tensor for read, _ in main}
    extra = float(sum(nbytes for t, nbytes, *_ in rows if t not in seen))
    bytes_ = dram + extra
    memory = max(bytes_ / dev.bandwidth, (l2 + extra) / (L2_RATIO * dev.bandwidth))
    fused_s = fused_flops = trans = 0.0
    for name, times in ((parts.epilogue and parts.epilogue.consumer, 1),
                        (parts.prologue_a and parts.prologue_a.producer, loads["a"]),
                        (parts.prologue_b and parts.prologue_b.producer, loads["b"])):
        if name:
            x = w.op(name)
            f, t = x.flops_per_iteration()
            fused_flops += float(f * x.out_size * times)
            trans += float(t * x.out_size * times)
            fused_s += x.out_size * times * (f + transcendental_weight(x.expr, dev)) \
                / dev.loop_flops
    total = max(compute, memory) + fused_s + kernel_launch_s(dev)
    return GroupCost(ops=tuple(g.members), anchor=g.anchor, impl=IMPL_KERNEL, tiles=(),
                     predicted_s=total, flops=flops + fused_flops, recomputed_flops=0.0,
                     transcendentals=trans, bytes=max(bytes_, l2 + extra), unique_bytes=bytes_,
                     launches=1,
                     bound="compute" if compute >= memory else "memory",
                     fused=tuple(FusedProducer(x, 1.0) for x in parts.members
                                 if x != g.anchor))
