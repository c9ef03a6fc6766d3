"""B's micro-panels packed on demand by whichever thread needs one first (gemm_sync.lazy_source):
with more threads than cores (so that threads arrive late, wait on a panel another is packing,
and pack panels out of order), over many column blocks and K slices, both ways of buffering the
slices, and calls one after another with new operands in the same buffers (a panel packed for an
earlier call must never pass for this one's)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

SCRIPT = textwrap.dedent("""
    import autotune  # noqa: F401  (its thread settings first)
    import sys
    from dataclasses import replace
    import numpy as np
    from search_spaces.kernel import OUTER_A, KernelParams
    from autotune.backends.cpu.executor import load_gemm_kernel
    from autotune.backends.cpu.gemm_call import store_for
    from autotune.backends.cpu.gemm_kernel import KernelSpec
    from autotune.backends.cpu.machine import machine_bounds

    kdir, dtype = sys.argv[1], sys.argv[2]
    lanes = machine_bounds().vec_bytes[0] // np.dtype(dtype).itemsize
    base = KernelParams(mr=6, nr=2 * lanes, mc=12, kc=16, nc=4 * lanes,
                        vec_bytes=machine_bounds().vec_bytes[0])
    rng = np.random.default_rng(0)
    checked = 0
    for params in (base, replace(base, outer=OUTER_A), replace(base, kc=512)):
        for nb, m, n, k in ((1, 61, 9 * lanes + 3, 70), (2, 37, 5 * lanes, 33), (1, 5, 7 * lanes, 40),
                            (1, 200, 3 * lanes + 1, 150),
                            (1, 9, 4 * lanes + 5, 17000)):   # K slices past PACK_ALL_BYTES
            c = np.full((nb, m, n), np.nan, dtype)
            kern = load_gemm_kernel(KernelSpec(params, dtype, store_for(c)), kdir)
            for call in range(4):        # new operands every call, the same packing buffers
                a = rng.standard_normal((nb, m, k)).astype(dtype)
                b = rng.standard_normal((nb, k, n)).astype(dtype)
                kern(a, b, c)
                want = np.matmul(a.astype(np.float64), b.astype(np.float64))
                tol = (3e-6 if dtype == "float32" else 1e-13) * np.sqrt(k) * 4
                err = np.abs(c - want).max() / max(1.0, np.abs(want).max())
                if not err <= tol:
                    sys.exit(f"{params} {(nb, m, n, k)} call {call}: error {err:.2e} > {tol:.1e}")
                checked += 1
    print("checked", checked)
""")


@pytest.mark.parametrize("threads", [3, 4])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_panels_packed_on_demand_are_right_with_late_and_extra_threads(tmp_path, threads, dtype):
    env = {**os.environ, "OMP_NUM_THREADS": str(threads),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), dtype], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "checked 60" in proc.stdout


def test_the_shared_path_packs_on_demand_and_waits_once_a_slice():
    """The source: no packing pass before the compute in the shared item, one barrier a slice
    (or a column block) after it; the serial item packs its own slice first."""
    import numpy as np
    from search_spaces.kernel import default_params
    from autotune.backends.cpu.gemm_call import store_for
    from autotune.backends.cpu.gemm_driver import kernel_source
    from autotune.backends.cpu.gemm_kernel import KernelSpec
    from autotune.backends.cpu.machine import machine_bounds
    spec = KernelSpec(default_params(machine_bounds(), 4), "float32",
                      store_for(np.empty((1, 8, 8), np.float32)))
    src = kernel_source(spec)
    shared = src[src.index("static void item_shared("):src.index("void gemm_kernel(")]
    serial = src[src.index("static void item_serial("):src.index("static void item_shared(")]
    assert "pack_b(" not in shared and "lbp" in shared and shared.count("at_barrier();") == 2
    assert "pack_b(" in serial and "at_barrier" not in serial
    assert "at_need(lb, col0 + jr)" in src
