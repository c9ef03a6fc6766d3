"""Dump every loop member's nest order for the named plans and random candidates of each workload."""
import sys, json, random
sys.path.insert(0, sys.argv[1])
import autotune  # noqa
from search_spaces.loader import load_workload
from search_spaces.space import SearchSpace
from search_spaces.partition import groups
from search_spaces.footprint import plan_group
from search_spaces.candidate import IMPL_LOOP
import numpy as np
out = {}
names = sys.argv[3:]
for name in names:
    w = load_workload(name)
    sp = SearchSpace(w)
    rng = np.random.default_rng(0)
    cands = []
    for k in range(60):
        try:
            cands.append(sp.random(rng))
        except Exception as e:
            print("sample", name, e); break
    for ci, c in enumerate(cands):
        try:
          for g in groups(w, c.fused_pairs):
            s = c.schedule(g.anchor)
            if s.impl != IMPL_LOOP:
                continue
            lay = lambda t: c.layout(t, len(w.shapes[t]))
            for m in plan_group(w, g, tuple(s.tiles), lay):
                out[f"{name}|{ci}|{g.anchor}|{m.op}"] = m.order
        except Exception as e:
            out[f"{name}|{ci}|err"] = type(e).__name__
json.dump(out, open(sys.argv[2], "w"))
print(len(out))
