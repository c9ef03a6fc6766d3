"""python ab.py WORKLOAD ROUNDS OUT.json name=cand.json ...   (interleaved, verified)"""
import sys, json, tempfile
import autotune  # noqa
import numpy as np
from search_spaces.loader import load_workload
from search_spaces.candidate import Candidate
from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.reference import reference
import costmodel
from autotune.cli.tools import _cost_model_device
import os
name, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
w = load_workload(name, {k: int(v) for k, v in (kv.split('=') for kv in os.environ.get('DIMS', '').split(',') if kv)} or None)
spec = _cost_model_device("cpu")
inputs = w.random_inputs(1); ref = reference(w, inputs)
exes = {}
for arg in sys.argv[4:]:
    n, f = arg.split('=', 1)
    c = Candidate.from_dict(json.load(open(f)))
    ex = make_executable(w, c, "cpu", tempfile.mkdtemp())
    err, why = verify(ex(**inputs), ref, w.rtol); assert not why, (n, why)
    exes[n] = (c, ex, costmodel.estimate(w, c, spec))
tot = {n: [] for n in exes}; grp = {n: {} for n in exes}
order = list(exes)
for r in range(rounds):
    for n in (order if r % 2 == 0 else order[::-1]):
        _, ts = exes[n][1].timed_call(inputs, warmup=1, repeats=5)
        tot[n].append(float(np.median(ts)))
        for k, s in exes[n][1].group_seconds().items(): grp[n].setdefault(k, []).append(s)
res = []
for n in exes:
    g = {k: round(float(np.median(v)) * 1e6) for k, v in grp[n].items()}
    pg = {k.anchor if hasattr(k, 'anchor') else str(k): v for k, v in getattr(exes[n][2], 'groups', {}).items()} if False else {}
    print(f"{n:12s} {np.median(tot[n])*1e3:8.3f} ms  pred {exes[n][2].total_s*1e3:7.3f}  {g}")
    res.append(dict(name=n, candidate=exes[n][0].to_dict(), total=float(np.median(tot[n])), rounds=tot[n], groups=g))
json.dump(res, open(out, 'w'), indent=1)
