"""Where a plan runs: the device and the library versions that make a timing meaningful.

A measured plan is only worth reusing on the same device with the same software, so
everything here ends up in the plan key (see ``db.keys.PlanKey``).  Detection is cheap
and has no side effects; CuPy is imported only inside :func:`detect_cuda` so that CPU
machines never need it.
"""
from __future__ import annotations

import functools
import platform
import subprocess
from dataclasses import dataclass, field
from importlib import metadata

from autotune.threads import cores

DEVICES = ("cpu", "cuda", "auto")


class NoGPUError(Exception):
    """``--device cuda`` was asked for but no usable NVIDIA GPU (or no CuPy) is here."""


@dataclass(frozen=True)
class Environment:
    """The device a plan is tuned for plus the versions of everything that shapes its speed.

    ``libraries`` is a sorted tuple of ``(name, version)`` pairs so that the dataclass
    stays hashable and its JSON form is deterministic.
    """

    kind: str                       # "cpu" | "cuda"
    name: str                       # CPU model name or GPU name
    compute_capability: str = ""    # "9.0" on an H100/H200; "" on CPU
    driver: str = ""                # NVIDIA driver version; "" on CPU
    cuda_runtime: str = ""          # e.g. "12.4"; "" on CPU
    cores: int = 1                  # usable CPU cores, or streaming multiprocessors
    libraries: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    def device_dict(self) -> dict[str, str]:
        """The device part of the plan key (cores excluded: the model name pins the chip)."""
        return {"kind": self.kind, "name": self.name,
                "compute_capability": self.compute_capability,
                "driver": self.driver, "cuda_runtime": self.cuda_runtime}

    def library_dict(self) -> dict[str, str]:
        """Library name -> version, the library part of the plan key."""
        return dict(self.libraries)

    def to_dict(self) -> dict:
        """A JSON-serialisable dict; :meth:`from_dict` inverts it."""
        return {**self.device_dict(), "cores": self.cores,
                "libraries": [list(p) for p in self.libraries]}

    @classmethod
    def from_dict(cls, d: dict) -> "Environment":
        libs = d.get("libraries", ())
        if isinstance(libs, dict):
            libs = libs.items()
        return cls(kind=str(d["kind"]), name=str(d["name"]),
                   compute_capability=str(d.get("compute_capability", "")),
                   driver=str(d.get("driver", "")),
                   cuda_runtime=str(d.get("cuda_runtime", "")),
                   cores=int(d.get("cores", 1)),
                   libraries=tuple(sorted((str(k), str(v)) for k, v in libs)))


@functools.lru_cache(maxsize=1)
def compiler_version() -> str:
    """First line of ``cc --version``; "" when there is no compiler (cached: it forks)."""
    try:
        out = subprocess.run(["cc", "--version"], capture_output=True, text=True,
                             timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.splitlines()[0].strip() if out.strip() else ""


def dist_version(dist: str) -> str | None:
    """The installed version of a distribution, None when it is not installed."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _libraries(extra: dict[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    # Imported here, not at module level: autotune/__init__ may import this module.
    from autotune.code_version import LIBRARY, code_version
    from autotune.version import __version__
    libs = {"autotune": __version__, LIBRARY: code_version(),
            "numpy": dist_version("numpy") or "",
            "optuna": dist_version("optuna") or "", "python": platform.python_version(),
            "cc": compiler_version(), **(extra or {})}
    return tuple(sorted(libs.items()))


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    # Not Linux, or an ARM kernel without "model name": fall back to what Python knows.
    return platform.processor() or platform.machine() or "unknown-cpu"


def detect_cpu() -> Environment:
    """The CPU this process runs on."""
    return Environment(kind="cpu", name=_cpu_model(), cores=cores(),
                       libraries=_libraries())


def _nvidia_driver() -> str:
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            for tok in f.readline().split():
                if tok[:1].isdigit() and "." in tok:
                    return tok
    except OSError:
        pass
    return ""


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def detect_cuda() -> Environment:
    """GPU 0 as seen by CuPy; raises :class:`NoGPUError` when CuPy or a GPU is missing."""
    msg = "--device cuda: no NVIDIA GPU usable here ({}); use --device cpu"
    try:
        import cupy  # noqa: PLC0415 -- optional dependency, only on GPU machines
    except Exception as e:  # ImportError, or a broken CUDA install failing at import
        raise NoGPUError(msg.format(f"CuPy not installed: {type(e).__name__}")) from None
    try:
        rt = cupy.cuda.runtime
        if rt.getDeviceCount() < 1:
            raise NoGPUError(msg.format("CuPy found no device"))
        props = rt.getDeviceProperties(0)
        name = props["name"]
        name = name.decode() if isinstance(name, bytes) else str(name)
        driver = _nvidia_driver() or f"cuda-driver-api {_cuda_version(rt.driverGetVersion())}"
        return Environment(
            kind="cuda", name=name,
            compute_capability=f"{props['major']}.{props['minor']}",
            driver=driver, cuda_runtime=_cuda_version(rt.runtimeGetVersion()),
            cores=int(props.get("multiProcessorCount", 1)),
            libraries=_libraries({"cupy": cupy.__version__}))
    except NoGPUError:
        raise
    except Exception as e:  # CUDARuntimeError: no driver, no device, busy device ...
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise NoGPUError(msg.format(f"CuPy installed but no device found: {first}")) from None


def detect(device: str = "auto") -> Environment:
    """``"cpu"``, ``"cuda"`` or ``"auto"`` (the GPU when one is usable, else the CPU)."""
    if device == "cpu":
        return detect_cpu()
    if device == "cuda":
        return detect_cuda()
    if device == "auto":
        try:
            return detect_cuda()
        except NoGPUError:
            return detect_cpu()
    raise ValueError(f"unknown device {device!r}: expected one of {', '.join(DEVICES)}")
