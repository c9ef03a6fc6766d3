"""Per-group predicted vs measured over a model-check / search database."""
import autotune  # noqa: F401
import json, math, sqlite3, sys
from collections import defaultdict
import costmodel
from autotune.backends.cpu.calibrate import cpu_spec_status
from autotune.cli.common import load
from search_spaces.candidate import Candidate

wl, dbp = sys.argv[1], sys.argv[2]
dims = sys.argv[3] if len(sys.argv) > 3 and "=" in sys.argv[3] else None
w = load(wl, dims)
spec = cpu_spec_status()[0]
import os, dataclasses
if os.environ.get("RATE"):
    sc = float(os.environ["RATE"]) / spec.loop_flops
    spec = dataclasses.replace(spec, loop_flops=float(os.environ["RATE"]),
        accumulator_latency=float(os.environ.get("LAT", 0)),
        functions=dataclasses.replace(spec.functions, **{f.name: getattr(spec.functions, f.name) * sc for f in dataclasses.fields(spec.functions)}))
rows = sqlite3.connect(dbp).execute(
    "select candidate_json, group_times_json, measured_s, predicted_s from trials "
    "where status='ok' and group_times_json is not null").fetchall()
seen = {}
for cj, gj, m, p in rows:
    seen.setdefault(cj, []).append((json.loads(gj), m))
agg = defaultdict(list)
for cj, runs in seen.items():
    cand = Candidate.from_json(cj)
    est = costmodel.estimate(w, cand, spec)
    for g in est.groups:
        ts = sorted(r[0].get(g.anchor) for r in runs if r[0].get(g.anchor))
        if not ts:
            continue
        mt = ts[len(ts) // 2]
        sch = next((s for s in cand.schedules if s.anchor == g.anchor), None)
        fused = ",".join(f.producer for f in g.fused)
        key = (g.anchor, g.impl, g.bound, bool(g.chain))
        lr = math.log(g.predicted_s / mt)
        agg[key].append(lr)
        if "-v" in sys.argv:
            print(f"{g.anchor:6s} {g.impl:8s} {g.bound:8s} tiles={g.tiles} fused=[{fused}] "
                  f"pred {g.predicted_s*1e6:9.1f} meas {mt*1e6:9.1f} us  log {lr:+.2f} "
                  f"lay={dict(cand.layouts)}")
for k, v in sorted(agg.items()):
    v.sort()
    print(k, len(v), "median log(pred/meas) %+.2f  p10 %+.2f p90 %+.2f" % (
        v[len(v)//2], v[len(v)//10], v[9*len(v)//10]))
