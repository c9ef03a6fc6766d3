"""Device descriptions the cost model predicts for.  Pure data: no I/O here.

GPU figures are datasheet numbers (dense, no sparsity); the ``*_eff`` fractions say how much of
them generated code and library GEMMs reach in practice.  The ``cpu`` preset holds figures
measured on the development machine, which ``autotune calibrate`` replaces with those of the
machine itself.  The per-term sections (GEMM shape classes, access patterns, function costs)
default to the neutral values under which the model predicts exactly as it did before they
existed: the GPU presets keep them (nothing there is calibrated yet).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace

TRANSCENDENTALS = ("exp", "log", "sqrt", "rsqrt", "sigmoid", "tanh")


@dataclass(frozen=True)
class GemmShapes:
    """Library GEMM rate by shape class, as factors on ``gemm_flops`` times the shape law
    (``costmodel.rates.gemm_rate``: where each class is measured and how it is interpolated).
    1.0: the shape law alone."""
    skinny_k: float = 1.0       # K <= 128 with large M*N (the trimul projections)
    skinny_mn: float = 1.0      # min(M, N) <= 32 with the other dims large (tall-skinny)
    batched_small: float = 1.0  # a batch of small matrices in one call
    batched: float = 1.0        # any batch of matrices in one strided-batched call (GPUs)


@dataclass(frozen=True)
class AccessCosts:
    """Cost of an access pattern in DRAM bytes moved (at ``bandwidth``) per useful byte, when
    every element sits in a cache line of its own.  16 (a 64-byte line per float32) is the
    line-granularity model, which the presets keep; calibration measures generated C loops."""
    strided_read: float = 16.0    # a read walking with a large stride
    strided_write: float = 16.0   # a write walking with a large stride (its line is read too)
    transpose_copy: float = 16.0  # a whole transposing copy (NumPy's layout copies for BLAS),
                                  # per byte read and written, against a streaming copy
    far_regions: float = 1.0      # a read's time when each tile reads rows from more regions
                                  # (pages apart) than the prefetchers follow, against one region


@dataclass(frozen=True)
class FunctionCosts:
    """Flop-equivalents of one evaluation of each transcendental, at the loop rate; None: the
    device's single ``transcendental_flops`` weight."""
    exp: float | None = None
    log: float | None = None
    sqrt: float | None = None
    rsqrt: float | None = None
    sigmoid: float | None = None
    tanh: float | None = None

    def weight(self, fn: str, default: float) -> float:
        v = getattr(self, fn, None)
        return default if v is None else v


@dataclass(frozen=True)
class KernelCosts:
    """How the generated contraction kernel's parameters move its time beyond what its roofline
    sees (``costmodel.kernel_cost``): factors on the kernel's time for each choice (1.0: no
    effect), and the cost of one barrier between its threads.  ``autotune calibrate`` fits them
    on this machine over random legal configurations at three shape classes
    (``autotune/backends/cpu/kernel_probe.py``)."""
    stream_cached: float = 1.0   # streaming stores of a C that fits in the last-level cache
    unpacked_a: float = 1.0      # A read in place (pack_a off), rows longer than SHORT_ROW_BYTES
    unpacked_a_short: float = 1.0    # A read in place, rows of at most SHORT_ROW_BYTES
    unpacked_b: float = 1.0      # B read in place (pack_b off)
    short_tile: float = 1.0      # a register tile of at most 4 rows
    one_vector: float = 1.0      # a register tile one vector wide
    outer_a: float = 1.0         # the A-panel-outer loop order
    # the A-panel-outer order once its KC x NC block of B outgrows half the core's L2
    # (tile_cache_bytes): raised to the block's excess over that half, in L2s
    # (costmodel.kernel_cost.b_block_excess)
    outer_a_spill: float = 1.0
    # split "n": threads take whole chunks of C's columns, sharing no packed B and meeting at
    # no barrier (search_spaces.kernel.column_chunk)
    split_n: float = 1.0
    barrier_s: float = 0.0       # one barrier of the threads sharing a batch item (split "m")
    # the share of its traffic's time (bytes / bandwidth) a product whose operands all fit in
    # the last-level cache still pays: its reads come from the cache, not DRAM
    cached_traffic: float = 1.0


@dataclass(frozen=True)
class DeviceSpec:
    """Rates and sizes of one device (flop/s, bytes/s, bytes, seconds)."""
    name: str
    kind: str                  # "cpu" | "cuda"
    f32_flops: float           # peak FMA throughput, f32
    tf32_flops: float          # tensor-core peak (0 if none)
    bf16_flops: float
    gemm_flops: float          # what a library f32 GEMM reaches on large shapes
    loop_flops: float          # what generated loop nests reach (vectorised, all cores)
    bandwidth: float           # DRAM / HBM copy bandwidth
    cache_bytes: float         # last-level cache (L2 on GPUs)
    launch_s: float            # fixed cost per group (kernel launch / parallel-region start)
    parallel_units: int        # cores or SMs: fewer tiles than this leaves the device idle
    transcendental_flops: float = 8.0   # flop-equivalents of one exp/log/rsqrt/sigmoid/tanh
    vector_width: int = 1      # SIMD lanes a generated loop needs to reach loop_flops (CPU)
    tile_overhead_s: float = 0.0   # per tile dealt one at a time: the dealing and its set-up
    tile_setup_s: float = 0.0      # per tile and member: its bounds and loop set-up alone
    tile_cache_bytes: float = 512e3  # private cache one tile works in (L2 per core; smem per SM)
    # CPU loop groups: an OpenMP parallel region's start, and waking each thread beyond the first
    region_s: float = 0.0
    thread_start_s: float = 0.0
    library_call_s: float = 0.0    # host-side set-up of a library GEMM call beyond launch_s
    # host-side set-up of a generated-kernel group's call beyond a loop group's (its operands'
    # views, the argument arrays, the epilogue's arrays)
    kernel_call_s: float = 0.0
    gemm_shapes: GemmShapes = GemmShapes()
    access: AccessCosts = AccessCosts()
    functions: FunctionCosts = FunctionCosts()
    kernel_flops: float = 0.0  # the generated contraction kernel on large shapes (0: gemm_flops)
    kernel: KernelCosts = KernelCosts()
    # a library TF32 GEMM on tensor cores: the share of ``tf32_flops`` it reaches on large
    # shapes, and its shape classes (costmodel.rates.precision_rate)
    tensor_share: float = 0.65
    tensor_shapes: GemmShapes = GemmShapes()
    # the CUDA backend's generated tensor-core kernel (costmodel.mma_cost): its share of the
    # library's tensor-core rate (tf32_flops * tensor_share).  0.35 is an estimate until
    # `autotune calibrate --device cuda` measures it on the device
    mma_share: float = 0.35

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "DeviceSpec":
        nested = {"gemm_shapes": GemmShapes, "access": AccessCosts, "functions": FunctionCosts,
                  "kernel": KernelCosts, "tensor_shapes": GemmShapes}
        return DeviceSpec(**{k: nested[k](**v) if k in nested and isinstance(v, dict) else v
                             for k, v in d.items()})


A100 = DeviceSpec("a100", "cuda", f32_flops=19.5e12, tf32_flops=156e12, bf16_flops=312e12,
                  gemm_flops=0.9 * 19.5e12, loop_flops=0.5 * 19.5e12, bandwidth=0.85 * 2.039e12,
                  cache_bytes=40e6, launch_s=5e-6, parallel_units=108 * 4,
                  transcendental_flops=4.0)
# The Hopper GEMM classes are cuBLAS 13 on an H200 (bench/results/h200-dda7f13, CUDA events,
# medians of 7; gpu_gemm_shapes.json), taken for the H100 too (the same SMs and clocks):
# SGEMM reached 50.9 TFLOP/s at 8192^3, 35.6 at a K=128 projection (492,804 x 128 x 128:
# skinny_k = 35.6 / 53.5) and 44 at the triangle einsum's batch of 128 x 702^3 (0.88 of what
# the K ramp leaves at K=702); TF32 on tensor cores 300 TFLOP/s at gated_mlp's 4096 x 1024 x
# 4096 (0.6 of the peak: tensor_share, the sizes searches meet; 8192^3 reached 414), 103 at
# the K=128 projection (0.34 of that) and 95 at the batched einsum (0.39 of what the K ramp
# leaves): three TF32 products there cost more than one SGEMM.
HOPPER_SIMT = GemmShapes(skinny_k=0.665, batched=0.88)
HOPPER_TENSOR = GemmShapes(skinny_k=0.34, batched=0.39)
H100 = DeviceSpec("h100", "cuda", f32_flops=66.9e12, tf32_flops=494.7e12, bf16_flops=989.4e12,
                  gemm_flops=0.8 * 66.9e12, loop_flops=0.4 * 66.9e12, bandwidth=0.85 * 3.35e12,
                  cache_bytes=50e6, launch_s=5e-6, parallel_units=132 * 4,
                  transcendental_flops=4.0, gemm_shapes=HOPPER_SIMT, tensor_share=0.6,
                  tensor_shapes=HOPPER_TENSOR)
H200 = replace(H100, name="h200", bandwidth=0.85 * 4.8e12)
# Measured on the 2-core AMD EPYC development machine with NumPy's OpenBLAS; `autotune
# calibrate --device cpu` measures the machine at hand and overrides these.  The per-term
# figures (launch_s, region_s onwards) are `autotune calibrate` on that machine: typical values
# over 25 runs (docs/costmodel.md, section 7, gives them and how each was chosen).
CPU_DEFAULT = DeviceSpec("cpu", "cpu", f32_flops=157e9, tf32_flops=0.0, bf16_flops=0.0,
                         gemm_flops=90e9, loop_flops=20e9, bandwidth=10e9, cache_bytes=32e6,
                         launch_s=4.7e-6, parallel_units=2, transcendental_flops=10.0,
                         # tile_overhead_s: the calibration's tile probe there, 10.3 ns
                         # (the 0.2 us before it over-priced one-element tiles ~10x)
                         # tile_setup_s: the floor the calibration puts under it, a few
                         # dozen instructions (the rest is the dealing, paid per chunk)
                         vector_width=8, tile_overhead_s=10e-9, tile_setup_s=5e-9,
                         region_s=0.49e-6, thread_start_s=6.7e-6, library_call_s=40e-6,
                         # `autotune calibrate` there since a kernel group keeps its C
                         # arguments between calls (ed517a9): a 2 x 2 kernel group's call
                         # 4.9 us, a loop group's 3.3 us (before: 19.5 / 4.0 us)
                         kernel_call_s=1.6e-6,
                         gemm_shapes=GemmShapes(skinny_k=0.6, skinny_mn=1.9, batched_small=1.1),
                         # far_regions: the calibration's probe there, 21 GB/s from one
                         # region, 11 from 128 (costmodel.rates.regions_waste)
                         access=AccessCosts(strided_read=38.0, strided_write=27.0,
                                            transpose_copy=14.0, far_regions=1.9),
                         functions=FunctionCosts(exp=5.0, log=5.0, sqrt=2.4, rsqrt=4.4,
                                                 # tanh: float32's inlined rational
                                                 # function (autotune.backends.cpu.
                                                 # fast_tanh), 1.03x exp on one AVX2 core
                                                 sigmoid=6.4, tanh=5.2),
                         # `autotune calibrate` of 2026-11-30 on the development machine: 75
                         # random configurations at three shapes, log error 0.35 -> 0.21
                         kernel=KernelCosts(stream_cached=1.57, short_tile=1.25, one_vector=1.11,
                                            outer_a=0.90, barrier_s=16e-6))

PRESETS = {d.name: d for d in (A100, H100, H200, CPU_DEFAULT)}


def preset(name: str) -> DeviceSpec:
    """A device preset by name; ValueError naming the choices otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown device {name!r} (choices: {', '.join(PRESETS)})") from None
