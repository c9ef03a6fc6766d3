"""The CPU backend kind: generated C + OpenMP loop groups and NumPy/BLAS GEMMs on this host.

Everything here imports the executor (which compiles with the C compiler and sets OpenMP's wait
policy) only when a plan is built or emitted.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from costmodel.devices import DeviceSpec
from search_spaces.candidate import IMPL_KERNEL, Candidate
from search_spaces.space import TileBounds
from search_spaces.workload import Workload

from autotune.backends.base import (Arrays, BufferPool, EmittedSources, MeasureSettings, Plan)
from autotune.backends.worker import WorkerBackend
from autotune.environment import Environment


def host_memory_available() -> int | None:
    """Bytes of RAM a new allocation can get now: MemAvailable from /proc/meminfo (free plus
    reclaimable cache), else the physical memory size; None when neither is known."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


@dataclass(frozen=True)
class CpuBackendKind:
    """The ``cpu`` backend (a :class:`autotune.backends.base.BackendKind`)."""
    name: str = "cpu"
    units: str = "cores"
    # a built-in at full size runs for seconds, and compiles C first
    min_timeout_s: float = 30.0

    @property
    def tile_bounds(self) -> TileBounds:
        """Loop tiles up to 256, this machine's bounds for the generated contraction kernel
        (so the space offers the ``kernel`` impl), and stacked sibling GEMMs."""
        from autotune.backends.cpu.machine import machine_bounds
        return TileBounds(1, 256, machine_bounds(), stacks=True)

    def device_spec(self, env: Environment) -> DeviceSpec:
        """The calibrated spec of this machine (``autotune calibrate``), else the defaults
        with a CalibrationWarning."""
        from autotune.backends.cpu.calibrate import load_cpu_spec
        return load_cpu_spec()

    def calibrated(self) -> bool:
        from autotune.backends.cpu.calibrate import cpu_spec_status
        return cpu_spec_status()[1]

    def memory_probe(self) -> Callable[[], int | None]:
        return host_memory_available

    def memory_threads(self, dev: DeviceSpec) -> int:
        return dev.parallel_units          # each OpenMP thread holds its own tile buffers

    def make_plan(self, w: Workload, cand: Candidate, cache_dir: Path,
                  pool: BufferPool | None = None) -> Plan:
        from autotune.backends.cpu.executor import CompiledPlan
        return CompiledPlan(w, cand, cache_dir, pool)

    def resident(self, plan: Plan, inputs: Mapping[str, np.ndarray]
                 ) -> tuple[Callable[[], Any], Callable[[Any], Arrays]]:
        # host memory is where the plan runs: nothing to place, nothing to bring back
        return (lambda: plan(**inputs)), (lambda outs: {k: np.asarray(v) for k, v in outs.items()})

    def emit(self, w: Workload, cand: Candidate) -> EmittedSources:
        """``plan.c``: every loop group of the plan; the notes say how to compile it and which
        groups are library GEMMs instead."""
        from autotune.backends.cpu.codegen import generate
        from autotune.backends.cpu.compiler import CFLAGS, KERNEL_OPT, flags_at
        from autotune.backends.cpu.gemm_call import kernel_spec
        from autotune.backends.cpu.gemm_driver import ENTRY, kernel_source
        from search_spaces.kernel_fusion import kernel_parts
        from search_spaces.rewrite import rewritten
        w = rewritten(w, cand)             # the candidate's contraction orders applied
        src, kernels = generate(w, cand)
        files = {"plan.c": src}
        notes = [f"compile by hand: cc {' '.join(CFLAGS)} plan.c -o plan.so -lm", ""]
        if any(s.impl == IMPL_KERNEL for s in cand.schedules):
            notes.insert(1, f"and each kernel_*.c: cc {' '.join(flags_at(KERNEL_OPT))} "
                            f"kernel_ANCHOR.c -o kernel_ANCHOR.so -lm")
        loop = {k.anchor for k in kernels}
        for k in kernels:
            notes.append(f"plan.c: {k.name}(void **args)  anchor {k.anchor}  "
                         f"args ({', '.join(k.args)})")
        for s in cand.schedules:
            if s.impl == IMPL_KERNEL:
                files[f"kernel_{s.anchor}.c"] = kernel_source(kernel_spec(w, cand, s.anchor))
                parts = kernel_parts(w, cand.fused_pairs, s.anchor)
                named = (("prologue A", parts.prologue_a and parts.prologue_a.producer),
                         ("prologue B", parts.prologue_b and parts.prologue_b.producer),
                         ("paired with", parts.pair),
                         ("epilogue", parts.epilogue and parts.epilogue.consumer))
                fusions = "".join(f"  {what} {w.op(op).text()}" for what, op in named if op)
                notes.append(f"kernel_{s.anchor}.c: {ENTRY}(A, B, C, dims, alpha, extra)  "
                             f"generated GEMM kernel  {w.op(parts.contraction).text()}{fusions}")
            elif s.anchor not in loop:
                notes.append(f"{s.anchor}: library GEMM (NumPy matmul / BLAS)  "
                             f"{w.op(s.anchor).text()}")
        return EmittedSources(files, tuple(notes))

    def backend(self, w: Workload, seed: int, cache_dir: Path,
                settings: MeasureSettings = MeasureSettings()) -> WorkerBackend:
        return WorkerBackend(self, w, seed, cache_dir, settings)
