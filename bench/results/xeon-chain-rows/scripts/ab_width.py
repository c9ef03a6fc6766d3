"""A/B of AT_WIDE (prefer-vector-width=512), one process, interleaved rounds, each candidate
built both ways and verified.  python ab_width.py MODE WORKLOAD N_RANDOM ROUNDS OUT.json
  chain: chain groups with and without it; candidates the chained plan and random ones with a
         chain (run as ab_wide.py with 4b5a4ce's code before it was committed)
  trans: loop groups outside chains that call a transcendental; candidates the seed plans
         within 3x of the best one's prediction and random ones (run as ab_trans.py)"""
import sys, json, tempfile, time
import autotune  # noqa: F401  (before numpy)
import numpy as np
import autotune.backends.cpu.codegen as cg
from search_spaces.loader import load_workload
from search_spaces.space import SearchSpace
from search_spaces.plans import seed_plans, chained_plan
from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.reference import reference
import costmodel
from autotune.cli.tools import _cost_model_device

mode, name, n_rand, rounds, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
CHAIN = mode == "chain"
import os
w = load_workload(name, {k: int(v) for k, v in (kv.split('=') for kv in os.environ.get('DIMS', '').split(',') if kv)} or None)
sp = SearchSpace(w)
spec = _cost_model_device("cpu")
seeds = [(c.name, c) for c in seed_plans(sp)]
chained = chained_plan(sp)
best_pred = min(costmodel.estimate(w, c, spec).total_s for _, c in seeds)
cands = [("chained", chained)] if CHAIN else [
    (n, c) for n, c in seeds if costmodel.estimate(w, c, spec).total_s <= 3 * best_pred]
rng = np.random.default_rng(1)
tries = 0
while sum(1 for n, _ in cands if n.startswith("rand")) < n_rand and tries < 3000:
    tries += 1
    c = sp.random(rng)
    if (not CHAIN or any(s.chain_block for s in c.schedules)) \
            and costmodel.estimate(w, c, spec).total_s <= 3 * best_pred:
        cands.append((f"rand{tries}", c))
seen, uniq = set(), []
for n, c in cands:
    if c.key not in seen:
        seen.add(c.key); uniq.append((n, c))
inputs = w.random_inputs(1)
ref = reference(w, inputs)

res = []
for n, c in uniq:
    exes = {}
    for v, attr in (("256", ""), ("512", "AT_WIDE ")):
        if CHAIN:
            cg._ChainEmitter.function_attr = attr
        else:
            cg._Emitter.function_attr = property(lambda self, a=attr: a if any(
                self.w.op(m).flops_per_iteration()[1] for m in self.g.members) else "")
        ex = make_executable(w, c, "cpu", tempfile.mkdtemp())
        o = ex(**inputs)
        err, why = verify(o, ref, w.rtol)
        assert not why, (n, v, why)
        exes[v] = ex
    cg._ChainEmitter.function_attr, cg._Emitter.function_attr = "AT_WIDE ", ""
    tot = {v: [] for v in exes}; grp = {v: {} for v in exes}
    for r in range(rounds):
        for v, ex in (exes.items() if r % 2 == 0 else reversed(list(exes.items()))):
            _, ts = ex.timed_call(inputs, warmup=1, repeats=3)
            tot[v].append(float(np.median(ts)))
            for k, s in ex.group_seconds().items():
                grp[v].setdefault(k, []).append(s)
    row = dict(name=n, key=c.key, candidate=c.to_dict(), total={v: float(np.median(x)) for v, x in tot.items()},
               rounds={v: x for v, x in tot.items()},
               groups={k: {v: float(np.median(grp[v][k])) for v in grp} for k in grp["256"]})
    res.append(row)
    print(f"{name} {n:8s} 256 {row['total']['256']*1e3:9.3f} ms  512 {row['total']['512']*1e3:9.3f} ms  ratio {row['total']['512']/row['total']['256']:.3f}", flush=True)
json.dump(dict(workload=name, dims=dict(w.dims), rows=res), open(out, "w"), indent=1)
