"""python kv.py WORKLOAD BASE.json ANCHOR ROUNDS 'k=v,k=v' 'k=v' ...  (kernel param variants of one group, interleaved)"""
import sys, json, tempfile, os
import autotune  # noqa
import numpy as np
from search_spaces.loader import load_workload
from search_spaces.candidate import Candidate
from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.reference import reference
name, base, anchor, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
w = load_workload(name, {k: int(v) for k, v in (kv.split('=') for kv in os.environ.get('DIMS', '').split(',') if kv)} or None)
inputs = w.random_inputs(1); ref = reference(w, inputs)
bd = json.load(open(base))
exes = {}
for var in ["base"] + sys.argv[5:]:
    d = json.loads(json.dumps(bd))
    if var != "base":
        for s in d["schedules"]:
            if s["anchor"] == anchor:
                for kv in var.split(','):
                    k, v = kv.split('=')
                    s["kernel"][k] = (v == "1") if k in ("pack_a", "pack_b", "stream") else (int(v) if v.lstrip('-').isdigit() else v)
    c = Candidate.from_dict(d)
    ex = make_executable(w, c, "cpu", tempfile.mkdtemp())
    err, why = verify(ex(**inputs), ref, w.rtol); assert not why, (var, why)
    exes[var] = ex
grp = {n: [] for n in exes}; tot = {n: [] for n in exes}
order = list(exes)
for r in range(rounds):
    for n in (order if r % 2 == 0 else order[::-1]):
        _, ts = exes[n].timed_call(inputs, warmup=1, repeats=5)
        tot[n].append(float(np.median(ts)))
        for k, s in exes[n].group_seconds().items():
            if (getattr(k, 'anchor', k)) == anchor or str(k) == anchor: grp[n].append(s)
for n in exes:
    print(f"{n:40s} total {np.median(tot[n])*1e3:7.3f} ms  {anchor} {np.median(grp[n])*1e6:7.0f} us  (min {min(grp[n])*1e6:.0f})")
