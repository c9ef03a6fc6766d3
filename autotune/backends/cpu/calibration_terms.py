"""The measurements behind ``autotune calibrate --device cpu``: every analytic term of the cost
model (section 7 of docs/costmodel.md) measured on this machine.

The library GEMM rate, on square matrices and per shape class, goes through the executor's GEMM
call (:mod:`.host_probes`); bandwidth by access pattern (streaming, strided, transposing), the
peak FMA rate, each transcendental's cost and the parallel-region overhead are generated C loops
(:mod:`.probes`); the fixed cost of a group's call comes from tiny compiled plans; the generated
contraction kernel's rate and parameter factors are fitted to random configurations
(:mod:`.kernel_probe`).  :func:`measure`
returns the record, with the raw figures each term comes from under ``evidence``;
``calibrate.py`` stores and loads it.
"""
from __future__ import annotations

import math
import platform
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from costmodel.devices import CPU_DEFAULT, TRANSCENDENTALS, GemmShapes
from costmodel.rates import gemm_rate

from autotune.backends.buffers import aligned_full
from autotune.backends.cpu import cache_reach, host_probes, kernel_probe, probes
from autotune.backends.cpu.machine import machine_bounds
from autotune.threads import cores

LOOP_FRACTION = 0.15   # generated loop nests vs. BLAS, when the loop rate is not measured
MIN_LAUNCH_S = 1e-6    # a call from Python never costs less, whatever the noise subtracts
MIN_TILE_S = CPU_DEFAULT.tile_setup_s   # a tile's bounds and loop set-up at least


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


def gemm_factors(square: float, by_class: dict[str, float]) -> dict[str, float]:
    """The :class:`GemmShapes` factors that make ``costmodel.rates.gemm_rate`` reproduce the
    measured rate of each class: each class's measured rate over what the model predicts there
    from the square rate and the factors found before it (the classes' measuring shapes lie in
    the flat part of every other class but the earlier ones, so the order matters)."""
    spec = replace(CPU_DEFAULT, gemm_flops=square, gemm_shapes=GemmShapes())
    found: dict[str, float] = {}
    for name in ("skinny_k", "skinny_mn", "batched_small"):
        if name not in by_class:
            continue
        found[name] = by_class[name] / gemm_rate(spec, *host_probes.GEMM_SHAPES[name])
        spec = replace(spec, gemm_shapes=replace(spec.gemm_shapes, **{name: found[name]}))
    return found


def _errors(fn, errors: dict, key: str):
    """``fn()``, or None with the failure's text under ``errors[key]`` (a probe that cannot
    compile or run leaves its terms at the defaults; the others still hold)."""
    try:
        return fn()
    except (OSError, RuntimeError) as e:     # CompileError is a RuntimeError
        errors[key] = f"{type(e).__name__}: {e}"[:300]
        return None


def measure(gemm_n: int, copy_mb: float, repeats: int, cache_dir: Path,
            kernel_samples: int = kernel_probe.DEFAULT_SAMPLES) -> dict:
    """Measure this machine: the calibration record without its version (not yet stored).
    ``cache_dir``: where the probes' compiled C goes (the kernel cache); ``kernel_samples``:
    random kernel configurations per shape class (0: the kernel's terms are not measured)."""
    errors: dict[str, str] = {}
    rates = host_probes.gemm_flops({"square": (1, gemm_n, gemm_n, gemm_n),
                                    **host_probes.GEMM_SHAPES}, repeats)
    ev: dict = {"gemm_flops": rates.pop("square"), "gemm_class_flops": rates}
    n = max(1, int(copy_mb * 1e6) // 4)
    # on cache lines, as a plan's buffers are (autotune.backends.buffers)
    src = aligned_full(n, 1.0, np.float32)
    dst = aligned_full(n, 0.0, np.float32)
    ev["numpy_copy_bandwidth"] = host_probes.numpy_copy_bandwidth(src, dst, repeats)
    lib = _errors(lambda: probes.load_probes(cache_dir), errors, "probes")
    if lib is not None:
        bws = probes.memory_bandwidths(lib, src, dst, repeats)
        ev["copy_bandwidth"] = bws["copy"]
        ev["strided_read_bandwidth"] = bws["strided_read"]
        ev["transpose_bandwidth"] = bws["transpose"]
        ev["one_region_bandwidth"] = bws["one_region"]
        ev["far_regions_bandwidth"] = bws["far_regions"]
        peak = _errors(lambda: probes.peak_flops(lib, repeats), errors, "f32_flops")
        if peak is not None:
            ev["peak_flops"] = peak
        ev["region_s"], ev["region_thread_s"], ev["threads"] = probes.region_times(lib, repeats)
        ev["tile_s"] = probes.tile_time(lib, repeats)
        fn_s = _errors(lambda: probes.function_times(lib, repeats), errors, "functions")
        if fn_s is not None:
            ev["function_s"] = fn_s
    del src, dst
    loop_call = _errors(lambda: host_probes.group_call_s(False, cache_dir, repeats), errors,
                        "launch_s")
    if loop_call is not None:
        ev["loop_group_call_s"] = loop_call
        ev["group_calls_serial"] = host_probes.calls_run_serial()
    ev["library_group_call_s"] = host_probes.group_call_s(True, cache_dir, repeats)
    kernel_call = _errors(lambda: host_probes.group_call_s(True, cache_dir, repeats,
                                                           kernel=True), errors, "kernel_call_s")
    if kernel_call is not None:
        ev["kernel_group_call_s"] = kernel_call
    # the private L2 a core's tiles and the kernel's blocks work in (costmodel's
    # tile_cache_bytes), as Linux reports it
    ev["l2_bytes"] = machine_bounds().l2_bytes
    llc = _last_level_cache()
    if llc:
        ev["reported_cache_bytes"] = ev["cache_bytes"] = llc
        # the reach's largest working set at most 4 times the copy's (a quick calibration,
        # as the tests run, measures none)
        sizes = cache_reach.reach_sizes(llc, 4 * n * 4)
        if lib is not None and sizes:
            bws = cache_reach.read_bandwidths(lib, sizes, repeats)
            ev["cache_read_bandwidth"] = {str(k): v for k, v in bws.items()}
            ev["cache_bytes"] = llc = cache_reach.cache_reach(bws, llc)
    if kernel_samples > 0:
        ks = _errors(lambda: kernel_probe.measure_kernel(machine_bounds(), cache_dir, repeats,
                                                         kernel_samples), errors, "kernel")
        if ks is not None:
            ev["kernel_samples"] = kernel_probe.sample_records(ks)
    rec = {"device": "cpu", "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "machine": platform.machine(), "processor": platform.processor(),
           "numpy": np.__version__, "gemm_n": int(gemm_n), "copy_bytes": int(n * 4),
           "repeats": int(repeats), **terms(ev, cores()), "evidence": ev}
    if llc:
        rec["cache_bytes"] = llc
    rec.update({f"{k}_error": v for k, v in errors.items()})
    return rec


def terms(ev: dict, cores: int) -> dict:
    """The cost model's terms from the raw measurements (``evidence``); a term whose probe did
    not run is left out (it keeps its default)."""
    gemm = ev["gemm_flops"]
    loop_flops = max(CPU_DEFAULT.loop_flops, LOOP_FRACTION * gemm)
    bw = ev.get("copy_bandwidth", ev["numpy_copy_bandwidth"])
    out = {"gemm_flops": gemm, "bandwidth": bw,
           "bandwidth_source": "generated copy" if "copy_bandwidth" in ev else "np.copyto",
           # not measured: generated loops reach a fraction of BLAS, never less than the default
           "loop_flops": loop_flops, "parallel_units": cores,
           "gemm_shapes": gemm_factors(gemm, ev["gemm_class_flops"])}
    if ev.get("l2_bytes"):
        out["tile_cache_bytes"] = float(ev["l2_bytes"])
    if "transpose_bandwidth" in ev:
        transpose = max(1.0, bw / ev["transpose_bandwidth"])
        # the transposing copy reads unit-stride (one byte per byte) and writes strided
        out["access"] = {"strided_read": max(1.0, bw / ev["strided_read_bandwidth"]),
                         "transpose_copy": transpose, "strided_write": 2 * transpose - 1}
        if "far_regions_bandwidth" in ev:
            out["access"]["far_regions"] = max(
                1.0, ev["one_region_bandwidth"] / ev["far_regions_bandwidth"])
    if "peak_flops" in ev:
        out["f32_flops"] = ev["peak_flops"]
    region = 0.0
    if "region_s" in ev:
        out["region_s"], out["thread_start_s"] = ev["region_s"], ev["region_thread_s"]
        region = ev["region_s"] + ev["region_thread_s"] * (cores - 1)
    if "tile_s" in ev:
        # the floor keeps a tile's member loops' set-up, which the empty probe tiles lack
        out["tile_overhead_s"] = max(ev["tile_s"], MIN_TILE_S)
    if "function_s" in ev:
        out["functions"] = {fn: max(1.0, s * loop_flops) for fn, s in ev["function_s"].items()
                            if fn != "ref"}
    # the probes' 2 x 2 groups run on the calling thread (search_spaces.serial; evidence from
    # before that rule has no flag): their region wakes no other thread
    opened = ev.get("region_s", 0.0) if ev.get("group_calls_serial") else region
    if "loop_group_call_s" in ev:
        out["launch_s"] = max(ev["loop_group_call_s"] - opened, MIN_LAUNCH_S)
    out["library_call_s"] = max(ev["library_group_call_s"]
                                - out.get("launch_s", CPU_DEFAULT.launch_s), 0.0)
    if "kernel_group_call_s" in ev:
        # what a kernel group's call costs beyond a loop group's (both over 2 x 2 matrices):
        # the operands' views, the argument arrays, the kernel's own set-up; the probe passes
        # the same arrays on every call, as a search's timed runs do, so a kernel group's
        # kept arguments (kernel_group.KernelGroup._remember) serve it
        out["kernel_call_s"] = max(ev["kernel_group_call_s"] - ev.get(
            "loop_group_call_s", CPU_DEFAULT.launch_s + opened), 0.0)
    if ev.get("kernel_samples"):
        # the kernel's terms are fitted against the model with this machine's other terms
        known = {k: out[k] for k in ("gemm_flops", "f32_flops", "bandwidth", "parallel_units",
                                     "launch_s", "region_s", "thread_start_s", "kernel_call_s",
                                     "tile_cache_bytes")
                 if k in out}
        dev = replace(CPU_DEFAULT, cache_bytes=float(ev.get("cache_bytes",
                                                            CPU_DEFAULT.cache_bytes)), **known)
        out.update(kernel_probe.kernel_terms(
            kernel_probe.samples_from_records(ev["kernel_samples"]), dev))
    return out


def report_lines(rec: dict) -> list[str]:
    """Every term of a calibration record, one line each, with the figure it comes from."""
    ev = rec.get("evidence", {})
    g, best = rec["gemm_flops"], f"best of >= {rec.get('repeats', '?')} runs"
    n = rec.get("gemm_n", "?")
    out = [f"gemm:       {g / 1e9:.1f} GFLOP/s  (float32 {n}x{n}x{n} through the executor's "
           f"GEMM call, {best})"]
    shapes = rec.get("gemm_shapes", {})
    for name in (c for c in host_probes.GEMM_SHAPES if c in shapes):
        factor, (b, m, nn, k) = shapes[name], host_probes.GEMM_SHAPES[name]
        rate = ev.get("gemm_class_flops", {}).get(name, math.nan)
        out.append(f"  {name + ':':<15} x{factor:.2f} on the shape law  ({rate / 1e9:.1f} "
                   f"GFLOP/s at batch {b}, M={m} N={nn} K={k})")
    out.append(f"bandwidth:  {rec['bandwidth'] / 1e9:.2f} GB/s  "
               f"({rec.get('bandwidth_source', '?')}, {rec.get('copy_bytes', 0) / 1e6:.0f} MB, "
               f"read+write; np.copyto {ev.get('numpy_copy_bandwidth', math.nan) / 1e9:.2f} "
               f"GB/s)")
    acc = rec.get("access")
    if acc:
        out.append(f"  strided read:   x{acc['strided_read']:.1f} bytes per useful byte  "
                   f"({ev['strided_read_bandwidth'] / 1e9:.2f} GB/s useful, stride "
                   f"{probes.STRIDE} floats)")
        out.append(f"  transpose copy: x{acc['transpose_copy']:.1f} a streaming copy's time  "
                   f"({ev['transpose_bandwidth'] / 1e9:.2f} GB/s read+write)")
        out.append(f"  strided write:  x{acc['strided_write']:.1f} bytes per useful byte  "
                   f"(2 x transpose - 1: the copy's read side streams)")
        if "far_regions" in acc:
            out.append(f"  far regions:    x{acc['far_regions']:.2f} a read's time  "
                       f"({ev['far_regions_bandwidth'] / 1e9:.2f} GB/s reading "
                       f"{probes.FAR_REGIONS} regions {probes.RUN} floats a step, "
                       f"{ev['one_region_bandwidth'] / 1e9:.2f} from one)")
    else:
        out.append(f"  access patterns: not measured ({rec.get('probes_error', '?')})")
    out.append(f"peak:       {rec['f32_flops'] / 1e9:.1f} GFLOP/s  (float32 FMA chains on "
               f"every core)" if "f32_flops" in rec else
               f"peak:       not measured ({rec.get('f32_flops_error', rec.get('probes_error'))})")
    out.append(f"loop:       {rec['loop_flops'] / 1e9:.1f} GFLOP/s  (not measured: "
               f"max(default, {LOOP_FRACTION} x gemm))")
    fns = rec.get("functions")
    fn_s = ev.get("function_s", {})
    out.append("functions:  " + (", ".join(
        f"{fn} {fns[fn]:.1f}" for fn in TRANSCENDENTALS if fn in fns)
        + "  flop-equivalents at the loop rate (ns per evaluation beyond a plain loop's "
        f"{fn_s.get('ref', 0) * 1e9:.2f}: "
        + ", ".join(f"{fn} {fn_s[fn] * 1e9:.2f}" for fn in TRANSCENDENTALS if fn in fn_s) + ")"
        if fns else f"not measured ({rec.get('functions_error', rec.get('probes_error'))})"))
    if "region_s" in rec:
        out.append(f"region:     {rec['region_s'] * 1e6:.2f} us per parallel region, + "
                   f"{rec['thread_start_s'] * 1e6:.2f} us per thread beyond the first "
                   f"({ev.get('threads', '?')} threads)")
    if "tile_overhead_s" in rec:
        out.append(f"tiles:      {rec['tile_overhead_s'] * 1e9:.1f} ns of one core per tile a "
                   f"loop group deals out (dynamic schedule, empty tiles: "
                   f"{ev.get('tile_s', math.nan) * 1e9:.1f} ns)")
    if "launch_s" in rec:
        out.append(f"launch:     {rec['launch_s'] * 1e6:.1f} us per group call  (a loop group "
                   f"{ev['loop_group_call_s'] * 1e6:.1f} us in all, less its region)")
    else:
        out.append(f"launch:     not measured ({rec.get('launch_s_error', '?')})")
    out.append(f"library:    {rec['library_call_s'] * 1e6:.1f} us per GEMM call beyond the "
               f"launch  (a library group {ev.get('library_group_call_s', 0) * 1e6:.1f} us in "
               f"all)")
    if "kernel_call_s" in rec:
        out.append(f"kernel call: {rec['kernel_call_s'] * 1e6:.1f} us per generated-kernel "
                   f"group beyond a loop group's  (a kernel group "
                   f"{ev.get('kernel_group_call_s', 0) * 1e6:.1f} us in all)")
    if "kernel_flops" in rec:
        kc, fit = rec.get("kernel", {}), rec.get("kernel_fit", {})
        out.append(f"kernel:     {rec['kernel_flops'] / 1e9:.1f} GFLOP/s  (the generated "
                   f"contraction kernel, fitted to {fit.get('samples', '?')} random "
                   f"configurations; log error {fit.get('rms_log_before', math.nan):.2f} -> "
                   f"{fit.get('rms_log_after', math.nan):.2f} with its factors)")
        out.append("  factors:  " + ", ".join(f"{k} x{v:.2f}" for k, v in sorted(kc.items())
                                              if k not in ("barrier_s", "cached_traffic"))
                   + f"; barrier {kc.get('barrier_s', 0.0) * 1e6:.1f} us; traffic of operands "
                   f"in the cache x{kc.get('cached_traffic', 1.0):.2f}")
    else:
        out.append(f"kernel:     not measured ({rec.get('kernel_error', 'no kernel samples')})")
    reach = sorted((int(k), v) for k, v in ev.get("cache_read_bandwidth", {}).items())
    reach_text = (f"  (read faster than memory up to there; "
                  f"{ev.get('reported_cache_bytes', 0) / 2**20:.0f} MiB reported; GB/s by "
                  f"working set: {', '.join(f'{k >> 20} MiB {v / 1e9:.0f}' for k, v in reach)})"
                  if reach else "")
    out.append(f"cores:      {rec['parallel_units']}"
               + (f"   L2: {rec['tile_cache_bytes'] / 2**20:.2g} MiB a core"
                  if "tile_cache_bytes" in rec else "")
               + (f"   last-level cache: {rec['cache_bytes'] / 2**20:.0f} MiB{reach_text}"
                  if "cache_bytes" in rec else ""))
    return out
