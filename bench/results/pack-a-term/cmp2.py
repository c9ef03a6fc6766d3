"""The A-packing term on and off, on the candidates model-check measured: cmp2.py DB..."""
import autotune  # noqa: F401
import json
import sqlite3
import sys
import numpy as np
from search_spaces import load_workload
from search_spaces.candidate import Candidate
from autotune.backends.cpu.calibrate import load_cpu_spec
import costmodel.kernel_cost as kc
import costmodel.model as model
from costmodel.model import estimate
w = load_workload(sys.argv[1], {})
dev = load_cpu_spec()
def rho(a, b):
    ra = np.argsort(np.argsort(a)); rb = np.argsort(np.argsort(b)); return np.corrcoef(ra, rb)[0, 1]
for f in sys.argv[2:]:
    c = sqlite3.connect(f)
    cands = [(Candidate.from_dict(json.loads(cj)), m) for cj, m in
             c.execute("select candidate_json, measured_s from trials where measured_s is not null")]
    meas = np.array([m for _, m in cands])
    for v in (0.0, 0.2e-9):
        kc.PACK_A_S = v
        model._MEMO = model.GroupMemo()
        pred = np.array([estimate(w, cd, dev).total_s for cd, _ in cands])
        print(f, len(cands), f"PACK_A_S {v:g}", f"rho {rho(pred, meas):.3f} regret {meas[np.argmin(pred)] / meas.min() - 1:.3f} mal {np.median(np.abs(np.log(pred / meas))):.3f}")
