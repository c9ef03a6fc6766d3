"""python abbar.py WORKLOAD ROUNDS SPINS name=cand.json ... : kernels built with each barrier spin (us)"""
import sys, json, tempfile, os
import autotune  # noqa
import numpy as np
from search_spaces.loader import load_workload
from search_spaces.candidate import Candidate
from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.reference import reference
import autotune.backends.cpu.gemm_driver as gd
name, rounds, spins = sys.argv[1], int(sys.argv[2]), [float(x) for x in sys.argv[3].split(',')]
w = load_workload(name, None)
inputs = w.random_inputs(1); ref = reference(w, inputs)
exes = {}
for arg in sys.argv[4:]:
    n, f = arg.split('=', 1)
    c = Candidate.from_dict(json.load(open(f)))
    for sp in spins:
        gd.BARRIER_SPIN_US = sp
        ex = make_executable(w, c, "cpu", tempfile.mkdtemp())
        err, why = verify(ex(**inputs), ref, w.rtol); assert not why, (n, why)
        exes[(n, sp)] = ex
tot = {k: [] for k in exes}
order = list(exes)
for r in range(rounds):
    for k in (order if r % 2 == 0 else order[::-1]):
        _, ts = exes[k].timed_call(inputs, warmup=1, repeats=5)
        tot[k].append(float(np.median(ts)))
for k in exes:
    print(k, f"{np.median(tot[k])*1e3:.3f} ms", [round(x*1e3, 3) for x in sorted(tot[k])])
