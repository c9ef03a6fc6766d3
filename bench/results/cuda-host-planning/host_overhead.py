"""Host time of a CUDA plan's calls with a runtime that does no device work: what planning
and argument lists cost per call."""
import autotune, sys, time
import numpy as np
from pathlib import Path
from search_spaces import load_workload
from search_spaces.space import SearchSpace
from search_spaces.plans import named_plan
from autotune.backends.cuda.emulator import HostEmulator
from autotune.backends.cuda.executor import CudaPlan
from autotune.backends.cuda.kind import CudaBackendKind

class Noop(HostEmulator):
    def gemm(self, *a, **k): pass
    def launch(self, *a, **k): pass
    def split_tf32(self, x): return x, x

w = load_workload("trimul_outgoing", {"N": 64})
cand = named_plan(SearchSpace(w, CudaBackendKind().tile_bounds), "heuristic")
plan = CudaPlan(w, cand, Path("/tmp/s30cuda"), runtime=Noop(threads=1))
dev = plan.upload(w.random_inputs(seed=1))
plan.run_device(**dev)
ts = []
for _ in range(200):
    t0 = time.perf_counter(); plan.run_device(**dev); ts.append(time.perf_counter() - t0)
lib = sum(s.impl == "library" for s in cand.schedules)
print(f"{np.median(ts)*1e3:.3f} ms a call, {lib} library groups")
