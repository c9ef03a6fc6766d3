"""MICRO_CALL_S on and off over the measured trials of search databases: rank_check.py WORKLOAD DB... (Spearman rho, top-1 regret, median |log error|, median log bias)"""
import autotune  # noqa: F401
import json, sqlite3, sys
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
    c = sqlite3.connect(f"file:{f}?mode=ro", uri=True)
    rows = c.execute("select candidate_json, measured_s from trials where measured_s is not null and study not like '%confirm%'").fetchall()
    best = {}
    for cj, m in rows:
        cd = Candidate.from_dict(json.loads(cj))
        best[cd.key] = (cd, min(m, best.get(cd.key, (None, 9e9))[1]))
    cands = list(best.values())
    meas = np.array([m for _, m in cands])
    for v in (0.0, 25e-9, 50e-9, 100e-9):
        kc.MICRO_CALL_S = v
        model._MEMO = model.GroupMemo()
        pred = np.array([estimate(w, cd, dev).total_s for cd, _ in cands])
        print(f.split("/")[-2], len(cands), f"MICRO {v*1e9:3.0f}ns", f"rho {rho(pred, meas):.3f} regret {meas[np.argmin(pred)] / meas.min() - 1:.3f} mal {np.median(np.abs(np.log(pred / meas))):.3f} bias {np.median(np.log(pred / meas)):+.3f}")
