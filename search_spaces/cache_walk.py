"""How a loop nest walks memory through the first-level cache, and the innermost loops it
picks by that: when a strided access's lines come back (:func:`lines_between`), whether they
come back from L1 (:func:`revisited_far`, :func:`conflicting`: crowded into a few of its
sets), and the nest of a group member's loops with the fewest strided walks that miss
(:func:`inner_nest`).  Shared by the CPU and CUDA generators (through
``footprint.plan_group``) and the cost model, so what one prices the other emits.
"""
from __future__ import annotations

import functools
import math

from .ir import Op

# A loop at least this long fills the vector units (8 float32 lanes of AVX2); a shorter
# innermost loop runs partly scalar.
VECTOR_LANES = 8
# A strided walk whose lines come back within this many bytes of other lines finds them in
# the first-level cache (32 KiB on the x86 cores we run): it costs no more than a unit one.
REUSE_BYTES = 32 * 1024
LINE_BYTES = 64
# What a near scatter into a tile buffer may count against a near gather (a half; into memory
# as a far one): inner_nest moves a loop only where the walk gains at either weight.
NEAR_SCATTER_MOVED = 0.5


def lines_between(st: dict[str, int], order: tuple[str, ...], extents: dict[str, int]) -> float:
    """Lines an access (element strides ``st`` by index) touches between two visits of one
    line when the nest ``order`` (outermost first, trip counts ``extents``) walks it: one per
    iteration of the loops inside its unit-stride index's loop that index it (infinite where
    no unit-stride index is in the nest: every line is visited once)."""
    deeper = _inside_unit(st, order)
    if deeper is None:
        return math.inf
    return float(math.prod(extents[i] for i in deeper if i in st and i in extents))


def _inside_unit(st: dict[str, int], order: tuple[str, ...]) -> tuple[str, ...] | None:
    """The loops of ``order`` inside the outermost one over a unit-stride index of ``st``
    (None: no such loop)."""
    unit = next((i for i in order if st.get(i) == 1), None)
    return None if unit is None else order[order.index(unit) + 1:]


# The first-level data cache places a line in one of L1_SETS sets by its address bits above
# the line, and holds L1_WAYS lines a set: 32 KiB 8-way (AMD Zen, Intel to Skylake) and 48 KiB
# 12-way (Intel since Ice Lake) both have 64 sets, so addresses 4 KiB apart always collide.
L1_SETS = 64
L1_WAYS = 8


@functools.lru_cache(maxsize=8192)
def sets_touched(walk: tuple[tuple[int, int], ...], sets: int = L1_SETS) -> int:
    """Distinct sets of a cache of ``sets`` sets among the lines at the byte offsets the loops
    ``walk`` ((byte stride, trip count) each) reach from one start: a power-of-two stride maps
    its lines to a few sets (4 KiB apart: all to one set of L1), whatever their number."""
    span = sets * LINE_BYTES
    offsets = {0}
    for stride, trips in walk:
        steps = {(k * stride) % span for k in range(min(trips, span))}
        if len(offsets) * len(steps) > 1 << 16:
            return sets         # strides that are not powers of two: spread over the sets
        offsets = {(o + d) % span for o in offsets for d in steps}
    return len({o // LINE_BYTES for o in offsets})


def conflicting(st: dict[str, int], order: tuple[str, ...], extents: dict[str, int],
                item: int) -> bool:
    """Whether the lines an access touches between two visits of one line
    (:func:`lines_between`) are more than the ways of the L1 sets their addresses map to: each
    is evicted before it comes back, however few they are.  Measured: gelu_mlp's
    bias add writing row-major hb[d0,d1] (1,024 floats a row: 4 KiB) from column-major hp,
    walking d0 innermost over 64 rows (64 lines between visits, all in one set of L1): 4.7 ms
    for 2 MB, 9 ns an element; pair_transition's relu into channel-first hr (256 KiB a
    channel) walking 32 channels innermost: 121 ms for 134 MB."""
    lines = lines_between(st, order, extents)
    if not math.isfinite(lines) or lines <= L1_WAYS:
        return False
    walk = tuple(sorted((abs(st[i]) * item, extents[i]) for i in _inside_unit(st, order)
                        if i in st and i in extents and extents[i] > 1))
    return lines > L1_WAYS * sets_touched(walk)


def revisited_far(st: dict[str, int], order: tuple[str, ...], extents: dict[str, int]) -> bool:
    """Whether an access touches more than :data:`REUSE_BYTES` of other lines before it
    comes back to a line (:func:`lines_between`)."""
    return lines_between(st, order, extents) * LINE_BYTES > REUSE_BYTES


def inner_nest(op: Op, reads: list[tuple[dict[str, int], bool, bool]], writes,
               order: tuple[str, ...], extents: dict[str, int], item: int = 4,
               in_place=lambda i: False) -> tuple[str, ...]:
    """``order`` with the index ``op``'s innermost loop walks moved last, and, where that
    spares a walk that misses, another index moved just outside it (ties keep ``order``'s
    innermost index, the dominant read's unit-stride one, and the rest of ``order``).

    The innermost index is the one with the fewest gathers
    (a read walked with a stride), scatters (the write walked with a stride, twice as dear: a
    sum reads it back on every step) and partial vectors (an extent under
    :data:`VECTOR_LANES`).  A strided walk whose lines are not :func:`revisited_far` stays
    in L1 and only loses the vectors: a gather counts a half, a scatter a quarter, and a
    gather from a small operand of memory nothing (measured below).  ``reads``: (strides by
    index, whether the operand is small: a tensor of memory under an eighth of the largest
    access, whether it is one of memory rather than a tile buffer) per read; ``writes(i)``:
    the write's strides with ``i`` innermost; ``in_place(i)``: whether that write goes to the
    output in memory rather than to a tile buffer.

    Why: walking only the dominant read contiguously, trimul's gb[i,k,c'] = xn[i,k,c] w[c,c']
    with xn stored channel-first and tiles (256, 4, 128) ran its innermost loop over 4 ks
    while scattering into a 512 KB accumulator (7.6 s, 2 GFLOP/s); over c' every access is
    unit stride or invariant (1.4 s); a plan whose fused projection walked its 64-row tile
    gathering from xn and scattering into its tile buffer, both in L1, ran that group 6.3 s,
    and 1.0 s over the channel.  Why a near scatter weighs less than a near gather: the
    heuristic plan's layer norm writes channel-first tn walking the channel innermost, each
    line back at the next j after 128 others (0.06-0.09 s); gathering from its tile buffer
    instead to write tn unit-stride ran 0.11-0.12 s.  Why small operands are free: the
    unfused triangle_attention_ending adds a pair bias tb[b,j,h] and a mask[j,i] to 1M-element
    logits walking j (both gathered, 0.06 s); walking i gathers the logits and scatters the
    sum (0.10-0.11 s).  A walk whose lines crowd into a few cache sets (:func:`conflicting`:
    a stride of a multiple of 4 KiB) counts as far however few lines it touches: they are
    evicted before they come back, where it reads or writes memory (a tile buffer's lines
    stay in L2).  Why: triangle_attention_starting's unfused logits lg[h,i,j,k] = sc[h,i,j,k]
    + tb[h,j,k] + mask, tb stored (j, k, h), walked i innermost (256 lines of sc and of lg a
    step, 256 KiB apart: "near" by their count) to spare the small tb a gather: 0.61 s for
    67 M elements, 9 ns each; walking k, 22 ms.

    Why the loop outside it too: a strided access comes back to a line once per step of its
    unit-stride index's loop, after the lines of every loop inside that one; right outside
    the innermost, that is the innermost's lines alone.  cc_doubles' r[a,b,i,j] = (s[a,b,i,j]
    + s[b,a,j,i]) / (...), s stored (a,i,b,j), tiles (32, 48, 4, 24), walked j innermost with
    i outside b (the dominant read's order): the transposed read came back after 48 x 24
    lines 4.6 KiB apart, crowded into 8 sets of L1 (1.25-1.30 ms a call, 2 threads); with i
    moved just outside j, after 24 (0.68-0.77 ms).  The heuristic's tiles (1, 16, 24, 24)
    walked i innermost, gathering s and scattering r, to spare that read the crowding
    (0.64-0.68 ms); j under i: 0.47-0.49 ms.  A scatter counts as much as a gather there:
    triangle_attention_ending's out[i,j,c] = po[i,j,c] + b[c], po stored channel-first,
    tiles (128, 16, 8), gathering po over 8 cs (each line back after 8 others) 9.0-9.3 ms a
    call; with c moved outside j to read po unit-stride and scatter out (back after 16),
    14.3-14.9 ms (2-core AVX-512 host, random candidates of the space, one process each,
    alternated).  And a far gather turned into a near scatter into a tile buffer:
    pair_transition's relu from channel-first hp into its tile buffer 1.0-1.17 s, 0.79-0.85."""
    def cost(nest: tuple[str, ...]) -> tuple[float, float]:
        """The walk's count with a near scatter at a quarter, and with it at the weights a
        moved loop must also win by (NEAR_SCATTER_MOVED; a far walk's into memory)."""
        i = nest[-1]

        def far(st: dict[str, int], memory: bool) -> bool:
            return revisited_far(st, nest, extents) or (
                memory and conflicting(st, nest, extents, item))
        count = sum(0.0 if st.get(i, 0) in (0, 1) else 1.0 if far(st, glob)
                    else 0.0 if small else 0.5 for st, small, glob in reads)
        count += max(0.0, (VECTOR_LANES - extents[i]) / VECTOR_LANES)
        wst = writes(i) if i in op.parallel else {}
        if wst.get(i, 0) in (0, 1):
            return count, count
        memory = in_place(i)
        if far(wst, memory):
            return count + 2.0, count + 2.0
        return count + 0.25, count + (2.0 if memory else NEAR_SCATTER_MOVED)

    def rank(i: str) -> tuple[bool, int]:
        return i != order[-1], op.domain.index(i)
    bases = {i: tuple(x for x in order if x != i) + (i,) for i in op.domain}
    costs = {i: cost(n) for i, n in bases.items()}
    i0 = min(op.domain, key=lambda i: (costs[i][0], rank(i)))
    best, least = bases[i0], costs[i0]
    # a loop moved just outside the innermost, where that spares the walk whether a near
    # scatter counts a quarter or, as measured above, as much as a near gather into a tile
    # buffer and as a far one into memory
    for i in sorted(op.domain, key=rank):
        for j in bases[i][:-2]:
            nest = tuple(x for x in bases[i][:-1] if x != j) + (j, i)
            c = cost(nest)
            if c[0] < least[0] and c[1] < least[1]:
                best, least = nest, c
    return best
