import json, sys, collections, numpy as np
import autotune
from autotune.backends.cpu import kernel_probe as kp
from autotune.backends.cpu.machine import machine_bounds
runs = collections.defaultdict(list)
for r in range(int(sys.argv[1])):
    S = kp.measure_tiles(machine_bounds(), '/tmp/s56kern', 3, seed=r)
    by = {}
    for s in S: by[(s.shape, s.params.mr, s.params.nr)] = s.seconds
    for (sh, mr, nr), t in by.items():
        runs[(sh[1], mr, nr)].append(by[(sh, 6, 64)] / t)
for k in sorted(runs): print(k, ' '.join(f"{x:.3f}" for x in runs[k]))
