"""``autotune calibrate --device cuda`` (autotune.backends.cuda.calibrate): the flow under the
host emulator (its figures are the CPU's, not a GPU's: what is checked is that each term is
measured, stored, read back for the same GPU only, and moves the model), the one-line refusal
without a GPU, and on a GPU the terms in their physical ranges."""
from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
from typer.testing import CliRunner

import costmodel
from autotune.backends.cpu.calibrate import CalibrationWarning
from autotune.backends.cuda.calibrate import (calibrate_cuda, calibration_path, load_cuda_spec,
                                              spec_from_record)
from autotune.backends.cuda.emulator import HostEmulator
from autotune.cli.app import app
from costmodel.devices import preset
from search_spaces import load_workload

H200 = preset("h200")


@pytest.mark.skipif(shutil.which("g++") is None, reason="g++ not on PATH")
def test_the_flow_under_the_emulator_measures_stores_and_applies_each_term(tmp_path):
    rec, path = calibrate_cuda(HostEmulator(threads=2), "NVIDIA H200", H200, tmp_path,
                               gemm_n=24, copy_mb=0.25, repeats=1, cache_dir=tmp_path / "k")
    assert path == calibration_path("NVIDIA H200", tmp_path) and path.exists()
    stored = json.loads(path.read_text())
    assert stored["gpu"] == "NVIDIA H200" and stored["preset"] == "h200"
    for key in ("bandwidth", "gemm_flops", "tensor_share", "mma_share", "launch_s"):
        assert stored[key] > 0, key
    assert stored["measured"]["eager_launch_s"] > 0
    spec, calibrated = load_cuda_spec(H200, "NVIDIA H200", tmp_path)
    assert calibrated and spec.bandwidth == stored["bandwidth"]
    assert spec.mma_share == stored["mma_share"] and spec.name == "h200"
    # another GPU's name finds no record: its preset, uncalibrated
    assert load_cuda_spec(H200, "NVIDIA A100", tmp_path) == (H200, False)


def test_a_record_of_another_gpu_or_a_corrupt_one_is_ignored_with_a_warning(tmp_path):
    path = calibration_path("NVIDIA H200", tmp_path)
    path.write_text(json.dumps({"gpu": "NVIDIA H100", "bandwidth": 1e12, "gemm_flops": 1e13,
                                "tensor_share": 0.5, "mma_share": 0.3, "launch_s": 5e-6}))
    with pytest.warns(CalibrationWarning, match="NVIDIA H100"):
        assert load_cuda_spec(H200, "NVIDIA H200", tmp_path) == (H200, False)
    path.write_text(json.dumps({"gpu": "NVIDIA H200", "version": 1, "bandwidth": 1e12,
                                "gemm_flops": 1e13, "tensor_share": 0.5, "mma_share": 0.3,
                                "launch_s": 5e-6}))       # an eager launch_s: not what it reads
    with pytest.warns(CalibrationWarning, match="version 1"):
        assert load_cuda_spec(H200, "NVIDIA H200", tmp_path) == (H200, False)
    path.write_text("{not json")
    with pytest.warns(CalibrationWarning, match="calibrate --device cuda"):
        assert load_cuda_spec(H200, "NVIDIA H200", tmp_path) == (H200, False)
    with pytest.raises(ValueError, match="mma_share"):
        spec_from_record(H200, {"bandwidth": 1e12, "gemm_flops": 1e13, "tensor_share": 0.5,
                                "mma_share": 7.0, "launch_s": 5e-6})


def test_the_kernels_share_moves_the_models_price_of_the_gpu_kernel():
    from tests.autotune.backends.test_cuda_mma import _kernel_cand
    w = load_workload("trimul_outgoing", {"N": 384, "C": 128})      # compute-bound there
    cand = _kernel_cand(w, "3xtf32", layouts={"a": (2, 0, 1), "b": (2, 0, 1)})
    price = lambda dev: next(g.predicted_s for g in costmodel.estimate(w, cand, dev).groups
                             if g.impl == "kernel" and "t" in g.ops)
    slow, fast = price(replace(H200, mma_share=0.2)), price(replace(H200, mma_share=0.6))
    assert 2.5 < slow / fast <= 3.0


def test_without_a_gpu_the_command_fails_in_one_line(monkeypatch):
    from autotune.environment import NoGPUError
    import autotune.environment as environment

    def no_gpu():
        raise NoGPUError("--device cuda: no NVIDIA GPU usable here (test); use --device cpu")
    monkeypatch.setattr(environment, "detect_cuda", no_gpu)
    r = CliRunner().invoke(app, ["calibrate", "--device", "cuda"])
    assert r.exit_code == 1
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and "no NVIDIA GPU" in lines[0]


@pytest.mark.cuda
def test_on_a_gpu_the_terms_are_in_their_physical_ranges(tmp_path):
    from autotune.backends.cuda.kind import CudaBackendKind
    from autotune.backends.cuda.runtime import CupyRuntime
    from autotune.environment import detect_cuda
    name = detect_cuda().name
    base = CudaBackendKind.preset_for(name)
    rec, _ = calibrate_cuda(CupyRuntime(), name, base, tmp_path, gemm_n=2048, copy_mb=256,
                            repeats=3, cache_dir=tmp_path / "k")
    assert 0.2 * base.bandwidth < rec["bandwidth"] < 2 * base.bandwidth
    assert 0.1 * base.gemm_flops < rec["gemm_flops"] < 2 * base.f32_flops
    assert 0.05 < rec["tensor_share"] <= 1.0 and 0.01 < rec["mma_share"] <= 1.5
    assert 1e-7 < rec["launch_s"] < 1e-3
    # a graph's node costs less than a launch from the host (a few us on an H200)
    assert rec["launch_s"] < rec["measured"]["eager_launch_s"]
