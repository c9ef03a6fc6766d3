#!/usr/bin/env python
"""The generated tensor-core kernel's rates (autotune.backends.cuda.mma_kernel) at the shapes
of the triangle update, by precision and tiling: what calibrates the cost model's
mma_share (costmodel/mma_cost.py) against cuBLAS's rates (bench/gpu_gemm_shapes.py).
One process, device-resident inputs, CUDA events, median of the repeats after a warm-up.

    python bench/gpu_mma_shapes.py --out $OUT              # on the GPU machine
    python bench/gpu_mma_shapes.py --emulate --out /tmp/r  # the flow on a CPU, tiny shapes

Cases: the triangle einsum t[i,j,c] = sum_k a[i,k,c] b[j,k,c] (batch C of N x N x N), a K=128
projection p[r,c] = sum_d x[r,d] w[d,c] (N^2 rows) and the gated pair a = sigmoid(x wg) * (x wp)
in one kernel, each in 3xTF32 and TF32 over a few block and warp tiles.  Written as it goes to
<out>/gpu_mma_shapes.json (each row: the case, seconds, flops, TFLOP/s and the parameters).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import autotune  # noqa: E402,F401  (before NumPy: the thread runtimes' settings)

from autotune.backends.cuda.executor import CudaPlan  # noqa: E402
from autotune.backends.cuda.kind import CudaBackendKind  # noqa: E402
from search_spaces import parse_workload  # noqa: E402
from search_spaces.candidate import make_candidate  # noqa: E402
from search_spaces.kernel import GPU_VEC_BYTES, KernelParams  # noqa: E402
from search_spaces.space import SearchSpace  # noqa: E402

BLOCKS = '''name = "NAME"
summary = "a shape of the triangle update for the kernel's rates"
dtype = "float32"
outputs = ["OUT"]
program = """
PROGRAM
"""
[dims]
DIMS
[inputs]
INPUTS
[tolerance]
rtol = 1e-4
'''
CASES = {
    "einsum": ("t", "t[i,j,c] += a[i,k,c] * b[j,k,c]", 'a = ["N", "N", "C"]\nb = ["N", "N", "C"]',
               lambda N, C: 2.0 * C * N ** 3),
    "projection": ("p", "p[i,j,c] += x[i,j,d] * w[d,c]", 'x = ["N", "N", "C"]\nw = ["C", "C"]',
                   lambda N, C: 2.0 * N * N * C * C),
    "pair": ("a", "g[i,j,c] += x[i,j,d] * wg[d,c]\np[i,j,c] += x[i,j,d] * wp[d,c]\n"
             "a[i,j,c] = sigmoid(g[i,j,c]) * p[i,j,c]",
             'x = ["N", "N", "C"]\nwg = ["C", "C"]\nwp = ["C", "C"]',
             lambda N, C: 4.0 * N * N * C * C),
}
# (warp tile, block tile, K slice): the space's default first
TILINGS = [((32, 64), (64, 128), 32), ((64, 64), (128, 128), 32), ((32, 32), (64, 64), 32),
           ((64, 32), (128, 64), 16)]


def workload(case: str, N: int, C: int):
    out, program, inputs, _ = CASES[case]
    text = (BLOCKS.replace("NAME", f"mma_{case}").replace("OUT", out)
            .replace("PROGRAM", program).replace("DIMS", f"N = {N}\nC = {C}")
            .replace("INPUTS", inputs))
    return parse_workload(text, f"mma_{case}.toml")


def kernel_candidate(w, precision: str, tiling):
    """Every contraction of ``w`` on the kernel, every fusion taken, with this tiling."""
    space = SearchSpace(w, CudaBackendKind().tile_bounds)
    base = space.build(lambda q, o: "kernel" if q.startswith("impl:") else
                       1 if q.split(":")[0] in ("fuse", "pair") else o[0])
    (mr, nr), (mc, nc), kc = tiling
    params = KernelParams(mr, nr, mc, kc, nc, vec_bytes=GPU_VEC_BYTES)
    scheds = tuple(replace(s, precision=precision, kernel=params) if s.impl == "kernel" else s
                   for s in base.schedules)
    return make_candidate(base.fused, dict(base.layouts), scheds)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--emulate", action="store_true",
                    help="the host emulator and tiny shapes instead of a GPU (a dry run)")
    args = ap.parse_args()
    if args.emulate:
        from autotune.backends.cuda.emulator import HostEmulator
        rt, N, C = HostEmulator(threads=2), 12, 2
        args.reps = 1             # the flow, not the figures: the emulated warp is slow
    else:
        from autotune.backends.cuda.runtime import CupyRuntime
        rt, N, C = CupyRuntime(), 702, 128
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "gpu_mma_shapes.json"
    rows: list[dict] = []
    cache = Path(tempfile.mkdtemp(prefix="mma-shapes-"))
    for case in CASES:
        w = workload(case, N, C)
        dev = None
        for prec in ("3xtf32", "tf32"):
            tilings = TILINGS if prec == "3xtf32" else TILINGS[:2]
            for tiling in (tilings[:1] if args.emulate else tilings):
                try:
                    plan = CudaPlan(w, kernel_candidate(w, prec, tiling), cache, runtime=rt)
                    if dev is None:
                        dev = plan.upload(w.random_inputs(seed=1))
                    _, times = plan.timed_call(dev, warmup=1, repeats=args.reps)
                    s = statistics.median(times)
                    flops = CASES[case][3](N, C)
                    k = [x for x in plan.kernels.values() if x.whole_warps]
                    rows.append({"case": case, "precision": prec, "seconds": s, "flops": flops,
                                 "tflops": flops / s / 1e12, "warp_tile": tiling[0],
                                 "block_tile": tiling[1], "kc": tiling[2],
                                 "kernels": [x.to_dict() for x in k],
                                 "attributes": [plan.kernel_attrs.get(x.name, {}) for x in k]})
                    print(f"{case:<11} {prec:<7} warp {tiling[0]} block {tiling[1]} kc "
                          f"{tiling[2]:<3} {s * 1e3:9.3f} ms {flops / s / 1e12:7.1f} TFLOP/s",
                          flush=True)
                except Exception as e:
                    print(f"{case} {prec} {tiling}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0][:200]}", flush=True)
                    rows.append({"case": case, "precision": prec, "error": str(e)[:500],
                                 "warp_tile": tiling[0], "block_tile": tiling[1]})
                path.write_text(json.dumps({"device": rt.device_name, "emulated": args.emulate,
                                            "N": N, "C": C, "rows": rows}, indent=2) + "\n")
    return 0 if rows and all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
