#!/usr/bin/env python
"""cuBLAS rates for the shapes the triangle update's plans run, by precision and alignment
(one process, device-resident buffers, CUDA events, median of 7 after 2 warm-ups).

    python bench/gpu_gemm_shapes.py --out $OUT        # on the GPU machine

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

from autotune.backends.cuda.gemm import GemmCall  # noqa: E402
from autotune.backends.cuda.runtime import CupyRuntime  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    rt = CupyRuntime()
    cp = rt.cupy
    rows: list[dict] = []
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
        path.write_text(json.dumps({"device": cp.cuda.runtime.getDeviceProperties(0)[
            "name"].decode(), "rows": rows}, indent=2) + "\n")

    # ---- the triangle einsum: batch 128 of (702 x 702) @ (702 x 702)^T --------------------------
    B, n = 128, 702
    flops = 2.0 * B * n * n * n
    for ld in (702, 704):
        x = cp.random.standard_normal(B * ld * n, dtype=cp.float32)
        y = cp.random.standard_normal(B * ld * n, dtype=cp.float32)
        for ldc in (702, 704):
            c = cp.empty(B * ldc * n, dtype=cp.float32)
            for ta, tb in (("N", "T"), ("T", "N")):
                call = GemmCall("A", "B", ta, tb, n, n, n, ld, ld, ldc, ld * n, ld * n,
                                ldc * n, B)
                for prec in ("fp32", "tf32"):
                    try:
                        s = timed(lambda: rt.gemm(call, x, y, c, 1.0, prec))
                        record(case=f"einsum {prec} ld={ld} ldc={ldc} {ta}{tb}", seconds=s,
                               flops=flops)
                    except Exception as e:
                        print(f"einsum {prec} ld={ld} {ta}{tb}: {type(e).__name__}: {e}")
                try:
                    def three():
                        (xh, xl), (yh, yl) = rt.split_tf32(x), rt.split_tf32(y)
                        rt.gemm(call, xl, yh, c, 1.0, "tf32")
                        rt.gemm(call, xh, yl, c, 1.0, "tf32", beta=1.0)
                        rt.gemm(call, xh, yh, c, 1.0, "tf32", beta=1.0)
                    record(case=f"einsum 3xtf32 ld={ld} ldc={ldc} {ta}{tb}",
                           seconds=timed(three), flops=flops)
                except Exception as e:
                    print(f"einsum 3xtf32 ld={ld}: {type(e).__name__}: {e}")
        record(case=f"split of one {B}x{n}x{ld} operand",
               seconds=timed(lambda: rt.split_tf32(x)))
        del x, y, c

    # ---- the projections: (N^2 x 128) @ (128 x width), row-major, as C^T = W^T X^T ---------------
    M, K = n * n, 128
    x = cp.random.standard_normal(M * K, dtype=cp.float32)
    for width in (128, 256, 512, 640):
        w = cp.random.standard_normal(K * width, dtype=cp.float32)
        c = cp.empty(M * width, dtype=cp.float32)
        call = GemmCall("B", "A", "N", "N", width, M, K, width, K, width, 0, 0, 0, 1)
        for prec in ("fp32", "tf32"):
            try:
                record(case=f"projection {prec} 492804x128 @ 128x{width}",
                       seconds=timed(lambda: rt.gemm(call, w, x, c, 1.0, prec)),
                       flops=2.0 * M * K * width)
            except Exception as e:
                print(f"projection {prec} {width}: {type(e).__name__}: {e}")
    record(case="split of the 492804x128 input", seconds=timed(lambda: rt.split_tf32(x)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
