"""python vsind.py WORKLOAD ROUNDS name=cand.json ... : plans vs torch.compile, interleaved, seconds_per_call"""
import sys, json, os
import autotune  # noqa
import numpy as np
from pathlib import Path
from search_spaces.loader import load_workload
from search_spaces.candidate import Candidate
from autotune.bench.runners import Context, plan_runner, inductor_runner
from autotune.backends.base import verify
from autotune.reference import reference
w = load_workload(sys.argv[1]); rounds = int(sys.argv[2])
inputs = w.random_inputs(1); ref = reference(w, inputs)
ctx = Context(w, inputs, "cpu", Path("/tmp/vsind_cache"))
rs = {}
for a in sys.argv[3:]:
    n, f = a.split("=", 1)
    rs[n] = plan_runner(ctx, Candidate.from_dict(json.load(open(f))))
rs["inductor"] = inductor_runner(ctx)
for n, r in rs.items():
    err, why = verify(r.to_host(r.call()), ref, w.rtol); assert not why, (n, why)
t = {n: [] for n in rs}; order = list(rs)
for i in range(rounds):
    for n in (order if i % 2 == 0 else order[::-1]):
        t[n].append(rs[n].seconds_per_call(50, 0.05))
for n in rs:
    print(f"{n:10s} {np.median(t[n])*1e3:7.3f} ms  ratio/inductor {np.median(np.array(t[n])/np.array(t['inductor'])):.3f}")
