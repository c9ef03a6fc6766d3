#!/usr/bin/env python
"""cuBLAS rates for the shapes the triangle update's plans run, by precision and alignment
(one process, device-resident buffers, CUDA events, median of 7 after 2 warm-ups).

    python bench/gpu_gemm_shapes.py --out $OUT        # on the GPU machine
    python bench/gpu_gemm_shapes.py --emulate --out /tmp/r   # the flow on a CPU, tiny shapes

Cases: the triangle einsum (batch 128 of 702 x 702 x 702) in FP32, TF32 and the 3xTF32 split
(split kernel + three TF32 products), with leading dimensions 702 (what the plans pass: rows of
2808 bytes, not a multiple of 16) and 704 (padded to 16 bytes); the K=128 projections
(492,804 x 128 x 128) alone and stacked five wide (N=640) in FP32 and TF32.  Written as it goes
to <out>/gpu_gemm_shapes.json.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import autotune  # noqa: E402,F401  (before NumPy: the thread runtimes' settings)
import numpy as np  # noqa: E402

from autotune.backends.cuda.gemm import run_gemm  # noqa: E402
from autotune.backends.cuda.gemm import GemmCall  # noqa: E402
from autotune.backends.cuda.runtime import CupyRuntime  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--emulate", action="store_true",
                    help="the host emulator and tiny shapes instead of a GPU (a dry run)")
    args = ap.parse_args()
    if args.emulate:
        from autotune.backends.cuda.emulator import HostEmulator
        rt, B, n, M = HostEmulator(threads=2), 2, 30, 900
    else:
        rt, B, n, M = CupyRuntime(), 128, 702, 702 * 702
    xp = rt.xp
    rows: list[dict] = []
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / "gpu_gemm_shapes.json"

    def timed(fn) -> float:
        for _ in range(2):
            fn()
        ts = []
        for _ in range(args.reps):
            with rt.timer() as t:
                fn()
            ts.append(t.seconds)
        return statistics.median(ts)

    def record(**r):
        rows.append(r)
        flops = r.get("flops")
        rate = f"  {flops / r['seconds'] / 1e12:6.1f} TFLOP/s" if flops else ""
        print(f"{r['case']:<44} {r['seconds'] * 1e3:8.3f} ms{rate}", flush=True)
        path.write_text(json.dumps({"device": rt.device_name, "emulated": args.emulate,
                                    "rows": rows}, indent=2) + "\n")

    def normal(size):
        return xp.random.standard_normal(size).astype(np.float32)

    # ---- the triangle einsum: batch 128 of (702 x 702) @ (702 x 702)^T --------------------------
    flops = 2.0 * B * n * n * n
    for ld in (n, n + 2):
        x, y = normal(B * ld * n), normal(B * ld * n)
        for ldc in (n, n + 2):
            c = xp.empty(B * ldc * n, dtype=np.float32)
            for ta, tb in (("N", "T"), ("T", "N")):
                call = GemmCall("A", "B", ta, tb, n, n, n, ld, ld, ldc, ld * n, ld * n,
                                ldc * n, B)
                for prec in ("fp32", "tf32", "3xtf32"):   # 3xtf32: the plans' split path
                    try:
                        s = timed(lambda: run_gemm(rt, call, x, y, c, 1.0, prec))
                        record(case=f"einsum {prec} ld={ld} ldc={ldc} {ta}{tb}", seconds=s,
                               flops=flops)
                    except Exception as e:
                        print(f"einsum {prec} ld={ld} {ta}{tb}: {type(e).__name__}: {e}")
        record(case=f"split of one {B}x{n}x{ld} operand",
               seconds=timed(lambda: rt.split_tf32(x)))

    # ---- the projections: (N^2 x 128) @ (128 x width), row-major, as C^T = W^T X^T ---------------
    K = 128
    x = normal(M * K)
    for width in (128, 256, 512, 640):
        w = normal(K * width)
        c = xp.empty(M * width, dtype=np.float32)
        call = GemmCall("B", "A", "N", "N", width, M, K, width, K, width, 0, 0, 0, 1)
        for prec in ("fp32", "tf32"):
            try:
                record(case=f"projection {prec} {M}x128 @ 128x{width}",
                       seconds=timed(lambda: rt.gemm(call, w, x, c, 1.0, prec)),
                       flops=2.0 * M * K * width)
            except Exception as e:
                print(f"projection {prec} {width}: {type(e).__name__}: {e}")
    record(case=f"split of the {M}x128 input", seconds=timed(lambda: rt.split_tf32(x)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
