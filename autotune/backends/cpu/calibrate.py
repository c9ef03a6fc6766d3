"""Calibration of the ``cpu`` device spec: measure this machine instead of guessing it.

``autotune calibrate --device cpu`` measures every analytic term of the cost model
(:mod:`.calibration_terms`: GEMM rates by shape class, bandwidth by access pattern, the peak FMA
rate, transcendental costs, parallel-region and call overheads) and stores them as versioned JSON
next to the plan database.  :func:`load_cpu_spec` returns :data:`costmodel.devices.CPU_DEFAULT`
with the recorded terms in place, so the cost model predicts for the machine at hand; a term
the record lacks (an older version's file, a probe that failed) keeps its default.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from dataclasses import fields, replace
from pathlib import Path

from costmodel.devices import CPU_DEFAULT, DeviceSpec
from db.store import default_db_path

from autotune.cache_dirs import kernels_dir

# 1: gemm_flops, bandwidth, loop_flops, f32_flops, parallel_units, cache_bytes
# 2: + GEMM shape classes, access patterns, function costs, launch/region/thread/library call
# 3: + the generated kernel's rate and parameter factors (kernel_flops, kernel)
# 4: + the loop groups' per-tile overhead (tile_overhead_s)
# 5: the kernel's rate and factors fitted with its traffic added to its arithmetic
#    (costmodel.kernel_cost.plain_kernel_s), not overlapped
# 6: + a generated-kernel group's call beyond a loop group's (kernel_call_s), and the kernel's
#    rate fitted with it
# 7: the kernel's rate held at the FMA peak (f32_flops) at most, its factors fitted around it
# 8: + a read from more far-apart regions than the prefetchers follow (access.far_regions)
# 9: + the share of its traffic a kernel whose operands fit in the cache pays
#    (kernel.cached_traffic), fitted with the kernel's rate and factors
# 10: the last-level cache's reach measured (the largest working set read faster than
#     memory: autotune.backends.cpu.cache_reach), not the size Linux reports
# 11: the kernel measured with its own barrier and a column block's K slices packed at once
#     (gemm_driver), its short_tile and one_vector factors held at 1 or more
#     (costmodel.kernel_fit.AT_LEAST_ONE): a version 10 fit may price 4-row tiles faster
# 12: A read in place priced by its rows' length (kernel.unpacked_a for rows over 256 bytes,
#     kernel.unpacked_a_short for the rest: costmodel.kernel_factors.SHORT_ROW_BYTES)
# 13: + the core's L2 (tile_cache_bytes, from Linux) and the A-panel-outer order's price once
#     its B block outgrows half of it (kernel.outer_a_spill), a wide shape among the kernel's
#     probes (kernel_probe.KERNEL_SHAPES) to fit it
# 14: + split "n" among the kernel's configurations and its factor (kernel.split_n)
CALIBRATION_VERSION = 14
CALIBRATION_FILE = "calibration-cpu.json"
DEFAULT_GEMM_N = 2048
DEFAULT_COPY_MB = 256
DEFAULT_REPEATS = 3


class CalibrationWarning(UserWarning):
    """A calibration file exists but cannot be used; the default cpu spec applies."""


class StaleCalibrationWarning(CalibrationWarning):
    """A calibration file from an older version: its terms apply, the ones it lacks default."""


def default_db_dir() -> Path:
    """Directory of the default plan database ($AUTOTUNE_DB's, else the user cache dir's)."""
    return default_db_path().parent


def calibration_path() -> Path:
    """Where ``autotune calibrate --device cpu`` stores its measurements."""
    return default_db_dir() / CALIBRATION_FILE


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
                  repeats: int = DEFAULT_REPEATS, path: Path | None = None,
                  kernel_samples: int | None = None) -> tuple[dict, Path]:
    """Measure and store; returns (record, where it was written).  ``kernel_samples``: random
    kernel configurations per shape class (None: the probe's default; 0: none)."""
    from autotune.backends.cpu.calibration_terms import measure
    from autotune.backends.cpu.kernel_probe import DEFAULT_SAMPLES
    ks = DEFAULT_SAMPLES if kernel_samples is None else kernel_samples
    rec = {"version": CALIBRATION_VERSION,
           **measure(gemm_n, copy_mb, repeats, kernels_dir(default_db_dir()), ks)}
    return rec, write_calibration(rec, path)


# scalar fields of DeviceSpec a calibration record may set, their types, and whether 0 is valid
_FIELDS = {"gemm_flops": (float, False), "bandwidth": (float, False),
           "loop_flops": (float, False), "f32_flops": (float, False),
           "cache_bytes": (float, False), "tile_cache_bytes": (float, False),
           "parallel_units": (int, False),
           "launch_s": (float, False), "region_s": (float, True),
           "thread_start_s": (float, True), "library_call_s": (float, True),
           "kernel_call_s": (float, True),
           "kernel_flops": (float, False), "tile_overhead_s": (float, False)}
# nested dataclasses of positive floats (and the few that may be 0)
_SECTIONS = ("gemm_shapes", "access", "functions", "kernel")
_ZERO_OK = {"kernel.barrier_s", "kernel.cached_traffic"}


def _number(key: str, v, zero_ok: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
            or v < 0 or (v == 0 and not zero_ok):
        raise ValueError(f"{key} = {v!r} is not a {'non-negative' if zero_ok else 'positive'} "
                         f"number")
    return v


def spec_from_record(rec) -> DeviceSpec:
    """:data:`CPU_DEFAULT` with the terms of a calibration record; ValueError if it is not a
    JSON object with a valid gemm_flops and bandwidth, or a term it has is invalid."""
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    upd = {key: typ(_number(key, rec[key], zero_ok))
           for key, (typ, zero_ok) in _FIELDS.items() if key in rec}
    if "gemm_flops" not in upd or "bandwidth" not in upd:
        raise ValueError("gemm_flops and bandwidth are required")
    for name in _SECTIONS:
        sec = rec.get(name, {})
        if not isinstance(sec, dict):
            raise ValueError(f"{name} is not a JSON object")
        base = getattr(CPU_DEFAULT, name)
        known = {f.name for f in fields(base)}
        upd[name] = replace(base, **{k: float(_number(f"{name}.{k}", v,
                                                      f"{name}.{k}" in _ZERO_OK))
                                     for k, v in sec.items() if k in known})
    return replace(CPU_DEFAULT, **upd)


def load_cpu_spec(path: Path | None = None) -> DeviceSpec:
    """:data:`CPU_DEFAULT` with the calibrated terms, when a usable calibration file exists.

    A missing file means the defaults; an unreadable or invalid one is a
    :class:`CalibrationWarning` and the defaults; one from an older version is a
    :class:`StaleCalibrationWarning` and its terms, with defaults for the rest.
    """
    path = Path(path) if path is not None else calibration_path()
    if not path.exists():
        return CPU_DEFAULT
    try:
        rec = json.loads(path.read_text())
        spec = spec_from_record(rec)
    except (OSError, UnicodeDecodeError, ValueError) as e:
        warnings.warn(f"{path}: ignoring the cpu calibration ({e}); using the default cpu spec "
                      f"(run `autotune calibrate --device cpu` to redo it)",
                      CalibrationWarning, stacklevel=2)
        return CPU_DEFAULT
    version = rec.get("version")
    if isinstance(version, int) and version < CALIBRATION_VERSION:
        missing = [k for k in (*_FIELDS, *_SECTIONS) if k not in rec] + [
            f"{name}.{f.name}" for name in ("access", "kernel")   # the sections written whole
            if isinstance(rec.get(name), dict)
            for f in fields(getattr(CPU_DEFAULT, name)) if f.name not in rec[name]]
        warnings.warn(f"{path}: a version {version} cpu calibration; its terms apply, the "
                      f"defaults stand in for those it lacks ({', '.join(missing)}) (run "
                      f"`autotune calibrate --device cpu` to measure them)",
                      StaleCalibrationWarning, stacklevel=2)
    return spec


def cpu_spec_status(path: Path | None = None) -> tuple[DeviceSpec, bool, tuple[str, ...]]:
    """:func:`load_cpu_spec` with its warnings caught, for callers that report them their own
    way: the spec, whether it is this machine's calibration (a stale one still is), and the
    warnings' texts."""
    path = Path(path) if path is not None else calibration_path()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        spec = load_cpu_spec(path)
    calibrated = path.exists() and not any(
        issubclass(c.category, CalibrationWarning)
        and not issubclass(c.category, StaleCalibrationWarning) for c in caught)
    return spec, calibrated, tuple(str(c.message) for c in caught)
