"""Calibration of a GPU's device spec: ``autotune calibrate --device cuda`` measures the terms
the CUDA model leans on most, on the device at hand, over its datasheet preset.

Measured (device-resident buffers, CUDA events, the best of the repeats): ``bandwidth`` (a
device-to-device copy, both directions counted), ``gemm_flops`` (a square SGEMM through cuBLAS),
``tensor_share`` (a square TF32 GEMM's rate over the preset's ``tf32_flops``), ``mma_share``
(the generated tensor-core kernel, autotune.backends.cuda.mma_kernel, on a square TF32 GEMM at
the space's default tiling, over the TF32 GEMM's rate) and ``launch_s`` (a one-element kernel as
a node of a replayed CUDA graph, which is how plans launch their groups; the same launched back
to back from the host is kept in the record as ``eager_launch_s``).  Stored as JSON next to
the plan database, one file per GPU name; :func:`load_cuda_spec` applies a record to the
preset of the same GPU and ignores one of another GPU or version (a clear warning where a file
cannot be read).
"""
from __future__ import annotations

import json
import math
import re
import tempfile
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from costmodel.devices import DeviceSpec
from search_spaces import parse_workload
from search_spaces.candidate import IMPL_KERNEL, GroupSchedule, make_candidate
from search_spaces.kernel import gpu_options

from autotune.backends.cpu.calibrate import CalibrationWarning, default_db_dir, write_calibration
from autotune.backends.cuda.gemm import GemmCall

CUDA_CALIBRATION_VERSION = 2     # 2: launch_s is a graph node's
# the record's terms: (DeviceSpec field, whether it is a share of a rate, at most 1.5)
TERMS = {"bandwidth": False, "gemm_flops": False, "tensor_share": True, "mma_share": True,
         "launch_s": False}
GEMM = '''name = "calibrate_gemm"
summary = "a square GEMM for the tensor-core kernel's rate"
dtype = "float32"
outputs = ["c"]
program = "c[i,j] += a[i,k] * b[k,j]"
[dims]
N = {n}
[inputs]
a = ["N", "N"]
b = ["N", "N"]
[tolerance]
rtol = 1e-3
'''


def calibration_path(gpu_name: str, folder: Path | None = None) -> Path:
    """Where the calibration of the GPU named ``gpu_name`` is stored."""
    tag = re.sub(r"[^a-z0-9]+", "-", gpu_name.lower()).strip("-") or "gpu"
    return (Path(folder) if folder is not None else default_db_dir()) / \
        f"calibration-cuda-{tag}.json"


def _best(rt, fn, repeats: int) -> float:
    fn()                                   # warm-up: loads, plans, allocations
    best = math.inf
    for _ in range(repeats):
        with rt.timer() as t:
            fn()
        best = min(best, t.seconds)
    return best


def measure(rt, preset: DeviceSpec, gemm_n: int = 8192, copy_mb: float = 1024.0,
            repeats: int = 5, cache_dir: Path | None = None) -> dict:
    """The measured terms on runtime ``rt`` (CuPy, or the host emulator in the tests)."""
    from autotune.backends.cuda.executor import CudaPlan
    from autotune.backends.cuda.gemm import run_gemm
    xp = rt.xp
    n_copy = max(1, int(copy_mb * 2**20) // 4)
    src, dst = xp.ones(n_copy, np.float32), xp.empty(n_copy, np.float32)

    def copy():
        dst[...] = src
    bandwidth = 2 * 4 * n_copy / _best(rt, copy, repeats)
    n = gemm_n
    a, b = xp.ones(n * n, np.float32), xp.ones(n * n, np.float32)
    c = xp.empty(n * n, np.float32)
    call = GemmCall("A", "B", "N", "N", n, n, n, n, n, n, 0, 0, 0, 1)
    flops = 2.0 * n ** 3
    sgemm = flops / _best(rt, lambda: run_gemm(rt, call, a, b, c, 1.0, "fp32"), repeats)
    tf32 = flops / _best(rt, lambda: run_gemm(rt, call, a, b, c, 1.0, "tf32"), repeats)
    w = parse_workload(GEMM.format(n=n), "calibrate_gemm.toml")
    # c alone, on the kernel at the space's default tiling, in TF32
    cand = make_candidate((), {}, [GroupSchedule("c", (n, n), IMPL_KERNEL,
                                                 gpu_options().default, precision="tf32")])
    folder = Path(cache_dir) if cache_dir is not None else Path(tempfile.mkdtemp())
    plan = CudaPlan(w, cand, folder, runtime=rt)
    dev_in = plan.upload(w.random_inputs(seed=0))
    mma = flops / _best(rt, lambda: plan.run_device(**dev_in), repeats)
    # a launch as plans pay it: a node of a replayed graph (autotune.backends.cuda.graphs),
    # and, for the record, one launched from the host
    one, parts = xp.ones(1, np.float32), (xp.empty(1, np.float32), xp.empty(1, np.float32))
    launches = 20

    def split_all():
        for _ in range(launches):
            rt.split_tf32(one, parts)
    eager = _best(rt, split_all, repeats) / launches
    graph = rt.capture(split_all)
    launch = _best(rt, lambda: rt.replay(graph), repeats) / launches
    return {"bandwidth": bandwidth, "gemm_flops": sgemm,
            "tensor_share": tf32 / preset.tf32_flops if preset.tf32_flops > 0 else 1.0,
            "mma_share": mma / tf32, "launch_s": launch,
            "measured": {"gemm_n": n, "copy_mb": copy_mb, "sgemm_flops": sgemm,
                         "tf32_flops": tf32, "mma_tf32_flops": mma,
                         "eager_launch_s": eager}}


def calibrate_cuda(rt, gpu_name: str, preset: DeviceSpec, folder: Path | None = None,
                   **sizes) -> tuple[dict, Path]:
    """Measure on ``rt`` and store the record for ``gpu_name``; (record, path)."""
    rec = {"version": CUDA_CALIBRATION_VERSION, "gpu": gpu_name, "preset": preset.name,
           **measure(rt, preset, **sizes)}
    return rec, write_calibration(rec, calibration_path(gpu_name, folder))


def spec_from_record(preset: DeviceSpec, rec) -> DeviceSpec:
    """``preset`` with a record's terms; ValueError for a record that is not one."""
    if not isinstance(rec, dict):
        raise ValueError("not a JSON object")
    upd = {}
    for key, share in TERMS.items():
        v = rec.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v <= 0 or (share and v > 1.5):
            raise ValueError(f"{key} = {v!r} is not a {'share' if share else 'positive number'}")
        upd[key] = float(v)
    return replace(preset, **upd)


def load_cuda_spec(preset: DeviceSpec, gpu_name: str, folder: Path | None = None
                   ) -> tuple[DeviceSpec, bool]:
    """(``preset`` with this GPU's calibrated terms where a record exists, whether one does);
    an unreadable or invalid record is a :class:`CalibrationWarning` and the preset."""
    path = calibration_path(gpu_name, folder)
    if not path.exists():
        return preset, False
    try:
        rec = json.loads(path.read_text())
        if rec.get("gpu") != gpu_name:
            raise ValueError(f"it is {rec.get('gpu')!r}'s")
        if rec.get("version") != CUDA_CALIBRATION_VERSION:
            raise ValueError(f"it is of version {rec.get('version')!r}, this autotune reads "
                             f"{CUDA_CALIBRATION_VERSION}")
        return spec_from_record(preset, rec), True
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as e:
        warnings.warn(f"{path}: ignoring the cuda calibration ({e}); using the {preset.name} "
                      f"preset (run `autotune calibrate --device cuda` to redo it)",
                      CalibrationWarning, stacklevel=2)
        return preset, False
