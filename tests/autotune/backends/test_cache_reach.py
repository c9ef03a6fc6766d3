"""autotune.backends.cpu.cache_reach: the calibration takes the last-level cache's reach, the
largest working set read faster than memory, in place of the size Linux reports."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from autotune.backends.cpu import cache_reach, calibration_terms, probes
from autotune.backends.cpu import calibrate as cal
from autotune.cli.app import app

MiB = 1 << 20


def test_the_sizes_double_from_4_mib_past_the_reported_cache():
    assert cache_reach.reach_sizes(32 * MiB, 1 << 40) == [s * MiB for s in (4, 8, 16, 32, 64)]
    # capped by the caller's limit and by LARGEST; nothing to compare under two sizes
    assert cache_reach.reach_sizes(480 * MiB, 16 * MiB) == [4 * MiB, 8 * MiB, 16 * MiB]
    assert max(cache_reach.reach_sizes(4096 * MiB, 1 << 40)) == cache_reach.LARGEST
    assert cache_reach.reach_sizes(32 * MiB, 6 * MiB) == []


def test_the_reach_is_the_largest_set_read_faster_than_memory():
    # the Xeon's figures (GB/s by MiB): L2 to 4, the cache to 64, memory from 128
    xeon = {4: 104.4, 8: 46.5, 16: 57.5, 32: 52.7, 64: 55.3, 128: 34.3, 256: 37.1, 512: 36.1}
    bws = {k * MiB: v * 1e9 for k, v in xeon.items()}
    assert cache_reach.cache_reach(bws, 480 * MiB) == 64 * MiB
    # never more than reported; a cache no faster than memory keeps the reported size
    assert cache_reach.cache_reach(bws, 32 * MiB) == 32 * MiB
    flat = {k * MiB: 30e9 for k in (4, 8, 16)}
    assert cache_reach.cache_reach(flat, 8 * MiB) == 8 * MiB
    assert cache_reach.cache_reach({4 * MiB: 1e11}, 8 * MiB) == 8 * MiB


def test_the_read_probe_measures_every_size(tmp_path):
    lib = probes.load_probes(tmp_path)
    sizes = [64 << 10, 128 << 10, 256 << 10]
    bws = cache_reach.read_bandwidths(lib, sizes, 1)
    assert sorted(bws) == sizes and all(v > 0 for v in bws.values())


def test_calibrate_stores_the_reach_and_reports_it(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "plans.sqlite"))
    # a small cache reported, small sets: the probe runs within the tests' 0.5 MB copy
    monkeypatch.setattr(calibration_terms, "_last_level_cache", lambda: 512 << 10)
    monkeypatch.setattr(cache_reach, "SMALLEST", 64 << 10)
    r = CliRunner().invoke(app, ["calibrate", "--gemm-n", "32", "--copy-mb", "0.5",
                                 "--repeats", "1", "--kernel-samples", "0"])
    assert r.exit_code == 0, r.output
    rec = json.loads(cal.calibration_path().read_text())
    ev = rec["evidence"]
    assert ev["reported_cache_bytes"] == 512 << 10
    assert sorted(map(int, ev["cache_read_bandwidth"])) == [64 << 10, 128 << 10, 256 << 10,
                                                            512 << 10, 1 << 20]
    assert rec["cache_bytes"] == ev["cache_bytes"] == cache_reach.cache_reach(
        {int(k): v for k, v in ev["cache_read_bandwidth"].items()}, 512 << 10)
    assert "read faster than memory up to there" in r.stdout
    assert cal.load_cpu_spec().cache_bytes == rec["cache_bytes"]


def test_a_quick_calibration_keeps_the_reported_size(tmp_path, monkeypatch):
    monkeypatch.setenv("AUTOTUNE_DB", str(tmp_path / "plans.sqlite"))
    monkeypatch.setattr(calibration_terms, "_last_level_cache", lambda: 32 * MiB)
    r = CliRunner().invoke(app, ["calibrate", "--gemm-n", "32", "--copy-mb", "0.2",
                                 "--repeats", "1", "--kernel-samples", "0"])
    assert r.exit_code == 0, r.output
    rec = json.loads(cal.calibration_path().read_text())
    assert rec["cache_bytes"] == 32 * MiB and "cache_read_bandwidth" not in rec["evidence"]
