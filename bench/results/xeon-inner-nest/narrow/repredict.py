import json, sys
import autotune  # noqa
import numpy as np
import costmodel
from search_spaces.loader import load_workload
from search_spaces.candidate import GroupSchedule, make_candidate
from autotune.cli.tools import _cost_model_device
spec = _cost_model_device("cpu")
def spearman(a, b):
    ra = np.argsort(np.argsort(a)); rb = np.argsort(np.argsort(b)); return np.corrcoef(ra, rb)[0, 1]
P, M = [], []
for f, anchor in (("tr", "r"), ("cp", "y")):
    w = load_workload(f + ".toml"); rows = json.load(open(f + ".json"))
    p = []; m = []
    for row in rows:
        t = tuple(row["tiles"])
        est = costmodel.estimate(w, make_candidate([], {}, [GroupSchedule(anchor, t)], "n"), spec)
        p.append(est.total_s); m.append(row["median_s"])
    print(f, "rho", round(spearman(np.array(p), np.array(m)), 3), "mlog", round(float(np.median(np.abs(np.log(np.array(p) / np.array(m))))), 3))
    P += p; M += m
print("all rho", round(spearman(np.array(P), np.array(M)), 3), "mlog", round(float(np.median(np.abs(np.log(np.array(P) / np.array(M))))), 3))
