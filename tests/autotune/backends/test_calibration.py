"""`autotune calibrate` term by term: every probe on a tiny size gives a positive finite figure,
the GEMM class factors reproduce what was measured, the file round-trips (an older version's
file loads, with defaults for the terms it lacks), and the CLI prints every term."""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from typer.testing import CliRunner

from autotune.backends.cpu import calibrate as cal
from autotune.backends.cpu import host_probes, probes
from autotune.backends.cpu.calibration_terms import MIN_TILE_S, gemm_factors, report_lines, terms
from autotune.cli.app import app
from costmodel.devices import CPU_DEFAULT, TRANSCENDENTALS, AccessCosts, GemmShapes
from costmodel.rates import gemm_rate

runner = CliRunner()


def positive(x) -> bool:
    return isinstance(x, float) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return probes.load_probes(tmp_path_factory.mktemp("kernels"))


# ---- each probe, tiny ------------------------------------------------------------------------

def test_memory_probes_on_a_tiny_buffer(lib):
    src = np.ones(20_000, dtype=np.float32)
    dst = np.zeros(20_000, dtype=np.float32)
    bws = probes.memory_bandwidths(lib, src, dst, 1)
    assert set(bws) == {"copy", "strided_read", "transpose", "one_region", "far_regions"}
    assert all(positive(v) for v in bws.values())
    assert positive(host_probes.numpy_copy_bandwidth(src, dst, 1))


def test_the_transpose_probe_really_transposes(lib):
    side = 9
    src = np.arange(side * side, dtype=np.float32)
    dst = np.zeros_like(src)
    lib.probe_transpose(src.ctypes.data, dst.ctypes.data, side, side)
    assert (dst.reshape(side, side) == src.reshape(side, side).T).all()


def test_the_spread_read_probe_reads_runs_of_every_region(lib):
    # 4 regions of 25 floats, 8 a step: steps at 0, 8, 16 in each (17..24 fit, 24 does not)
    src = np.arange(100, dtype=np.float32)
    expect = sum(float(src[r * 25 + p: r * 25 + p + 8].sum()) for r in range(4)
                 for p in (0, 8, 16))
    assert lib.probe_spread_read(src.ctypes.data, 100, 4, 8) == pytest.approx(expect)
    assert probes.spread_read_bytes(100, 4, run=8) == 4 * 3 * 8 * 4


def test_compute_probes_on_a_tiny_size(lib):
    assert positive(probes.peak_flops(lib, 1, iters=10_000))
    one, per_thread, threads = probes.region_times(lib, 1, reps=10)
    assert positive(one) and math.isfinite(per_thread) and per_thread >= 0 and threads >= 1
    tile = probes.tile_time(lib, 1, n=4096, reps=2)
    assert math.isfinite(tile) and tile >= 0
    fn_s = probes.function_times(lib, 1, reps=2)
    assert set(fn_s) == {"ref", *TRANSCENDENTALS}
    assert positive(fn_s["ref"])
    assert all(math.isfinite(s) and s >= 0 for s in fn_s.values())


def test_gemm_probe_through_the_executor_call():
    rates = host_probes.gemm_flops({"tiny": (2, 8, 4, 16), "square": (1, 16, 16, 16)}, 1)
    assert set(rates) == {"tiny", "square"} and all(positive(v) for v in rates.values())


def test_group_call_probes(tmp_path):
    assert positive(host_probes.group_call_s(False, tmp_path, 1, ops=2))
    assert positive(host_probes.group_call_s(True, tmp_path, 1, ops=2))
    assert positive(host_probes.group_call_s(True, tmp_path, 1, ops=2, kernel=True))


def test_gemm_factors_make_the_model_reproduce_each_measured_class():
    square = 100e9
    measured = {"skinny_k": 40e9, "skinny_mn": 30e9, "batched_small": 25e9}
    factors = gemm_factors(square, measured)
    spec = CPU_DEFAULT.__class__.from_dict({**CPU_DEFAULT.to_dict(), "gemm_flops": square,
                                            "gemm_shapes": factors})
    for name, rate in measured.items():
        assert gemm_rate(spec, *host_probes.GEMM_SHAPES[name]) == pytest.approx(rate)


def test_terms_from_the_raw_measurements():
    ev = {"gemm_flops": 1e11, "gemm_class_flops": {"skinny_k": 5e10},
          "numpy_copy_bandwidth": 2e10, "copy_bandwidth": 3e10,
          "strided_read_bandwidth": 1e9, "transpose_bandwidth": 2e9,
          "one_region_bandwidth": 2e10, "far_regions_bandwidth": 1e10,
          "region_s": 1e-6, "region_thread_s": 4e-6, "threads": 3, "tile_s": 2e-8,
          "function_s": {"ref": 1e-10, "exp": 2e-10, "sqrt": 1e-12},
          "loop_group_call_s": 20e-6, "library_group_call_s": 50e-6,
          "kernel_group_call_s": 80e-6, "l2_bytes": 2 * 2**20}
    t = terms(ev, cores=3)
    # the core's L2 as Linux reports it: where a tile and the kernel's B block work
    assert t["tile_cache_bytes"] == 2.0 * 2**20
    assert "tile_cache_bytes" not in terms({**ev, "l2_bytes": 0}, cores=3)
    assert t["bandwidth"] == 3e10 and t["bandwidth_source"] == "generated copy"
    assert t["access"] == {"strided_read": 30.0, "transpose_copy": 15.0, "strided_write": 29.0,
                           "far_regions": 2.0}
    assert t["gemm_shapes"] == {"skinny_k": pytest.approx(0.5)}
    loop_flops = max(CPU_DEFAULT.loop_flops, 0.15 * 1e11)
    assert t["functions"] == {"exp": pytest.approx(2e-10 * loop_flops), "sqrt": 1.0}
    # a loop group's call is its launch plus its region on 3 threads
    assert t["launch_s"] == pytest.approx(20e-6 - 1e-6 - 2 * 4e-6)
    assert t["library_call_s"] == pytest.approx(50e-6 - t["launch_s"])
    # ... or on the calling thread alone, where the probe's groups are too small to share
    # (search_spaces.serial), as they are now
    alone = terms({**ev, "group_calls_serial": True}, cores=3)
    assert alone["launch_s"] == pytest.approx(20e-6 - 1e-6)
    assert alone["kernel_call_s"] == pytest.approx(60e-6)
    # a kernel group's call beyond a loop group's
    assert t["kernel_call_s"] == pytest.approx(60e-6)
    assert t["tile_overhead_s"] == 2e-8
    # an empty probe tile costs less than a real one: the floor keeps a tile's loop set-up
    assert terms({**ev, "tile_s": 0.0}, cores=3)["tile_overhead_s"] == MIN_TILE_S > 0
    # no compiler: no pattern, function or region terms, NumPy's copy for the bandwidth
    bare = terms({k: ev[k] for k in ("gemm_flops", "gemm_class_flops", "numpy_copy_bandwidth",
                                     "library_group_call_s")}, cores=3)
    assert bare["bandwidth"] == 2e10 and bare["bandwidth_source"] == "np.copyto"
    assert not {"access", "functions", "region_s", "launch_s", "f32_flops",
                "tile_overhead_s", "kernel_call_s"} & set(bare)
    assert bare["library_call_s"] == pytest.approx(50e-6 - CPU_DEFAULT.launch_s)


# ---- the file --------------------------------------------------------------------------------

def full_record() -> dict:
    return {"version": cal.CALIBRATION_VERSION, "gemm_flops": 1e11, "bandwidth": 2e10,
            "loop_flops": 2e10, "f32_flops": 2e11, "parallel_units": 4, "cache_bytes": 1e6,
            "tile_cache_bytes": 1.25 * 2**20,
            "launch_s": 3e-6, "region_s": 1e-6, "thread_start_s": 0.0, "library_call_s": 4e-5,
            "kernel_call_s": 6e-5,
            "tile_overhead_s": 2e-8, "gemm_shapes": {"skinny_k": 0.7, "skinny_mn": 1.3, "batched_small": 0.9},
            "access": {"strided_read": 25.0, "strided_write": 40.0, "transpose_copy": 20.5,
                       "far_regions": 2.5},
            "functions": {"exp": 5.0, "tanh": 300.0}, "evidence": {"anything": 1}}


def test_a_current_record_round_trips(tmp_path):
    path = cal.write_calibration(full_record(), tmp_path / "c.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = cal.load_cpu_spec(path)
    assert (spec.gemm_flops, spec.bandwidth, spec.parallel_units) == (1e11, 2e10, 4)
    assert spec.tile_cache_bytes == 1.25 * 2**20 != CPU_DEFAULT.tile_cache_bytes
    assert (spec.launch_s, spec.region_s, spec.thread_start_s, spec.library_call_s,
            spec.kernel_call_s) == (3e-6, 1e-6, 0.0, 4e-5, 6e-5)
    assert spec.tile_overhead_s == 2e-8
    assert spec.gemm_shapes == GemmShapes(0.7, 1.3, 0.9)
    assert spec.access == AccessCosts(25.0, 40.0, 20.5, 2.5)
    # functions the record names are set; the others keep the default's
    assert spec.functions.exp == 5.0 and spec.functions.tanh == 300.0
    assert spec.functions.log == CPU_DEFAULT.functions.log
    assert cal.cpu_spec_status(path) == (spec, True, ())


def test_a_version_1_file_loads_with_defaults_for_the_new_terms(tmp_path):
    old = {"version": 1, "device": "cpu", "gemm_flops": 1.2e11, "bandwidth": 2.1e10,
           "loop_flops": 2e10, "f32_flops": 7.4e10, "parallel_units": 2, "cache_bytes": 33554432,
           "gemm_n": 2048, "copy_bytes": 256000000, "repeats": 3}
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    with pytest.warns(cal.StaleCalibrationWarning, match="version 1"):
        spec = cal.load_cpu_spec(path)
    assert spec.gemm_flops == 1.2e11 and spec.f32_flops == 7.4e10
    for term in ("launch_s", "region_s", "thread_start_s", "library_call_s", "gemm_shapes",
                 "access", "functions"):
        assert getattr(spec, term) == getattr(CPU_DEFAULT, term)
    spec2, calibrated, notes = cal.cpu_spec_status(path)
    assert spec2 == spec and calibrated is True and len(notes) == 1 and "access" in notes[0]


@pytest.mark.parametrize("bad", [{"access": {"strided_read": -1.0}}, {"access": [1, 2]},
                                 {"functions": {"exp": "slow"}}, {"region_s": -1e-6},
                                 {"launch_s": 0}])
def test_an_invalid_term_rejects_the_file(tmp_path, bad):
    path = cal.write_calibration({**full_record(), **bad}, tmp_path / "c.json")
    with pytest.warns(cal.CalibrationWarning, match="ignoring"):
        assert cal.load_cpu_spec(path) == CPU_DEFAULT
    assert cal.cpu_spec_status(path)[1] is False


# ---- the command -----------------------------------------------------------------------------

def test_calibrate_prints_every_term(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "plans.sqlite"))
    r = runner.invoke(app, ["calibrate", "--gemm-n", "32", "--copy-mb", "0.2", "--repeats", "1",
                            "--kernel-samples", "2"])
    assert r.exit_code == 0, r.output
    rec = json.loads(cal.calibration_path().read_text())
    # the kernel's terms: fitted to the default and 2 random configurations at each shape
    assert rec["kernel_fit"]["samples"] == len(rec["evidence"]["kernel_samples"]) >= 6
    assert rec["kernel_flops"] > 0 and rec["kernel"]["barrier_s"] >= 0
    for needle in ("kernel:", "factors:", "gemm:", "skinny_k", "skinny_mn", "batched_small", "bandwidth:",
                   "strided read", "transpose copy", "strided write", "peak:", "loop:",
                   "functions:", "region:", "launch:", "library:", "cores:"):
        assert needle in r.stdout, needle
    for fn in TRANSCENDENTALS:
        assert f"{fn} {rec['functions'][fn]:.1f}" in r.stdout
    assert f"x{rec['access']['strided_read']:.1f}" in r.stdout
    assert r.stdout.splitlines()[:-1] == report_lines(rec)
    spec = cal.load_cpu_spec()
    assert spec.access.strided_read == rec["access"]["strided_read"] >= 1.0
    assert spec.region_s == rec["region_s"] and spec.functions.exp == rec["functions"]["exp"]
    assert spec.kernel_flops == rec["kernel_flops"]
    assert spec.kernel.stream_cached == rec["kernel"]["stream_cached"] > 0
    assert set(rec["gemm_shapes"]) == set(host_probes.GEMM_SHAPES)


def test_a_version_8_kernel_section_loads_with_the_whole_traffic_and_says_so(tmp_path):
    """Version 9 fits the share of its traffic a kernel with its operands in the cache pays:
    a version 8 record's kernel terms apply with the whole traffic (the model they were
    fitted with), and the warning names the missing term."""
    rec = {**full_record(), "version": 8,
           "kernel": {"one_vector": 1.2, "outer_a": 0.9, "barrier_s": 0.0}}
    path = cal.write_calibration(rec, tmp_path / "c.json")
    with pytest.warns(cal.StaleCalibrationWarning, match="kernel.cached_traffic"):
        spec = cal.load_cpu_spec(path)
    assert spec.kernel.one_vector == 1.2 and spec.kernel.cached_traffic == 1.0
    # a fitted share of 0 (all of it hidden) is a valid term
    path = cal.write_calibration({**rec, "version": cal.CALIBRATION_VERSION,
                                  "kernel": {**rec["kernel"], "cached_traffic": 0.0}},
                                 tmp_path / "c9.json")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cal.load_cpu_spec(path).kernel.cached_traffic == 0.0
