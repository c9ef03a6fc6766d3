"""What the group-level correction (:mod:`costmodel.group_correction`) knows of one fused group:
its features and its signature.  Pure, no I/O.

A candidate's time is the sum of its groups' times, and a group's residual against the
analytic model (``ln(measured / predicted)``) depends on what that group is: a library GEMM, the
generated kernel with a given configuration, a memory-bound or compute-bound loop nest.  The
features say that, per group; the kernel's configuration choices come with their pairwise
products, because their costs interact (measured on this 2-core AVX2 machine: a 4-row
micro-tile reading B in place ran at 69-79 GFLOP/s where each choice alone cost 10-25 %).

The signature identifies the code a group runs: the same ops (by their definitions), the same
schedule, the same layouts of what it reads and writes and the same fusion inside it give the
same generated code, so a group measured inside one candidate has that time inside another.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math

from search_spaces.candidate import IMPL_KERNEL, IMPL_LIBRARY, Candidate
from search_spaces.footprint import item_bytes
from search_spaces.workload import Workload

from .devices import DeviceSpec
from .estimate import GroupCost

KERNEL_FLAGS = ("short_tile", "one_vector", "unpacked_a", "unpacked_b", "split_batch",
                "outer_a", "stream", "split_n")
KINDS = ("library", "kernel", "loop_memory", "loop_compute", "chain")
GROUP_FEATURES = (
    *(f"is_{k}" for k in KINDS),
    "log_predicted_s",       # the scale: a slope other than one
    "log_flops",
    "log_byte_waste",        # ln(bytes moved / bytes touched once)
    "recompute_share",
    "transcendental_share",
    "log_tile_elems",        # loops: ln(elements per anchor tile)
    "occupancy",             # loops: share of cores the last wave of tiles keeps busy
    "fused_producers",       # loops: producers evaluated inside the tiles
    "strided_share",         # loops: flops in a strided innermost walk / flops
    "chained_share",         # loops: flops with a reduction innermost / flops
    "strided_x_log_tile",    # how far a strided walk reaches: with the tile's size
    "chained_x_strided",     # a dependent chain of strided loads: latency, not throughput
    *(f"kernel_{f}" for f in KERNEL_FLAGS),
    "kernel_log_kc", "kernel_log_nc",
    *(f"kernel_{a}_x_{b}" for a, b in itertools.combinations(KERNEL_FLAGS, 2)),
)


def group_kind(g: GroupCost) -> str:
    if g.impl == IMPL_LIBRARY:
        return "library"
    if g.impl == IMPL_KERNEL:
        return "kernel"
    if g.chain:
        return "chain"
    return "loop_compute" if g.bound == "compute" else "loop_memory"


def _kernel_flags(cand: Candidate, g: GroupCost, item: int) -> tuple[float, ...]:
    p = cand.schedule(g.anchor).kernel if g.impl == IMPL_KERNEL else None
    if p is None:
        return (0.0,) * (len(KERNEL_FLAGS) + 2)
    flags = (p.mr <= 4, p.nr <= p.lanes(item), not p.pack_a, not p.pack_b,
             p.split == "batch", p.outer == "a", p.stream, p.split == "n")
    return tuple(float(f) for f in flags) + (math.log(p.kc), math.log(p.nc))


def group_features(w: Workload, cand: Candidate, g: GroupCost, dev: DeviceSpec
                   ) -> tuple[float, ...]:
    """The feature vector (in :data:`GROUP_FEATURES` order) of group ``g`` of ``cand``; ``w`` is
    the workload the candidate runs (its contraction orders applied:
    ``search_spaces.rewrite.rewritten``)."""
    kind = group_kind(g)
    flops = max(g.flops, 1.0)
    elems = occ = 0.0
    if kind.startswith("loop") or kind == "chain":
        shape = w.op(g.anchor).out_shape
        n = math.prod(math.ceil(e / max(t, 1)) for e, t in zip(shape, g.tiles)) or 1
        waves = math.ceil(n / max(dev.parallel_units, 1))
        occ = n / (waves * max(dev.parallel_units, 1))
        elems = math.log(max(math.prod(min(t, e) for t, e in zip(g.tiles, shape)), 1))
    item = item_bytes(w)
    kern = _kernel_flags(cand, g, item)
    binary = kern[:len(KERNEL_FLAGS)]
    pairs = tuple(a * b for a, b in itertools.combinations(binary, 2))
    return (*(float(kind == k) for k in KINDS),
            math.log(max(g.predicted_s, 1e-9)),
            math.log(flops),
            math.log(max(g.bytes, 1.0) / max(g.unique_bytes, 1.0)),
            g.recomputed_flops / flops,
            g.transcendentals / flops,
            elems, occ, float(len(g.fused)),
            g.strided_flops / flops, g.chained_flops / flops,
            g.strided_flops / flops * elems,
            min(g.strided_flops, g.chained_flops) / flops,
            *kern, *pairs)


def group_signature(w: Workload, cand: Candidate, g: GroupCost, code: str = "") -> str:
    """What identifies the code group ``g`` of ``cand`` runs (see the module doc): sha256 over
    the workload's dims and dtype, the group's op definitions, its schedule, the fusion edges
    inside it, the layouts of the tensors it reads and writes, and ``code``: the version of
    the code generator that ran it (``autotune.code_version``; a group measured under another
    generator ran other code)."""
    ops = sorted(g.ops)
    made = set(ops)
    touched = sorted({t for o in ops for t in w.op(o).inputs() if t not in made} | {g.anchor})
    inside = sorted(e for e in cand.fused if set(e.split("->")) <= made)
    body = {"dims": sorted(dict(w.dims).items()), "dtype": w.dtype,
            "ops": [repr(w.op(o)) for o in ops],
            "schedule": cand.schedule(g.anchor).to_dict(), "fused": inside,
            "layouts": {t: list(cand.layout(t, len(w.shapes[t]))) for t in touched},
            "code": code}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]
