"""The model's favourites on every built-in at default dims, with the L2 at 512 KB (the old
tile_cache_bytes) and at this host's 2 MiB: how many of the top picks move."""
import autotune, sys, time
from dataclasses import replace
from autotune.api import space_for
from autotune.search.config import SearchConfig
from autotune.search.proposals import model_favourites
from autotune.backends.cpu.calibrate import load_cpu_spec
from search_spaces.loader import builtin_names, load_workload
from costmodel import estimate

dev = load_cpu_spec()
names = sys.argv[1:] or builtin_names()
for name in names:
    w = load_workload(name)
    space = space_for(w, "cpu")
    res = {}
    for tc in (512e3, dev.tile_cache_bytes):
        d = replace(dev, tile_cache_bytes=tc)
        t = time.time()
        fav = model_favourites(w, space, d, SearchConfig(), set())
        res[tc] = [(c.key[:10], estimate(w, c, d).total_s) for c in fav[:3]]
    a, b = res.values()
    same = a[0][0] == b[0][0] if a and b else None
    print(f"{name:32s} top1 same={same}  512K: {[(k, f'{s*1e3:.2f}') for k, s in a]}  L2: {[(k, f'{s*1e3:.2f}') for k, s in b]}", flush=True)
