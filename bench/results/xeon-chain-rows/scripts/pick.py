import sys, os
import autotune, numpy as np
from search_spaces.loader import load_workload
from search_spaces.space import SearchSpace
from search_spaces.plans import seed_plans, chained_plan
import costmodel
from autotune.cli.tools import _cost_model_device
name, n_rand = sys.argv[1], int(sys.argv[2])
w = load_workload(name); sp = SearchSpace(w); spec = _cost_model_device("cpu")
seeds = [(c.name, c) for c in seed_plans(sp)]
chained = chained_plan(sp)
best_pred = min(costmodel.estimate(w, c, spec).total_s for _, c in seeds)
cands = [("chained", chained)]
rng = np.random.default_rng(1); tries = 0
while sum(1 for n, _ in cands if n.startswith("rand")) < n_rand and tries < 3000:
    tries += 1
    c = sp.random(rng)
    if any(s.chain_block for s in c.schedules) and costmodel.estimate(w, c, spec).total_s <= 3 * best_pred:
        cands.append((f"rand{tries}", c))
for n, c in cands:
    ch = [s for s in c.schedules if s.chain_block]
    print(name, n, c.key[:10], [(s.anchor, s.tiles, s.chain_block) for s in ch], c.layouts)
