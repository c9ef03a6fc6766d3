import sys, autotune
from dataclasses import replace
from pathlib import Path
from autotune.backends.cpu.kernel_probe import tile_params, measure_configs
from autotune.backends.cpu.machine import machine_bounds
shape = tuple(int(x) for x in sys.argv[1].split(','))
ps = tile_params(machine_bounds(), 30)
keep = [(6,64),(14,32),(8,32),(6,32),(12,32),(8,48),(4,64)]
ps = [p for p in ps if (p.mr,p.nr) in keep]
cfg = []
for outer in "ab":
    for p in ps:
        cfg.append(replace(p, outer=outer, **eval("dict(" + (sys.argv[2] if len(sys.argv) > 2 else "") + ")")))
from search_spaces.kernel import legalize
cfg = [legalize(p, 4) for p in cfg]
S = measure_configs(cfg, shape, Path("/work/scratch/s58/kc"), 7, 0, "x")
base = S[0].seconds
for s in S: print(s.params.outer, f"{s.params.mr}x{s.params.nr}", f"mc{s.params.mc} kc{s.params.kc} nc{s.params.nc}", f"{s.seconds*1e3:.3f} ms  x{s.seconds/base:.3f}")
