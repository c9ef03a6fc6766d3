"""Calibration of the ``cpu`` device spec: measure this machine instead of guessing it.

``autotune calibrate --device cpu`` measures the library GEMM rate (``np.matmul`` of float32
square matrices), the copy bandwidth (``np.copyto`` of large float32 arrays, bytes read plus
bytes written) and the peak float32 FMA rate (a generated C loop of independent vector FMA
chains on every core: the machine's compute limit, which benchmarks quote floors against), each
the best of a few repeats, and stores them as JSON next to the plan database.  :func:`load_cpu_spec` returns :data:`costmodel.devices.CPU_DEFAULT` with those rates
in place, so the cost model predicts for the machine at hand.
"""
from __future__ import annotations

import json
import math
import os
import platform
import tempfile
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from costmodel.devices import CPU_DEFAULT, DeviceSpec
from db.store import default_db_path

CALIBRATION_VERSION = 1
CALIBRATION_FILE = "calibration-cpu.json"
DEFAULT_GEMM_N = 2048
DEFAULT_COPY_MB = 256
DEFAULT_REPEATS = 3
LOOP_FRACTION = 0.15   # generated loop nests vs. BLAS, when the loop rate is not measured


class CalibrationWarning(UserWarning):
    """A calibration file exists but cannot be used; the default cpu spec applies."""


def default_db_dir() -> Path:
    """Directory of the default plan database ($AUTOTUNE_DB's, else the user cache dir's)."""
    return default_db_path().parent


def calibration_path() -> Path:
    """Where ``autotune calibrate --device cpu`` stores its measurements."""
    return default_db_dir() / CALIBRATION_FILE


def _best_time(fn, repeats: int) -> float:
    fn()   # warm-up: page faults, BLAS thread start-up
    best = math.inf
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return max(best, 1e-9)


def measure_gemm(n: int = DEFAULT_GEMM_N, repeats: int = DEFAULT_REPEATS) -> float:
    """flop/s of ``np.matmul`` on float32 ``n x n`` matrices (2 n^3 flops), best of ``repeats``."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    c = np.empty((n, n), dtype=np.float32)
    t = _best_time(lambda: np.matmul(a, b, out=c), repeats)
    return 2.0 * n ** 3 / t


def measure_copy(mb: float = DEFAULT_COPY_MB, repeats: int = DEFAULT_REPEATS) -> float:
    """bytes/s of ``np.copyto`` between two float32 arrays of ``mb`` MB each, counting the bytes
    read plus the bytes written, best of ``repeats``."""
    n = max(1, int(mb * 1e6) // 4)
    src = np.ones(n, dtype=np.float32)
    dst = np.zeros(n, dtype=np.float32)
    t = _best_time(lambda: np.copyto(dst, src), repeats)
    return 2.0 * n * 4 / t


# Ten independent chains of vector FMAs per thread, each in its own register: enough in flight
# to cover the FMA latency (4-5 cycles) on two FMA ports, and few enough that the chains, m and
# c fit in 16 AVX2 registers without spilling.  Vectors are the widest the compiler targets
# (-march=native).  m < 1 keeps the values finite; the sum keeps the work alive.
_PEAK_SRC = r"""
#include <omp.h>
#if defined(__AVX512F__)
#define LANES 16
#elif defined(__AVX__)
#define LANES 8
#else
#define LANES 4
#endif
typedef float vf __attribute__((vector_size(LANES * 4)));
int autotune_peak_lanes(void) { return LANES; }
double autotune_peak(long iters, int *threads) {
    double total = 0.0;
    int used = 1;
    #pragma omp parallel reduction(+:total)
    {
        vf m, c;
        for (int l = 0; l < LANES; l++) { m[l] = 0.999999f; c[l] = 1e-3f * (l + 1); }
        vf a0 = c, a1 = c * 2, a2 = c * 3, a3 = c * 4, a4 = c * 5;
        vf a5 = c * 6, a6 = c * 7, a7 = c * 8, a8 = c * 9, a9 = c * 10;
        for (long i = 0; i < iters; i++) {
            a0 = a0 * m + c; a1 = a1 * m + c; a2 = a2 * m + c; a3 = a3 * m + c;
            a4 = a4 * m + c; a5 = a5 * m + c; a6 = a6 * m + c; a7 = a7 * m + c;
            a8 = a8 * m + c; a9 = a9 * m + c;
        }
        vf s = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9;
        for (int l = 0; l < LANES; l++) total += s[l];
        #pragma omp single
        used = omp_get_num_threads();
    }
    *threads = used;
    return total;
}
"""
_PEAK_CHAINS = 10


def measure_peak_flops(repeats: int = DEFAULT_REPEATS, iters: int = 50_000_000,
                       cache_dir: Path | None = None) -> float:
    """Peak float32 flop/s of this machine: FMA chains on every core, best of ``repeats``."""
    import ctypes
    from autotune.backends.cpu.executor import compile_source
    lib = ctypes.CDLL(str(compile_source(_PEAK_SRC, cache_dir or default_db_dir() / "kernels")))
    lanes = int(lib.autotune_peak_lanes())
    fn = lib.autotune_peak
    fn.argtypes = [ctypes.c_long, ctypes.POINTER(ctypes.c_int)]
    fn.restype = ctypes.c_double
    threads = ctypes.c_int(1)
    total = 0.0

    def run():
        nonlocal total
        total = fn(iters, ctypes.byref(threads))
    t = _best_time(run, repeats)
    if not math.isfinite(total):
        raise RuntimeError("peak-flops loop produced a non-finite sum")
    return 2.0 * _PEAK_CHAINS * lanes * iters * threads.value / t   # FMA = 2 flops


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _last_level_cache() -> int | None:
    """Bytes of the largest cache Linux reports for cpu0, or None."""
    root = Path("/sys/devices/system/cpu/cpu0/cache")
    best = None
    try:
        for d in root.glob("index*"):
            text = (d / "size").read_text().strip().upper()
            mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:], 1)
            val = int(text.rstrip("KMG")) * mult
            best = val if best is None else max(best, val)
    except (OSError, ValueError):
        return None
    return best


def measure(gemm_n: int = DEFAULT_GEMM_N, copy_mb: float = DEFAULT_COPY_MB,
            repeats: int = DEFAULT_REPEATS) -> dict:
    """Measure this machine; returns the calibration record (not yet stored)."""
    gemm = measure_gemm(gemm_n, repeats)
    bw = measure_copy(copy_mb, repeats)
    try:
        peak = measure_peak_flops(repeats)
    except (OSError, RuntimeError) as e:     # no C compiler, or it failed: the rest still holds
        peak, why = None, f"{type(e).__name__}: {e}"
    rec = {
        "version": CALIBRATION_VERSION,
        "device": "cpu",
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "numpy": np.__version__,
        "gemm_n": int(gemm_n),
        "copy_bytes": int(max(1, int(copy_mb * 1e6) // 4) * 4),
        "repeats": int(repeats),
        "gemm_flops": gemm,
        "bandwidth": bw,
        # not measured: generated loops reach a fraction of BLAS, never less than the default
        "loop_flops": max(CPU_DEFAULT.loop_flops, LOOP_FRACTION * gemm),
        "parallel_units": _cores(),
    }
    if peak is not None:
        rec["f32_flops"] = peak
    else:
        rec["f32_flops_error"] = why[:300]
    llc = _last_level_cache()
    if llc:
        rec["cache_bytes"] = llc
    return rec


def write_calibration(rec: dict, path: Path | None = None) -> Path:
    """Store ``rec`` as JSON at ``path`` (default :func:`calibration_path`), atomically."""
    path = Path(path) if path is not None else calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".calibration-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(rec, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def calibrate_cpu(gemm_n: int = DEFAULT_GEMM_N, copy_mb: float = DEFAULT_COPY_MB,
                  repeats: int = DEFAULT_REPEATS, path: Path | None = None) -> tuple[dict, Path]:
    """Measure and store; returns (record, where it was written)."""
    rec = measure(gemm_n, copy_mb, repeats)
    return rec, write_calibration(rec, path)


# fields of DeviceSpec a calibration record may set, and their types
_FIELDS = {"gemm_flops": float, "bandwidth": float, "loop_flops": float, "f32_flops": float,
           "cache_bytes": float, "parallel_units": int}


def load_cpu_spec(path: Path | None = None) -> DeviceSpec:
    """:data:`CPU_DEFAULT` with the calibrated rates, when a usable calibration file exists.

    A missing file means the defaults; an unreadable or invalid one is a
    :class:`CalibrationWarning` and the defaults.
    """
    path = Path(path) if path is not None else calibration_path()
    if not path.exists():
        return CPU_DEFAULT
    try:
        rec = json.loads(path.read_text())
        if not isinstance(rec, dict):
            raise ValueError("not a JSON object")
        upd = {}
        for key, typ in _FIELDS.items():
            if key not in rec:
                continue
            v = rec[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v <= 0:
                raise ValueError(f"{key} = {v!r} is not a positive number")
            upd[key] = typ(v)
        if "gemm_flops" not in upd or "bandwidth" not in upd:
            raise ValueError("gemm_flops and bandwidth are required")
    except (OSError, UnicodeDecodeError, ValueError) as e:
        warnings.warn(f"{path}: ignoring the cpu calibration ({e}); using the default cpu spec "
                      f"(run `autotune calibrate --device cpu` to redo it)",
                      CalibrationWarning, stacklevel=2)
        return CPU_DEFAULT
    return replace(CPU_DEFAULT, **upd)


def cpu_spec_status(path: Path | None = None) -> tuple[DeviceSpec, bool, tuple[str, ...]]:
    """:func:`load_cpu_spec` with its warnings caught, for callers that report them their own
    way: the spec, whether it is this machine's calibration, and the warnings' texts."""
    path = Path(path) if path is not None else calibration_path()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = load_cpu_spec(path)
    calibrated = path.exists() and not any(issubclass(c.category, CalibrationWarning)
                                           for c in caught)
    return spec, calibrated, tuple(str(c.message) for c in caught)
