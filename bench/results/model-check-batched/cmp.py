"""Both BATCHED_SMALL ramps on the candidates model-check measured: cmp.py DB..."""
import autotune  # noqa: F401  (first: its thread settings precede NumPy)
import json
import sys
import numpy as np
from search_spaces import load_workload
from search_spaces.candidate import Candidate
from autotune.backends.cpu.calibrate import load_cpu_spec
import costmodel.rates as rates
from costmodel.model import estimate
w = load_workload("attention", {})
dev = load_cpu_spec()
def rho(a, b):
    ra = np.argsort(np.argsort(a)); rb = np.argsort(np.argsort(b)); return np.corrcoef(ra, rb)[0, 1]
for f in sys.argv[1:]:      # model-check's --db files: the candidates and their medians
    import sqlite3
    c = sqlite3.connect(f)
    cands = [(Candidate.from_dict(json.loads(cjs)), m) for cjs, m in
             c.execute("select candidate_json, measured_s from trials where measured_s is not null")]
    meas = np.array([m for _, m in cands])
    for ramp in ((64, 512), (64, 128)):
        rates.BATCHED_SMALL = ramp
        pred = np.array([estimate(w, cd, dev).total_s for cd, _ in cands])
        best = meas[np.argmin(pred)]
        print(f, len(cands), ramp, f"rho {rho(pred, meas):.3f} regret {best / meas.min() - 1:.3f} mal {np.median(np.abs(np.log(pred / meas))):.3f}")
