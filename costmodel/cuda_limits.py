"""Shared-memory use of a candidate's CUDA kernels, and whether it fits the device.  Pure, no I/O.

The CUDA backend (``autotune/backends/cuda/codegen.py``) runs each loop group as one kernel with one
thread block per anchor tile; every member other than the anchor is held in dynamic shared
memory over its footprint (one row-major buffer per member, each starting on a 16-byte
boundary, rows of a multiple of 128 bytes padded by one element against bank conflicts).  A
tile whose footprints do not fit the device's per-block limit cannot launch: the backend
rejects it before launch, and the cost model should price it at ``math.inf`` so the
search prunes it without measuring (``over_limit`` below says which ones).

Limits are the opt-in maxima of dynamic shared memory per block (``cudaFuncSetAttribute
(MaxDynamicSharedMemorySize)``): 227 KB on sm_90 (H100, H200), 163 KB on sm_80 (A100).
Without the opt-in a kernel gets 48 KB; the backend opts in when it needs more.
"""
from __future__ import annotations

import math

from search_spaces.candidate import IMPL_LOOP, Candidate
from search_spaces.footprint import footprint_shape, footprints, item_bytes
from search_spaces.partition import Group, groups
from search_spaces.workload import Workload

from .devices import DeviceSpec

KB = 1024
DEFAULT_SHARED_BYTES = 48 * KB                # per block without the opt-in
SHARED_OPTIN_BYTES = {                        # per block with the opt-in, by device preset
    "a100": 163 * KB,
    "h100": 227 * KB,
    "h200": 227 * KB,
}
SHARED_OPTIN_BY_ARCH = {"sm_80": 163 * KB, "sm_86": 99 * KB, "sm_89": 99 * KB,
                        "sm_90": 227 * KB}
ALIGN_BYTES = 16
BANK_ROW_BYTES = 128          # 32 banks of 4 bytes: a row this long puts its columns in one bank


def padded_shape(shape: tuple[int, ...], item: int) -> tuple[int, ...]:
    """A member's shared-memory buffer, row-major, with each row one element longer where a
    row spans a whole number of bank rows: threads of a warp that walk the buffer across rows
    (its second-innermost dim the thread-fastest: a consumer coalescing its global access along
    another dim than the producer's innermost) then hit different banks instead of all one."""
    if len(shape) > 1 and math.prod(shape[:-1]) > 1 and (shape[-1] * item) % BANK_ROW_BYTES == 0:
        return (*shape[:-1], shape[-1] + 1)
    return tuple(shape)


def shared_layout(w: Workload, g: Group, tiles: tuple[int, ...]
                  ) -> tuple[list[tuple[str, int, int]], int]:
    """``([(member, offset_elems, size_elems), ...], total_bytes)`` of one loop group's shared
    memory: every non-anchor member in program order, each buffer 16-byte aligned and its rows
    padded (:func:`padded_shape`)."""
    anchor = w.op(g.anchor)
    fps = footprints(w, g, tiles)
    item = item_bytes(w)
    align = ALIGN_BYTES // item
    out, off = [], 0
    members = set(g.members)
    for op in w.ops:
        if op.out not in members or op.out == g.anchor:
            continue
        size = math.prod(padded_shape(footprint_shape(op, fps[op.out], anchor, tiles), item))
        out.append((op.out, off, size))
        off += -(-size // align) * align
    return out, off * item


def group_shared_bytes(w: Workload, g: Group, tiles: tuple[int, ...]) -> int:
    """Dynamic shared memory one block of this loop group needs, in bytes."""
    return shared_layout(w, g, tiles)[1]


def shared_bytes(w: Workload, cand: Candidate) -> int:
    """The largest dynamic shared memory any of ``cand``'s CUDA kernels needs per block (bytes;
    library groups need none)."""
    best = 0
    for g in groups(w, cand.fused_pairs):
        sched = cand.schedule(g.anchor)
        if sched.impl != IMPL_LOOP or sched.chain_block:
            continue            # a chain's buffers are each thread's own, not shared memory
        best = max(best, group_shared_bytes(w, g, sched.tiles))
    return best


def shared_limit(dev: DeviceSpec) -> int | None:
    """The per-block opt-in limit of a CUDA device preset; None for a CPU (no such limit)."""
    if dev.kind != "cuda":
        return None
    return SHARED_OPTIN_BYTES.get(dev.name, SHARED_OPTIN_BYTES["h100"])


def over_limit(w: Workload, cand: Candidate, dev: DeviceSpec) -> bool:
    """True if ``cand`` cannot launch on ``dev``: some kernel's footprints exceed shared memory.
    Always False on a CPU, so CPU estimates are unaffected."""
    limit = shared_limit(dev)
    return limit is not None and shared_bytes(w, cand) > limit


def limit_penalty_s(w: Workload, cand: Candidate, dev: DeviceSpec) -> float:
    """``math.inf`` for a candidate that cannot launch on ``dev``, else 0.0: what
    ``costmodel.estimate`` adds to a CUDA candidate's predicted time."""
    return math.inf if over_limit(w, cand, dev) else 0.0
