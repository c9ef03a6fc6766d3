"""Backends by CLI name: ``cpu`` (generated C + OpenMP, BLAS via NumPy) and ``cuda`` (CuPy)."""
from __future__ import annotations

from pathlib import Path

from costmodel.devices import DeviceSpec, preset
from search_spaces.candidate import Candidate
from search_spaces.space import TileBounds
from search_spaces.workload import Workload

from autotune.environment import Environment, detect
from autotune.backends.base import Measurement, MeasureSettings
from autotune.backends.worker import WorkerHandle, WorkerSpec

BACKENDS = ("cpu", "cuda")


class WorkerBackend:
    """A backend whose candidates run in an isolated worker process."""

    def __init__(self, name: str, w: Workload, seed: int, cache_dir: Path, make_plan: str,
                 settings: MeasureSettings = MeasureSettings()):
        self.name = name
        self.settings = settings
        source = w.source.removeprefix("builtin:")
        spec = WorkerSpec(source, w.dims, seed, str(cache_dir), name)
        self.worker = WorkerHandle(spec, make_plan)

    def measure(self, cand: Candidate, timeout_s: float, best_s: float | None) -> Measurement:
        return self.worker.measure(cand, self.settings, timeout_s, best_s)

    def reclaimable_bytes(self) -> int:
        """Memory the worker holds for the next candidate (its buffer pool): free for it."""
        return self.worker.pooled_bytes

    def close(self) -> None:
        self.worker.close()


def tile_bounds(kind: str) -> TileBounds:
    """Tile sizes each backend accepts."""
    return TileBounds(1, 256) if kind == "cpu" else TileBounds(1, 1024)


def device_spec(env: Environment) -> DeviceSpec:
    """The cost model's view of the device a backend runs on."""
    if env.kind == "cpu":
        from autotune.backends.cpu.calibrate import load_cpu_spec
        return load_cpu_spec()
    name = env.name.lower()
    for key in ("h200", "h100", "a100"):
        if key in name:
            return preset(key)
    return preset("h100")


def resolve(device: str) -> Environment:
    """``cpu`` | ``cuda`` | ``auto`` -> the detected environment (NoGPUError for a missing GPU)."""
    return detect(device)


def make_backend(env: Environment, w: Workload, seed: int, cache_dir: Path,
                 settings: MeasureSettings = MeasureSettings()) -> WorkerBackend:
    """The backend for a detected environment."""
    if env.kind == "cpu":
        return WorkerBackend("cpu", w, seed, cache_dir, "autotune.backends.cpu.executor:CompiledPlan", settings)
    return WorkerBackend("cuda", w, seed, cache_dir, "autotune.backends.cuda.executor:CudaPlan", settings)
