"""Device descriptions the cost model predicts for.  Pure data: no I/O here.

GPU figures are datasheet numbers (dense, no sparsity); the ``*_eff`` fractions say how much of
them generated code and library GEMMs reach in practice.  The ``cpu`` preset is a placeholder
that ``autotune calibrate`` replaces with rates measured on the machine itself.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace


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
    tile_overhead_s: float = 0.0   # per tile and member: scheduling and loop set-up
    tile_cache_bytes: float = 512e3  # private cache one tile works in (L2 per core; smem per SM)

    def to_dict(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "DeviceSpec":
        return DeviceSpec(**d)


A100 = DeviceSpec("a100", "cuda", f32_flops=19.5e12, tf32_flops=156e12, bf16_flops=312e12,
                  gemm_flops=0.9 * 19.5e12, loop_flops=0.5 * 19.5e12, bandwidth=0.85 * 2.039e12,
                  cache_bytes=40e6, launch_s=5e-6, parallel_units=108 * 4,
                  transcendental_flops=4.0)
H100 = DeviceSpec("h100", "cuda", f32_flops=66.9e12, tf32_flops=494.7e12, bf16_flops=989.4e12,
                  gemm_flops=0.8 * 66.9e12, loop_flops=0.4 * 66.9e12, bandwidth=0.85 * 3.35e12,
                  cache_bytes=50e6, launch_s=5e-6, parallel_units=132 * 4,
                  transcendental_flops=4.0)
H200 = replace(H100, name="h200", bandwidth=0.85 * 4.8e12)
# Measured on the 2-core AMD EPYC (Zen 3) development machine with NumPy's OpenBLAS; `autotune
# calibrate --device cpu` measures the machine at hand and overrides these.
CPU_DEFAULT = DeviceSpec("cpu", "cpu", f32_flops=157e9, tf32_flops=0.0, bf16_flops=0.0,
                         gemm_flops=90e9, loop_flops=20e9, bandwidth=10e9, cache_bytes=32e6,
                         launch_s=30e-6, parallel_units=2, transcendental_flops=10.0,
                         vector_width=8, tile_overhead_s=0.2e-6)

PRESETS = {d.name: d for d in (A100, H100, H200, CPU_DEFAULT)}


def preset(name: str) -> DeviceSpec:
    """A device preset by name; ValueError naming the choices otherwise."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown device {name!r} (choices: {', '.join(PRESETS)})") from None
