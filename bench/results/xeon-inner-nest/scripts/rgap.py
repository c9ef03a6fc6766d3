import autotune, json, time, tempfile, ctypes
import numpy as np
from search_spaces.loader import load_workload
from search_spaces.candidate import Candidate
from autotune.api import make_executable
w = load_workload('/work/main/bench/unseen/cc_doubles.toml')
d = json.load(open('/tmp/cc54/out/bench-cc_doubles-A48-O24-cpu.json'))
c = Candidate.from_dict(d['best_plan']['candidate'])
ex = make_executable(w, c, 'cpu', tempfile.mkdtemp())
inputs = w.random_inputs(1)
rec = {}
fn = ex.fns['r']
def wrapped(arr):
    rec['arr'] = arr
    t0 = time.perf_counter(); fn(arr); rec['t'] = time.perf_counter() - t0
ex.fns['r'] = wrapped
for _ in range(5): ex(**inputs)
inplan = []
for _ in range(20):
    ex(**inputs); inplan.append(rec['t'])
alone = []
for _ in range(20):
    t0 = time.perf_counter(); fn(rec['arr']); alone.append(time.perf_counter() - t0)
# alone but after a sleep (threads asleep)
slept = []
for _ in range(10):
    time.sleep(0.01); t0 = time.perf_counter(); fn(rec['arr']); slept.append(time.perf_counter() - t0)
# after touching 64 MB (caches cold)
junk = np.ones(16 << 20, np.float32)
cold = []
for _ in range(10):
    junk += 1; t0 = time.perf_counter(); fn(rec['arr']); cold.append(time.perf_counter() - t0)
for k, v in (('in plan', inplan), ('alone', alone), ('after sleep', slept), ('cold caches', cold)):
    print(f"{k:12s} median {np.median(v)*1e3:.3f} ms  min {min(v)*1e3:.3f}")
