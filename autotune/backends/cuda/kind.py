"""The CUDA backend kind: generated kernels through NVRTC and cuBLAS GEMMs, by CuPy, on GPU 0.

CuPy is imported only when a plan is built or the device's memory is read, so the kind can be
looked up (and its sources emitted) on a machine without a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from costmodel.devices import DeviceSpec, preset
from search_spaces.candidate import Candidate
from search_spaces.kernel import KernelBounds
from search_spaces.space import TileBounds
from search_spaces.workload import Workload

from autotune.backends.base import (Arrays, BufferPool, EmittedSources, MeasureSettings, Plan)
from autotune.backends.worker import WorkerBackend
from autotune.environment import Environment


def device_memory_available() -> int | None:
    """Free memory of GPU 0 (cudaMemGetInfo through CuPy); None when it cannot be read."""
    try:
        import cupy
        return int(cupy.cuda.runtime.memGetInfo()[0])
    except Exception:
        return None


@dataclass(frozen=True)
class CudaBackendKind:
    """The ``cuda`` backend (a :class:`autotune.backends.base.BackendKind`)."""
    name: str = "cuda"
    # library contractions in float32 (SIMT), float32-accurate split TF32 on tensor cores, or
    # plain TF32 where the tolerance admits it (search_spaces.precision); the generated
    # tensor-core contraction kernel with its fusions (autotune.backends.cuda.mma_kernel);
    # sibling contractions stacked into one cuBLAS GEMM (autotune.backends.cuda.stacked)
    tile_bounds: TileBounds = TileBounds(1, 1024, kernel=KernelBounds(gpu=True),
                                         precisions=("fp32", "3xtf32", "tf32"), stacks=True)
    units: str = "SMs"
    # plans run for milliseconds; NVRTC compiles in about a second
    min_timeout_s: float = 5.0

    def device_spec(self, env: Environment) -> DeviceSpec:
        """The datasheet preset the GPU's name matches (an H100's when none does), with the
        terms ``autotune calibrate --device cuda`` measured on this GPU, where it has."""
        from autotune.backends.cuda.calibrate import load_cuda_spec
        return load_cuda_spec(self.preset_for(env.name), env.name)[0]

    @staticmethod
    def preset_for(gpu_name: str) -> DeviceSpec:
        """The datasheet preset a GPU's name matches (an H100's when none does)."""
        name = gpu_name.lower()
        for key in ("h200", "h100", "a100"):
            if key in name:
                return preset(key)
        return preset("h100")

    def calibrated(self) -> bool | None:
        """Whether this machine's GPU has a calibration record (None: no GPU here)."""
        from autotune.backends.cuda.calibrate import load_cuda_spec
        from autotune.environment import NoGPUError, detect_cuda
        try:
            name = detect_cuda().name
        except NoGPUError:
            return None
        return load_cuda_spec(self.preset_for(name), name)[1]

    def memory_probe(self) -> Callable[[], int | None]:
        # read once, before the measuring worker starts: later its memory pool holds on to
        # freed blocks, which would look like memory in use
        free = device_memory_available()
        return lambda: free

    def memory_threads(self, dev: DeviceSpec) -> int:
        return 0                          # tiles live in shared memory, not in the device's

    def make_plan(self, w: Workload, cand: Candidate, cache_dir: Path,
                  pool: BufferPool | None = None) -> Plan:
        # buffers live on the device: a host pool has nothing to give
        from autotune.backends.cuda.executor import CudaPlan
        return CudaPlan(w, cand, cache_dir)

    def resident(self, plan: Plan, inputs: Mapping[str, np.ndarray]
                 ) -> tuple[Callable[[], Any], Callable[[Any], Arrays]]:
        dev = plan.upload(inputs)         # once: host transfers would swamp the kernels
        plan.run_device(**dev)            # eager: kernels loaded, GEMMs planned; from the
        plan.rt.synchronize()             # runner's first call on, one graph replayed

        def run():
            outs = plan.run_device(**dev)
            plan.rt.synchronize()
            return outs
        return run, lambda outs: {k: plan.rt.to_host(v) for k, v in outs.items()}

    def emit(self, w: Workload, cand: Candidate) -> EmittedSources:
        """One ``.cu`` per generated kernel (the shared prelude and the kernel: a complete
        translation unit); the notes give each kernel's launch and shared memory, and each
        library GEMM's sizes."""
        from costmodel.cuda_limits import DEFAULT_SHARED_BYTES, SHARED_OPTIN_BY_ARCH
        from search_spaces.gemm import gemm_form
        from search_spaces.partition import groups
        from search_spaces.rewrite import rewritten

        from autotune.backends.cuda.codegen import generate_cuda, kernel_source
        from autotune.backends.cuda.executor import precision_of
        w = rewritten(w, cand)             # the candidate's contraction orders applied
        src, kernels = generate_cuda(w, cand)
        by_anchor = {k.anchor: k for k in kernels}
        files: dict[str, str] = {}
        notes = [f"library GEMMs: cuBLAS gemmStridedBatchedEx, by default in {precision_of(w)}",
                 "compile one kernel by hand: nvcc -std=c++17 -arch=sm_90 -c FILE.cu", ""]
        for g in groups(w, cand.fused_pairs):
            k = by_anchor.get(g.anchor)
            if k is None:
                op = w.op(g.anchor)
                f = gemm_form(op)
                size = lambda idx: "x".join(str(op.extent(i)) for i in idx) or "1"
                prec = cand.schedule(g.anchor).precision or precision_of(w)
                notes.append(f"{g.anchor}: library GEMM (cuBLAS, {prec})  {op.text()}  "
                             f"batch {size(f.batch)} m {size(f.m)} n {size(f.n)} k {size(f.k)}")
                continue
            files[f"{k.name}.cu"] = kernel_source(src, k)
            limits = []
            if k.needs_opt_in:
                limits.append(f"needs the >{DEFAULT_SHARED_BYTES // 1024} KB opt-in")
            limits += [f"over the {lim // 1024} KB of {arch}"
                       for arch, lim in SHARED_OPTIN_BY_ARCH.items()
                       if arch in ("sm_80", "sm_90") and k.smem_bytes > lim]
            notes.append(f"{k.name}.cu: anchor {k.anchor}  members {', '.join(k.members)}  "
                         f"tiles {tuple(k.tiles)}  grid {k.grid}  block {k.block}  "
                         f"smem {k.smem_bytes} B  args ({', '.join(k.args)})"
                         + (f"  [{'; '.join(limits)}]" if limits else ""))
        return EmittedSources(files, tuple(notes))

    def backend(self, w: Workload, seed: int, cache_dir: Path,
                settings: MeasureSettings = MeasureSettings()) -> WorkerBackend:
        return WorkerBackend(self, w, seed, cache_dir, settings)
