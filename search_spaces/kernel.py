"""Parameters of the generated contraction kernel (the ``kernel`` impl) and their legal ranges.

The kernel follows the BLIS/Goto design: C is computed in NC-wide column blocks, K in KC-deep
slices, rows in MC-tall blocks; inside a block an MR x NR micro-kernel keeps its tile of C in
vector registers.  Which values are legal depends on the machine (vector width, register count,
cache sizes): :class:`KernelBounds` holds those facts as plain data (the CPU backend reads them
from the machine), :func:`kernel_options` turns them into the choices the search space offers.
Pure: no I/O here.
"""
from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, replace

SPLIT_M = "m"          # threads share one packed B block and split the rows (MC blocks) of C
SPLIT_BATCH = "batch"  # one batch item per thread, all blocks single-threaded
SPLIT_N = "n"          # chunks of C's columns dealt to threads, each with all rows: no sharing
SPLITS = (SPLIT_M, SPLIT_BATCH, SPLIT_N)
OUTER_B = "b"          # BLIS's order: a B micro-panel stays in L1 while the A block streams by
OUTER_A = "a"          # an A micro-panel stays while the B block streams: C written row-panel-wise
OUTERS = (OUTER_B, OUTER_A)
# A packed B whose column block's whole K fits in this many bytes is packed at once, all its K
# slices, before any is used: the threads then meet at two barriers a column block, not two a
# slice (autotune.backends.cpu.gemm_driver; the model's costmodel.kernel_cost.kernel_threads).
# 4 MiB: a few cores' L2, far under the last-level cache the B block is sized for.
PACK_ALL_BYTES = 4 << 20


@dataclass(frozen=True)
class KernelParams:
    """One configuration of the generated kernel.

    ``mr`` x ``nr``: the register tile (``nr`` a multiple of the vector's lanes); ``mc``, ``kc``,
    ``nc``: the cache blocks (``mc`` a multiple of ``mr``, ``nc`` of ``nr``); ``pack_a`` /
    ``pack_b``: copy that operand into micro-panels (off: the micro-kernel reads it in place,
    where its layout allows; the executor packs anyway where it does not); ``split``: how
    threads share the work (:data:`SPLITS`); ``vec_bytes``: the vector width the code uses;
    ``outer``: whose micro-panels the block's outer loop walks (:data:`OUTERS`); ``stream``:
    write a C that takes one K slice with streaming (non-temporal) stores, past the caches.
    """
    mr: int
    nr: int
    mc: int
    kc: int
    nc: int
    pack_a: bool = True
    pack_b: bool = True
    split: str = SPLIT_M
    vec_bytes: int = 32
    outer: str = OUTER_B
    stream: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "KernelParams":
        return KernelParams(int(d["mr"]), int(d["nr"]), int(d["mc"]), int(d["kc"]), int(d["nc"]),
                            bool(d.get("pack_a", True)), bool(d.get("pack_b", True)),
                            str(d.get("split", SPLIT_M)), int(d.get("vec_bytes", 32)),
                            str(d.get("outer", OUTER_B)), bool(d.get("stream", False)))

    def lanes(self, itemsize: int) -> int:
        return self.vec_bytes // itemsize


@dataclass(frozen=True)
class KernelBounds:
    """What the machine allows the kernel: vector widths it executes natively (bytes, widest
    first), vector registers per core, cache sizes per core (L1 data, L2) and the shared L3,
    and the cores the kernel's threads run on."""
    vec_bytes: tuple[int, ...] = (32, 16)
    registers: int = 16
    l1_bytes: int = 32 * 1024
    l2_bytes: int = 512 * 1024
    l3_bytes: int = 8 * 1024 * 1024
    cores: int = 1
    gpu: bool = False        # the CUDA backend's tensor-core kernel (search_spaces.cuda_kernel)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class KernelOptions:
    """The choices the space offers for one contraction: register tiles (mr, nr), block sizes,
    threading splits, vector widths and loop orders; ``default`` is a sound configuration
    among them."""
    tiles: tuple[tuple[int, int], ...]
    mc: tuple[int, ...]
    kc: tuple[int, ...]
    nc: tuple[int, ...]
    splits: tuple[str, ...]
    vec_bytes: tuple[int, ...]
    outers: tuple[str, ...]
    default: KernelParams
    packs: tuple[int, ...] = (1, 0)      # pack_a / pack_b answers (1: packed)
    streams: tuple[int, ...] = (0, 1)    # stream answers


def micro_tiles(bounds: KernelBounds, vec_bytes: int, itemsize: int) -> tuple[tuple[int, int], ...]:
    """Register tiles (mr, nr) that fit the register file: mr * nv accumulators, nv vectors of
    B and one broadcast of A (nv = nr / lanes), with at least 8 independent accumulators so the
    FMA latency is covered.  Largest first."""
    lanes = vec_bytes // itemsize
    out = []
    for nv in (1, 2, 3, 4):
        for mr in (4, 6, 8, 12, 14, 16, 24, 28):
            if mr * nv + nv + 1 <= bounds.registers and mr * nv >= 8:
                out.append((mr, nv * lanes))
    return tuple(sorted(out, key=lambda t: (-t[0] * t[1], t)))


def default_params(bounds: KernelBounds, itemsize: int) -> KernelParams:
    """The configuration used before any search: widest vectors; the register tile with the
    most vectors across that still keeps 6 rows (6 x 4 vectors with 32 registers, 6 x 2 with
    16: four B loads feed 24 FMAs), KC as deep as a B micro-panel allows within L1 (at most
    256), MC so that a packed A block sits in L2, NC as wide as L3 allows.  Measured single-
    threaded on the AVX-512 development machine at 2048^3: 6 x 64 reached 98 GFLOP/s against
    83 for 14 x 32 (BLAS: 92)."""
    vb = bounds.vec_bytes[0]
    tiles = micro_tiles(bounds, vb, itemsize)
    six = [t for t in tiles if t[0] >= 6] or list(tiles)
    mr, nr = max(six, key=lambda t: (t[1], t[0]))
    kc = min(256, max(k for k in (64, 128, 192, 256) if k * nr * itemsize <= 2 * bounds.l1_bytes
                      or k == 64))
    mcs = _mc_options(bounds, mr, kc, itemsize)
    return KernelParams(mr, nr, mcs[len(mcs) // 2], kc, _nc_options(bounds, nr, kc, itemsize)[-1],
                        vec_bytes=vb)


def _kc_options(bounds: KernelBounds, nr: int, itemsize: int) -> tuple[int, ...]:
    # a B micro-panel (kc x nr) stays within twice L1 while the micro-kernel runs (its loads
    # are few per FMA: the excess streams from L2 without a stall, as measured at 6 x 64).
    # No slices under 64: KC 16 and 32, once offered to products of a few rows (whose C stays
    # in cache while B streams by), lost to KC 64-256 at every such shape once B could be read
    # in place (2-core AVX-512 host, bench/gemm_kernel.py, 21 interleaved rounds, 4 x 64
    # tiles, B in place: 4 x 3072 x 768 ran 92 / 114 GFLOP/s at KC 16 / 32 against 119 at 64;
    # 4 x 768 x 3072 60 / 91 against 118 at 256; 16 x 1024 x 1024 103 / 117 against 132)
    opts = [k for k in (64, 128, 192, 256, 384, 512, 768)
            if k * nr * itemsize <= 2 * bounds.l1_bytes]
    return tuple(opts or [64])


def _mc_options(bounds: KernelBounds, mr: int, kc: int, itemsize: int) -> tuple[int, ...]:
    # a packed A block (mc x kc) stays in L2 (half of it: B micro-panels and C pass through too)
    top = max(mr, (bounds.l2_bytes // 2) // (kc * itemsize) // mr * mr)
    opts = sorted({min(top, max(mr, m // mr * mr)) for m in (48, 96, 144, 192, 288, 384, 576)})
    return tuple(opts)


def _nc_options(bounds: KernelBounds, nr: int, kc: int, itemsize: int) -> tuple[int, ...]:
    # a packed B block (kc x nc) stays in L3 (its share per core at most: half of it)
    top = max(nr, (bounds.l3_bytes // 2) // (kc * itemsize) // nr * nr)
    return tuple(sorted({min(top, max(nr, n // nr * nr)) for n in (512, 1024, 2048, 4096, 8192)}))


def batch_split_pays(batch: int, cores: int) -> bool:
    """Whether split "batch" is offered: at least as many items as cores (two at least), so
    that whole items keep every thread busy."""
    return batch >= max(2, cores)


def column_chunk(n: int, p: KernelParams | None, cores: int) -> int:
    """The width of the column chunks split "n" deals out (gemm_driver's ``cw``): whole NR-wide
    panels, at most NC and at most an even share of the ``n`` columns over ``cores`` threads
    (each chunk packs its own B and all of A again: the fewer the better, as long as every
    thread gets one).  Other splits: one column block, ``min(n, nc)`` (no parameters: all
    ``n``)."""
    if p is None:
        return max(1, n)
    if p.split != SPLIT_N:
        return max(1, min(n, p.nc))
    panels = -(-n // p.nr)
    return max(1, min(p.nc, -(-panels // max(1, cores)) * p.nr))


@functools.lru_cache(maxsize=256)
def kernel_options(bounds: KernelBounds, itemsize: int, batch: int) -> KernelOptions:
    """The legal choices for a contraction with ``batch`` independent items.  Block sizes are
    listed for the default register tile and kc; :func:`legalize` fits any combination.  On a
    GPU (``bounds.gpu``) the tensor-core kernel's: :func:`gpu_options`.  Memoised (an immutable
    record of hashable arguments): the model's climb builds thousands of candidates, and
    asking their kernel questions recomputed these 95 000 times, a third of trimul's climb at
    N=24 (7.7 of 26.5 s under the profiler)."""
    if bounds.gpu:
        return gpu_options()
    d = default_params(bounds, itemsize)
    tiles = tuple(t for vb in bounds.vec_bytes[:1] for t in micro_tiles(bounds, vb, itemsize))
    splits = (SPLIT_M, SPLIT_BATCH, SPLIT_N) if batch_split_pays(batch, bounds.cores) \
        else (SPLIT_M, SPLIT_N)
    return KernelOptions(tiles, _mc_options(bounds, d.mr, d.kc, itemsize),
                         _kc_options(bounds, d.nr, itemsize),
                         _nc_options(bounds, d.nr, d.kc, itemsize), splits, bounds.vec_bytes,
                         OUTERS, d)


# The CUDA backend's kernel (autotune.backends.cuda.mma_kernel) reads the same parameters as
# tensor-core tiles: mr x nr is one warp's tile of C (multiples of 16: WMMA's 16 x 16
# accumulator fragments), mc x nc the thread block's (mc/mr * nc/nr warps), kc the K slice
# staged in shared memory per step (a multiple of 8, WMMA TF32's depth); packing, splits,
# loop orders and streaming stores have one value there.  GPU_VEC_BYTES makes legalize round
# nr to 16 floats.  Warp tiles of 64 x 64 hold 128 accumulators a thread (a pair twice that:
# mma_kernel narrows a pair's tile), the most that leaves registers for the operands.
GPU_VEC_BYTES = 64
GPU_WARP_TILES = ((32, 64), (32, 32), (64, 32), (64, 64))
GPU_BLOCKS = (64, 128)
GPU_KC = (32, 16)
GPU_MAX_WARPS = 16      # 512 threads a block: 128 registers each at most on an SM of 64 K


def gpu_options() -> KernelOptions:
    """The tensor-core kernel's choices (float32 operands); the default is 4 warps of 32 x 64
    over a 64 x 128 block tile, K slices of 32: 26 KB of shared memory (43 KB for a pair)."""
    d = KernelParams(32, 64, 64, 32, 128, vec_bytes=GPU_VEC_BYTES)
    return KernelOptions(GPU_WARP_TILES, GPU_BLOCKS, GPU_KC, GPU_BLOCKS[::-1], (SPLIT_M,),
                         (GPU_VEC_BYTES,), (OUTER_B,), d, packs=(1,), streams=(0,))


# a pair holds two accumulator sets: its warp tile at most 32 x 32 (64 floats a thread)
PAIR_WARP_ELEMS = 32 * 32


def gpu_params(k: KernelParams | None, pair: bool) -> KernelParams:
    """The parameters the GPU kernel runs with: ``k`` (the space's default where a hand-written
    candidate has none) fitted to the GPU's ranges (a CPU plan's blocks shrink to them), a
    pair's warp tile narrowed to :data:`PAIR_WARP_ELEMS`."""
    p = k if k is not None else gpu_options().default
    fit = lambda v, unit, top: max(unit, min(v, top) // unit * unit)
    mr, nr = (fit(v, 16, max(GPU_BLOCKS)) for v in (p.mr, p.nr))
    if pair:
        while mr * nr > PAIR_WARP_ELEMS:
            mr, nr = (mr // 2, nr) if mr >= nr else (mr, nr // 2)
    mc, nc = fit(p.mc, mr, max(GPU_BLOCKS)), fit(p.nc, nr, max(GPU_BLOCKS))
    while (mc // mr) * (nc // nr) > GPU_MAX_WARPS:
        mc, nc = (fit(mc // 2, mr, mc), nc) if mc // mr >= nc // nr else (mc, fit(nc // 2, nr, nc))
    kc = fit(p.kc, 8, max(GPU_KC))
    return KernelParams(mr, nr, mc, kc, nc, vec_bytes=p.vec_bytes)


def question_options(o: KernelOptions) -> dict[str, list]:
    """The choices of :func:`chosen_params`'s questions, by name, in the order it asks them
    (``tile``: an index into ``o.tiles``)."""
    return {"tile": list(range(len(o.tiles))), "mc": list(o.mc), "kc": list(o.kc),
            "nc": list(o.nc), "pack_a": list(o.packs), "pack_b": list(o.packs),
            "split": list(o.splits), "outer": list(o.outers), "stream": list(o.streams)}


def chosen_params(o: KernelOptions, choose, itemsize: int) -> KernelParams:
    """The legal configuration ``choose(name, choices)`` picks among ``o`` (question by
    question, :func:`question_options`), at ``o``'s default vector width."""
    ask = {name: choose(name, vals) for name, vals in question_options(o).items()}
    mr, nr = o.tiles[int(ask["tile"])]
    p = KernelParams(mr, nr, int(ask["mc"]), int(ask["kc"]), int(ask["nc"]),
                     bool(ask["pack_a"]), bool(ask["pack_b"]), str(ask["split"]),
                     o.default.vec_bytes, str(ask["outer"]), bool(ask["stream"]))
    return legalize(p, itemsize)


def pair_params(p: KernelParams, depth: int, itemsize: int) -> KernelParams:
    """The parameters a pair (search_spaces.kernel_fusion) runs with: its whole contraction
    depth ``depth`` in one K slice (no partial sum of two contractions is ever stored), an
    even register tile, whose halves hold the two, and both operands packed.  Why packed: the
    interleaved operand is read in place otherwise, a line per K step of each micro-panel; at
    trimul N=702 (channel-first a, so the interleaved weights are the kernel's A) the same
    pair ran 0.498 s unpacked against 0.345 s packed (the group alone, one process, 9
    interleaved rounds, medians), where the calibrated unpacked_a factor, fitted on row-major
    products, says 1.0."""
    mr = max(2, p.mr - p.mr % 2)
    return legalize(replace(p, mr=mr, kc=max(p.kc, depth), pack_a=True, pack_b=True), itemsize)


def legalize(p: KernelParams, itemsize: int) -> KernelParams:
    """``p`` with its blocks rounded to its register tile (mc a multiple of mr, nc of nr) and nr
    a multiple of the vector's lanes: any combination of answers yields a kernel that runs."""
    lanes = max(1, p.vec_bytes // itemsize)
    nr = max(lanes, p.nr // lanes * lanes)
    mr = max(1, p.mr)
    return KernelParams(mr, nr, max(mr, p.mc // mr * mr), max(1, p.kc),
                        max(nr, p.nc // nr * nr), p.pack_a, p.pack_b,
                        p.split if p.split in SPLITS else SPLIT_M, p.vec_bytes,
                        p.outer if p.outer in OUTERS else OUTER_B, p.stream)
