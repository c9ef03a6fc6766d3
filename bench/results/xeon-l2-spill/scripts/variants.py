"""cc_doubles' s as a gathered kernel with several blocks, and as a library GEMM: predicted
(this checkout's model, this host's calibration) and measured (one process, interleaved)."""
import autotune, json, statistics, sys, time
from pathlib import Path
from search_spaces.loader import load_workload
from search_spaces.candidate import Candidate
from autotune.backends.base import BufferPool, verify
from autotune.backends.factory import backend_kind, resolve
from autotune.reference import reference
from costmodel import estimate

w = load_workload("bench/unseen/cc_doubles.toml")
env = resolve("cpu"); kind = backend_kind(env.kind); dev = kind.device_spec(env)
base = json.load(open("/work/scratch/s53/g/base.json"))
variants = {}
for outer in "ab":
    for nc in (512, 2048):
        for kc in (256, 384):
            c = json.loads(json.dumps(base))
            k = c["schedules"][1]["kernel"]
            k.update(outer=outer, nc=nc, kc=kc, mc=144, mr=6, nr=64, pack_a=True, pack_b=True, stream=False)
            variants[f"{outer}-nc{nc}-kc{kc}"] = c
lib = json.loads(json.dumps(base)); lib["schedules"][1] = {"anchor": "s", "impl": "library", "tiles": [48, 48, 24, 24]}
variants["library"] = lib
inputs = w.random_inputs(0); ref = reference(w, inputs)
plans = {}
for name, cj in variants.items():
    c = Candidate.from_json(json.dumps(cj))
    plan = kind.make_plan(w, c, Path.home() / ".cache/autotune/kernels", pool=BufferPool())
    err, why = verify(plan(**inputs), ref, w.rtol); assert not why, (name, why)
    plans[name] = (plan, estimate(w, c, dev).total_s)
runs = {n: [] for n in plans}
groups = {n: [] for n in plans}
for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 9):
    order = list(plans) if r % 2 == 0 else list(plans)[::-1]
    for n in order:
        t0 = time.perf_counter(); plans[n][0](**inputs); runs[n].append(time.perf_counter() - t0)
        groups[n].append(dict(zip([g.anchor for g in plans[n][0].groups], plans[n][0]._last_groups)))
for n, (plan, pred) in plans.items():
    print(f"{n:18s} predicted {pred*1e3:6.2f} ms  measured {statistics.median(runs[n])*1e3:6.2f} ms  (min {min(runs[n])*1e3:.2f})  groups " + " ".join(f"{a} {statistics.median(x[a] for x in groups[n])*1e3:.2f}" for a in groups[n][0]))
