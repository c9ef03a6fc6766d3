#!/usr/bin/env python
"""The generated contraction kernel against NumPy's BLAS on the same shapes, in one process.

    python bench/gemm_kernel.py                         # 2048^3 and the stacked trimul projection
    python bench/gemm_kernel.py --shapes 128x702x702x702 --rounds 3    # batch x M x N x K
    python bench/gemm_kernel.py --variant mr=12,kc=384 --variant split=batch

For each shape: the same float32 inputs for both; each implementation's result checked against
the float64 product on a sample of rows before any timing; one untimed warm-up each; then
``--rounds`` interleaved rounds (the order shuffled every round) with the medians compared as
GFLOP/s.  The kernel runs with the machine's default parameters
(``search_spaces.kernel.default_params``) and with every ``--variant`` (overrides of
:class:`search_spaces.kernel.KernelParams` fields).  The JSON record, with the command, the
load average before and after and the BLAS kernel NumPy uses, goes to
``<out>/gemm-kernel-<dtype>.json``.  The machine's float32 FMA peak is measured first
(``autotune.backends.cpu.probes.peak_flops``, the FMA chains `autotune calibrate` runs): peak / BLAS rate, recorded per shape
as ``peak_vs_blas``, is the most any kernel could gain over BLAS there.
"""
from __future__ import annotations

import autotune  # noqa: F401  (first: its thread settings precede NumPy's OpenBLAS)

import argparse
import ctypes
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# target ratio (kernel rate / BLAS rate) per named shape, from issue 14
TARGETS = {"2048x2048x2048": 0.9, "492804x640x128": 1.3}
DEFAULT_SHAPES = "2048x2048x2048,492804x640x128"


def blas_core() -> dict:
    """Which OpenBLAS NumPy loaded and which kernel it runs (its own word for the core)."""
    info: dict = {"OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
                  "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS")}
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as f:
            libs = sorted({l.split()[-1] for l in f if "openblas" in l.lower() and "/" in l})
    except OSError:
        libs = []
    info["library"] = libs[0] if libs else None
    for path in libs[:1]:
        lib = ctypes.CDLL(path)
        for sym in ("scipy_openblas_get_corename64_", "openblas_get_corename64_",
                    "openblas_get_corename", "scipy_openblas_get_config64_",
                    "openblas_get_config64_", "openblas_get_config"):
            fn = getattr(lib, sym, None)
            if fn is not None:
                fn.restype = ctypes.c_char_p
                key = "corename" if "corename" in sym else "config"
                info.setdefault(key, fn().decode())
    return info


def parse_shape(text: str) -> tuple[int, int, int, int]:
    """``MxNxK`` or ``BxMxNxK``."""
    parts = [int(x) for x in text.lower().split("x")]
    if len(parts) == 3:
        parts = [1] + parts
    if len(parts) != 4 or min(parts) < 1:
        raise SystemExit(f"bad shape {text!r}: want MxNxK or BxMxNxK")
    return tuple(parts)  # type: ignore[return-value]


def parse_variant(text: str) -> dict:
    out = {}
    for item in text.split(","):
        key, _, val = item.partition("=")
        out[key.strip()] = (val.lower() in ("1", "true", "on")
                            if key.strip().startswith(("pack", "stream"))
                            else val if key.strip() in ("split", "outer") else int(val))
    return out


def check(got, a, b, rows) -> float:
    """Largest error on the sampled rows, relative to the largest reference value there."""
    import numpy as np
    ref = np.matmul(a[:, rows].astype(np.float64), b.astype(np.float64))
    return float(np.abs(got[:, rows] - ref).max() / max(np.abs(ref).max(), 1e-30))


def c_buffer(shape, dtype, offset: int | None):
    """The kernel's C: NumPy's own allocation (``offset`` None: 16 bytes past a cache line
    here), else starting ``offset`` bytes past a line."""
    import numpy as np
    from autotune.backends.buffers import aligned_empty
    if offset is None:
        return np.empty(shape, dtype=dtype)
    size, skip = int(np.prod(shape)), offset // np.dtype(dtype).itemsize
    return aligned_empty(size + skip, dtype)[skip:].reshape(shape)


def bench_shape(shape, dtype, variants, rounds, seed, cache_dir, log,
                c_offsets: tuple = (None,)) -> dict:
    import numpy as np
    from search_spaces.kernel import KernelParams
    from autotune.backends.cpu.executor import load_gemm_kernel
    from autotune.backends.cpu.gemm_call import store_for
    from autotune.backends.cpu.gemm_kernel import KernelSpec
    nb, m, n, k = shape
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((nb, m, k), dtype=np.float32).astype(dtype, copy=False)
    b = rng.standard_normal((nb, k, n), dtype=np.float32).astype(dtype, copy=False)
    outs = {"blas": np.empty((nb, m, n), dtype=dtype)}
    calls = {"blas": (lambda: np.matmul(a[0], b[0], out=outs["blas"][0])) if nb == 1
             else (lambda: np.matmul(a, b, out=outs["blas"]))}
    params: dict[str, KernelParams] = {}
    for v, p in variants.items():
        for off in c_offsets:
            name = v if off is None else f"{v}@{off}"
            c = outs[name] = c_buffer((nb, m, n), dtype, off)
            kern = load_gemm_kernel(KernelSpec(p, dtype, store_for(c)), str(cache_dir))
            params[name] = p
            calls[name] = (lambda kern=kern, c=c: kern(a, b, c))
    rows = np.unique(rng.integers(0, m, size=min(m, 512)))
    errors = {}
    for name, fn in calls.items():
        fn()                                      # warm-up (page faults, threads, buffers)
        errors[name] = check(outs[name], a, b, rows)
    tol = 1e-5 if dtype == "float32" else 1e-12
    bad = {k_: e for k_, e in errors.items() if not e <= tol}
    if bad:
        raise SystemExit(f"{shape}: wrong results {bad}")
    times: dict[str, list[float]] = {name: [] for name in calls}
    order = list(calls)
    for r in range(rounds):
        rng.shuffle(order)
        for name in order:
            t0 = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - t0)
    flops = 2.0 * nb * m * n * k
    med = {name: float(np.median(t)) for name, t in times.items()}
    rate = {name: flops / s / 1e9 for name, s in med.items()}
    label = "x".join(str(x) for x in (shape if nb > 1 else shape[1:]))
    best = max(params, key=lambda v: rate[v])
    ratio = rate[best] / rate["blas"]
    target = TARGETS.get(label)
    log(f"{label}: BLAS {rate['blas']:.1f} GFLOP/s; " +
        ", ".join(f"{v} {rate[v]:.1f} ({rate[v] / rate['blas']:.2f}x)" for v in params) +
        (f"; target {target}x: {'met' if ratio >= target else 'NOT met'}" if target else ""))
    return {"shape": {"batch": nb, "m": m, "n": n, "k": k}, "label": label, "flops": flops,
            "seconds": times, "median_s": med, "gflops": rate, "max_rel_error": errors,
            "params": {v: p.to_dict() for v, p in params.items()}, "best_variant": best,
            "ratio_best_vs_blas": ratio, "target_ratio": target,
            "target_met": None if target is None else ratio >= target}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default=DEFAULT_SHAPES, help="comma-separated MxNxK or BxMxNxK")
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds")
    ap.add_argument("--variant", action="append", default=[],
                    help="kernel parameter overrides, e.g. mr=12,nr=32,kc=384,pack_a=0")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results"), help="JSON output folder")
    ap.add_argument("--c-offsets", default="",
                    help="bytes past a cache line the kernel's C starts at, e.g. 0,16: each "
                         "variant runs once per offset, named VARIANT@OFFSET (default: NumPy's "
                         "allocation)")
    args = ap.parse_args(argv)
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    try:
        offsets = tuple(int(x) for x in args.c_offsets.split(",")) if args.c_offsets else (None,)
    except ValueError:
        raise SystemExit(f"--c-offsets {args.c_offsets!r}: comma-separated byte counts, e.g. 0,16")
    if any(o is not None and (o < 0 or o % (4 if args.dtype == "float32" else 8))
           for o in offsets):
        raise SystemExit(f"--c-offsets {args.c_offsets!r}: each a non-negative multiple of the "
                         f"element size")
    import numpy as np
    from search_spaces.kernel import default_params, legalize
    from autotune.backends.cpu import probes
    from autotune.backends.cpu.machine import machine_bounds

    command = [sys.executable, *sys.argv] if argv is None else [sys.executable, __file__, *argv]
    item = np.dtype(args.dtype).itemsize
    bounds = machine_bounds()
    base = default_params(bounds, item)
    variants = {"default": base}
    for text in args.variant:
        variants[text] = legalize(replace(base, **parse_variant(text)), item)
    load_before = os.getloadavg()
    blas = blas_core()
    with tempfile.TemporaryDirectory(prefix="gemm-kernel-") as cache:
        # the machine's float32 FMA peak (calibrate's FMA chains): no kernel can pass it, so
        # peak / BLAS rate bounds the ratio any kernel can reach on a shape
        peak = probes.peak_flops(probes.load_probes(Path(cache)), 3, 20_000_000) / 1e9
        print(f"numpy {np.__version__}, BLAS {blas.get('corename')} ({blas.get('library')}), "
              f"OPENBLAS_CORETYPE={blas['OPENBLAS_CORETYPE']}; load {load_before[0]:.1f}; "
              f"float32 FMA peak {peak:.0f} GFLOP/s", flush=True)
        results = []
        for text in args.shapes.split(","):
            res = bench_shape(parse_shape(text), args.dtype, variants, args.rounds, args.seed,
                              Path(cache), lambda s: print(s, flush=True), offsets)
            res["peak_vs_blas"] = peak / res["gflops"]["blas"]
            results.append(res)
    load_after = os.getloadavg()
    rec = {"command": shlex.join(command), "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "dtype": args.dtype, "rounds": args.rounds, "statistic": "median of interleaved rounds",
           "load_average_before": load_before, "load_average_after": load_after,
           "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
           "numpy": np.__version__, "blas": blas, "machine_bounds": bounds.to_dict(),
           "float32_fma_peak_gflops": peak,
           "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "results": results}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"gemm-kernel-{args.dtype}.json"
    path.write_text(json.dumps(rec, indent=2) + "\n")
    print(f"load {load_after[0]:.1f} after; wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
