"""Kernel parameter variants on one shape, one process, interleaved: kernel_variants.py BxMxNxK [ta] [tb] [rounds=N] var1 var2 ..."""
import autotune, sys, time
import numpy as np
from dataclasses import replace
import autotune.backends.cpu.gemm_kernel as gk
from autotune.backends.cpu.compiler import load_gemm_kernel
from autotune.backends.cpu.gemm_call import store_for
from autotune.backends.cpu.machine import machine_bounds
from search_spaces.kernel import default_params
args = sys.argv[1:]
nb, m, n, k = (int(x) for x in args.pop(0).split("x"))
ta = "ta" in args; tb = "tb" in args; args = [a for a in args if a not in ("ta", "tb")]
rounds = 11
for a in list(args):
    if a.startswith("rounds="): rounds = int(a[7:]); args.remove(a)
base = default_params(machine_bounds(), 4)
def parse(text):
    p = base
    for kv in text.split(","):
        key, v = kv.split("=")
        v = (v in ("1", "true")) if key.startswith(("pack", "stream")) else v if key in ("split", "outer") else int(v)
        p = replace(p, **{key: v})
    return p
rng = np.random.default_rng(0)
a = (np.ascontiguousarray(rng.standard_normal((nb, k, m), dtype=np.float32)).transpose(0, 2, 1) if ta
     else rng.standard_normal((nb, m, k), dtype=np.float32))
b = (np.ascontiguousarray(rng.standard_normal((nb, n, k), dtype=np.float32)).transpose(0, 2, 1) if tb
     else rng.standard_normal((nb, k, n), dtype=np.float32))
ref = np.matmul(a[:2].astype(np.float64), b[:2].astype(np.float64))
calls = {}
for text in args:
    c = np.empty((nb, m, n), np.float32)
    kern = load_gemm_kernel(gk.KernelSpec(parse(text), "float32", store_for(c)), "/tmp/s27k")
    kern(a, b, c)
    assert np.abs(c[:2] - ref).max() < 1e-3 * np.abs(ref).max(), text
    calls[text] = (lambda kern=kern, c=c: kern(a, b, c))
t = {x: [] for x in calls}
order = list(calls)
for r in range(rounds):
    rng.shuffle(order)
    for x in order:
        t0 = time.perf_counter(); calls[x](); t[x].append(time.perf_counter() - t0)
fl = 2 * nb * m * n * k
for x, v in t.items():
    print(f"{fl / np.median(v) / 1e9:6.0f} GF/s {np.median(v) * 1e3:9.3f} ms (min {min(v) * 1e3:.3f})  {x}")
