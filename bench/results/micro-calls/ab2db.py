"""Two databases' cached plans of one workload, built in one process and timed in alternating order: ab2db.py WORKLOAD ROUNDS DB1 DB2 (medians, group clocks in us)."""
import autotune, json, sqlite3, sys, time
import numpy as np
from pathlib import Path
from search_spaces import load_workload
from search_spaces.candidate import Candidate
from autotune.backends.cpu.executor import CompiledPlan
name, rounds = sys.argv[1], int(sys.argv[2])
w = load_workload(name, {})
plans = {}
for db in sys.argv[3:]:
    c = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    d = json.loads(dict(c.execute("select workload_name, candidate_json from best_plans").fetchall())[name])
    plans[db] = CompiledPlan(w, Candidate.from_dict(d), Path("/tmp/s27k"))
inp = w.random_inputs(seed=1)
for p in plans.values(): p(**inp)
rows = {k: [] for k in plans}
order = list(plans)
for r in range(rounds):
    for k in (order if r % 2 else order[::-1]):
        t0 = time.perf_counter(); plans[k](**inp); rows[k].append((time.perf_counter() - t0, list(plans[k]._last_groups)))
for k, p in plans.items():
    print(f"{np.median([t for t, _ in rows[k]]) * 1e6:8.1f} us", " ".join(f"{g.anchor}:{np.median([x[i] for _, x in rows[k]]) * 1e6:.0f}" for i, g in enumerate(p.groups)), k)
