"""Staging.copy of a (128,128,32,32) float32 tensor stored in each layout, into the row-major
(i, j, e, f) matrix: seconds and the factor over a plain copy at the calibrated bandwidth."""
import autotune  # noqa
import itertools, json, sys, time
import numpy as np
from autotune.backends.cpu.staging import Staging
from autotune.backends.factory import backend_kind, resolve
from search_spaces.footprint import strides
env = resolve("cpu"); dev = backend_kind(env.kind).device_spec(env)
shape = tuple(int(x) for x in sys.argv[1].split(",")) if len(sys.argv) > 1 else (128, 128, 32, 32)
st = Staging()
def run_len(shape, perm):
    sd = strides(shape, perm); r = 1
    for ax in reversed(range(len(shape))):
        if sd[ax] != r: break
        r *= shape[ax]
    return r
rows = []
perms = list(itertools.permutations(range(len(shape))))
store = {}
for perm in perms:
    stored = np.random.rand(*[shape[p] for p in perm]).astype(np.float32)
    inv = np.argsort(perm)
    store[perm] = stored.transpose(inv)       # logical (i,j,e,f) view of storage in perm order
dst = np.empty(shape, np.float32)
times = {p: [] for p in perms}
for rnd in range(5):
    for p in (perms if rnd % 2 else perms[::-1]):
        t0 = time.perf_counter(); st.copy(dst, store[p]); times[p].append(time.perf_counter() - t0)
nbytes = dst.nbytes
for p in perms:
    s = float(np.median(times[p]))
    rows.append({"perm": p, "run": run_len(shape, p), "s": s, "factor": s * dev.bandwidth / (2 * nbytes)})
for r in sorted(rows, key=lambda r: (r["run"], r["s"])):
    print(r["perm"], "run", r["run"], "%.2f ms" % (r["s"] * 1e3), "factor %.2f" % r["factor"])
json.dump({"shape": shape, "bandwidth": dev.bandwidth, "transpose_copy": dev.access.transpose_copy, "rows": rows}, open(sys.argv[2] if len(sys.argv) > 2 else "copy.json", "w"), indent=1)
