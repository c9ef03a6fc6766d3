import autotune  # noqa
import dataclasses, sqlite3, sys, numpy as np, costmodel
from autotune.backends.cpu.calibrate import cpu_spec_status
from autotune.cli.common import load
from search_spaces.candidate import Candidate
wl, dbp, scale = sys.argv[1], sys.argv[2], float(sys.argv[3])
w = load(wl, None); spec = cpu_spec_status()[0]
s2 = dataclasses.replace(spec, accumulator_latency=float(sys.argv[4]) if len(sys.argv)>4 else 0.0, loop_flops=spec.loop_flops * scale, functions=dataclasses.replace(spec.functions, **{f.name: getattr(spec.functions, f.name) * scale for f in dataclasses.fields(spec.functions)}))
seen = {}
for cj, m in sqlite3.connect(dbp).execute("select candidate_json, measured_s from trials where status='ok' and measured_s>0"):
    seen.setdefault(cj, []).append(m)
rows = []
for cj, ms in seen.items():
    c = Candidate.from_json(cj)
    e1, e2 = costmodel.estimate(w, c, spec), costmodel.estimate(w, c, s2)
    kinds = ",".join(f"{g.anchor}:{g.impl[:3]}{'' if g.impl!='loop' else g.bound[0]}" for g in e1.groups)
    rows.append((np.median(ms), e1.total_s, e2.total_s, kinds))
rows.sort()
for m, a, b, k in rows:
    print(f"{m*1e3:9.2f} {a*1e3:9.2f} {b*1e3:9.2f}  {np.log(a/m):+.2f} {np.log(b/m):+.2f}  {k}")
