"""python spin.py WORKLOAD cand.json REPS -> median ms and per-group medians (env decides spin)"""
import sys, json, tempfile, os
import autotune  # noqa
import numpy as np
from search_spaces.loader import load_workload
from search_spaces.candidate import Candidate
from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.reference import reference
w = load_workload(sys.argv[1], None)
inputs = w.random_inputs(1); ref = reference(w, inputs)
c = Candidate.from_dict(json.load(open(sys.argv[2])))
ex = make_executable(w, c, "cpu", os.environ.get("KDIR", "/work/scratch/s57/kd"))
err, why = verify(ex(**inputs), ref, w.rtol); assert not why, why
ts = []
for r in range(int(sys.argv[3])):
    _, t = ex.timed_call(inputs, warmup=1, repeats=5); ts.append(float(np.median(t)))
g = {k: round(v*1e6) for k, v in ex.group_seconds().items()}
print(os.environ.get("GOMP_SPINCOUNT"), f"{np.median(ts)*1e3:.3f}", g)
