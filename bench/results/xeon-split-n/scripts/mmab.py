"""OUT=res.json python mmab.py TOML ROUNDS 'k=v,..' ... : variants of the generated kernel on a one-statement
product against torch.mm (MKL) in one process, interleaved rounds, every variant verified first."""
import sys, json, os
import autotune  # noqa
import numpy as np, torch
from pathlib import Path
from search_spaces.loader import load_workload
from search_spaces.candidate import Candidate
from autotune.bench.runners import Context, plan_runner, Runner, seconds_per_call
from autotune.backends.base import verify
from autotune.reference import reference
torch.set_num_threads(int(os.environ.get("TT", "2")))
w = load_workload(sys.argv[1]); rounds = int(sys.argv[2])
inputs = w.random_inputs(1); ref = reference(w, inputs)
ctx = Context(w, inputs, "cpu", Path("/tmp/vsind_cache"))
out = w.outputs[0]
base = dict(mr=14, nr=32, mc=42, kc=256, nc=1024, pack_a=True, pack_b=True, split="m", vec_bytes=64, outer="a", stream=False)
rs = {}
for var in sys.argv[3:]:
    k = dict(base)
    for kv in var.split(","):
        a, v = kv.split("=")
        k[a] = (v == "1") if a in ("pack_a", "pack_b", "stream") else (int(v) if v.isdigit() else v)
    c = Candidate.from_dict({"fused": [], "layouts": {}, "name": "", "schedules": [{"anchor": out, "impl": "kernel", "kernel": k, "tiles": [1, 1]}]})
    rs[var] = plan_runner(ctx, c)
ta, tb = torch.as_tensor(inputs["a"]), torch.as_tensor(inputs["b"])
rs["torch"] = Runner(lambda: {out: torch.mm(ta, tb)}, lambda o: {k: v.numpy() for k, v in o.items()})
for n, r in rs.items():
    err, why = verify(r.to_host(r.call()), ref, w.rtol); assert not why, (n, why)
t = {n: [] for n in rs}; order = list(rs)
for i in range(rounds):
    for n in (order if i % 2 == 0 else order[::-1]):
        t[n].append(rs[n].seconds_per_call(30, 0.03))
fl = 2 * w.op(out).iterations
res = []
for n in rs:
    res.append(dict(variant=n, median_s=float(np.median(t[n])), rounds_s=t[n],
                    ratio_to_torch=float(np.median(np.array(t[n]) / np.array(t["torch"])))))
    print(f"{n:36s} {np.median(t[n])*1e3:7.3f} ms {fl/np.median(t[n])/1e9:6.0f} GF/s  ratio/torch {np.median(np.array(t[n])/np.array(t['torch'])):.3f}")
if os.environ.get("OUT"):
    json.dump(dict(workload=sys.argv[1], rounds=rounds, torch_threads=torch.get_num_threads(),
                   base=base, results=res), open(os.environ["OUT"], "w"), indent=1)
