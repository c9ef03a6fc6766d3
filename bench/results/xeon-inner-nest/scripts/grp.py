"""Time one group of a sampled candidate: python grp.py CODE_ROOT WORKLOAD INDEX ANCHOR"""
import sys, tempfile
sys.path.insert(0, sys.argv[1])
import autotune  # noqa
import numpy as np
from search_spaces.loader import load_workload
from search_spaces.space import SearchSpace
from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.reference import reference
import os
dims = dict(kv.split('=') for kv in os.environ.get('DIMS','').split(',') if kv)
w = load_workload(sys.argv[2], {k: int(v) for k, v in dims.items()} or None); idx = int(sys.argv[3]); anchor = sys.argv[4]
sp = SearchSpace(w); rng = np.random.default_rng(0)
for k in range(idx + 1):
    c = sp.random(rng)
inputs = w.random_inputs(1)
ex = make_executable(w, c, "cpu", tempfile.mkdtemp())
out = ex(**inputs)
err, why = verify(out, reference(w, inputs), w.rtol)
assert not why, why
best = []
for r in range(5):
    ex.timed_call(inputs, warmup=1, repeats=5)
    best.append(ex.group_seconds()[anchor])
print(f"{sys.argv[1].split('/')[-1]:5s} {w.name}|{idx}|{anchor} group {np.median(best)*1e3:.3f} ms (min {min(best)*1e3:.3f}) err {err:.1e}")
