"""A/B of the kernel's WIDE_PRAGMA: python abk.py WORKLOAD N_RANDOM ROUNDS OUT.json (DIMS env)
candidates: seed plans with a kernel group within 3x the best seed's prediction, plus random ones with kernel groups"""
import sys, json, tempfile, os
import autotune  # noqa
import numpy as np
import autotune.backends.cpu.gemm_driver as gd
from search_spaces.loader import load_workload
from search_spaces.space import SearchSpace
from search_spaces.plans import seed_plans
from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.reference import reference
import costmodel
from autotune.cli.tools import _cost_model_device
name, n_rand, rounds, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
w = load_workload(name, {k: int(v) for k, v in (kv.split('=') for kv in os.environ.get('DIMS', '').split(',') if kv)} or None)
sp = SearchSpace(w); spec = _cost_model_device("cpu")
haskern = lambda c: any(s.impl == "kernel" and s.kernel is not None and s.kernel.vec_bytes >= 64 for s in c.schedules)
import sqlite3, statistics
from search_spaces.candidate import Candidate
con = sqlite3.connect(os.environ.get('DB', '/work/scratch/s55/all/db.sqlite'))
rows = [(statistics.median(json.loads(t)), cj) for cj, t in con.execute(
    "select candidate_json, times_json from trials where status='ok' and workload_hash like ?", (w.hash[:16] + '%',))]
rows.sort()
uniq, seen = [], set()
for t, cj in rows:
    c = Candidate.from_dict(json.loads(cj))
    if haskern(c) and c.key not in seen:
        seen.add(c.key); uniq.append((f"top{len(uniq)}", c))
    if len(uniq) >= n_rand: break
inputs = w.random_inputs(1); ref = reference(w, inputs)
WIDE = gd.WIDE_PRAGMA
res = []
for n, c in uniq:
    exes = {}
    for v, prag in (("256", ""), ("512", WIDE)):
        gd.WIDE_PRAGMA = prag
        ex = make_executable(w, c, "cpu", tempfile.mkdtemp())
        err, why = verify(ex(**inputs), ref, w.rtol); assert not why, (n, v, why)
        exes[v] = ex
    gd.WIDE_PRAGMA = WIDE
    tot = {v: [] for v in exes}; grp = {v: {} for v in exes}
    for r in range(rounds):
        for v, ex in (exes.items() if r % 2 == 0 else reversed(list(exes.items()))):
            _, ts = ex.timed_call(inputs, warmup=1, repeats=3)
            tot[v].append(float(np.median(ts)))
            for k, s in ex.group_seconds().items(): grp[v].setdefault(k, []).append(s)
    kg = [s.anchor for s in c.schedules if s.impl == "kernel"]
    row = dict(name=n, key=c.key, candidate=c.to_dict(), kernel_groups=kg,
               total={v: float(np.median(x)) for v, x in tot.items()}, rounds=tot,
               groups={str(k): {v: float(np.median(grp[v][k])) for v in grp} for k in grp["256"]})
    res.append(row)
    kr = [f"{k}:{row['groups'][k]['512']/row['groups'][k]['256']:.3f}" for k in row['groups'] if k in kg]
    print(f"{name} {n:9s} 256 {row['total']['256']*1e3:9.3f} ms  512 {row['total']['512']*1e3:9.3f} ms  ratio {row['total']['512']/row['total']['256']:.3f}  kernels {' '.join(kr)}", flush=True)
json.dump(dict(workload=name, dims=dict(w.dims), rows=res), open(out, "w"), indent=1)
