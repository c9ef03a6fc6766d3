"""The cost of a stack of sibling contractions run as one library GEMM (search_spaces.siblings).
Pure, no I/O.

The stack is one GEMM ``(sum D, K) @ (K, S)`` with the members' flops, priced at the rate of that
shape, plus the copy of the differing operands side by side on every call, minus what the
members' own GEMMs spent re-reading the shared operand: BLAS packs the operand it streams once
per call, a pass over its bytes that is not overlapped with the arithmetic, and a stack makes it
once instead of once per member.  The size of that pass is what the calibrated skinny-K rate
leaves room for (trimul's projections, K = N = 128: packing M x K floats beside 2 M N K flops is
4 x rate / (N x bandwidth), about a fifth of the GEMM at 190 GFLOP/s and 30 GB/s), and what was
measured (2 cores, OpenBLAS: five M=65536 projections 81.8 ms apart, 65.7 ms stacked).

On a GPU no pass is saved that the roofline does not already see: cuBLAS streams the shared
operand from DRAM once per GEMM, so a stack's gain is its DRAM bytes counted once (five
trimul projections at N=702 read the 252 MB normalized input once instead of five times) and
one wider GEMM; the stack runs in the most accurate of its members' precisions
(search_spaces.precision.stack_precision), priced like a lone library GEMM in it (split
passes and products included), plus one copy kernel per member for the side-by-side weights.
"""
from __future__ import annotations

import math

from search_spaces.candidate import IMPL_LIBRARY
from search_spaces.gemm import gemm_form, operand_groups
from search_spaces.siblings import stack_extents, stack_of
from search_spaces.workload import Workload

from .devices import DeviceSpec
from .estimate import GroupCost
from .rates import gemm_rate, library_launch_s, precision_rate, split_extras, staged_copy_bytes


def stacked_group(w: Workload, members: tuple[str, ...], layout_of, dev: DeviceSpec,
                  item: int, precision: str = "fp32") -> GroupCost:
    """The predicted cost of the stack ``members`` (all of it: the first member's group runs
    it, the others' run nothing) in ``precision`` (its members' most accurate)."""
    sib = stack_of(w, members)
    form = gemm_form(w.op(members[0]))
    d, s, k = stack_extents(w, sib, members[0])
    n = len(members)
    flops = 2.0 * n * d * s * k
    shared = form.a if sib.shared == "a" else form.b
    shared_bytes = math.prod(w.shapes[shared.tensor]) * item
    differing = n * d * k * item
    results = n * d * s * item
    unique = shared_bytes + differing + results
    copy_bytes = 2.0 * differing                  # the differing operands, side by side
    ga, gb, _ = operand_groups(form)
    copy_bytes += staged_copy_bytes(shared.idx, w.shapes[shared.tensor],
                                    layout_of(shared.tensor), ga if sib.shared == "a" else gb,
                                    shared_bytes, dev)
    launches = 1
    if dev.kind == "cpu":
        compute = flops / gemm_rate(dev, 1, n * d, s, k)
        memory = unique / dev.bandwidth
        saved = (n - 1) * 2.0 * shared_bytes / dev.bandwidth
        # never below the same flops at the library's large-shape rate
        body = max(max(compute, memory) - saved, flops / dev.gemm_flops)
        moved = unique
    else:
        rate, products = precision_rate(dev, precision, 1, n * d, s, k)
        more, passes, extra = split_extras(item, 1, n * d, s, k, products)
        compute = flops * products / rate
        moved = unique + more
        memory = moved / dev.bandwidth
        body = max(compute, memory)
        copy_bytes += passes
        launches += extra + n            # the split's kernels, one copy per member's weight
    t = body + copy_bytes / dev.bandwidth + launches * library_launch_s(dev)
    return GroupCost(ops=tuple(members), anchor=members[0], impl=IMPL_LIBRARY, tiles=(),
                     predicted_s=t, flops=flops, recomputed_flops=0.0, transcendentals=0.0,
                     bytes=moved + copy_bytes, unique_bytes=unique, launches=launches,
                     bound="compute" if compute >= memory else "memory", fused=())


def stack_copy_bytes(w: Workload, members: tuple[str, ...], item: int) -> int:
    """Bytes of the kept matrix the differing operands are copied into."""
    d, _, k = stack_extents(w, stack_of(w, members), members[0])
    return len(members) * d * k * item
