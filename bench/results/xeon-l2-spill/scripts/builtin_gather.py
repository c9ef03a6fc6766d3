"""Which built-ins' model favourites (default dims) hold a kernel group that gathers."""
import autotune
from search_spaces.loader import builtin_names, load_workload
from search_spaces.kernel_reads import gathered_operands
from search_spaces.kernel_fusion import kernel_parts
from search_spaces.rewrite import rewritten
from autotune.api import space_for
from autotune.search.config import SearchConfig
from autotune.search.proposals import model_favourites
from autotune.backends.cpu.calibrate import load_cpu_spec
dev = load_cpu_spec()
for name in builtin_names():
    w0 = load_workload(name)
    space = space_for(w0, "cpu")
    fav = model_favourites(w0, space, dev, SearchConfig(), set())
    hits = []
    for c in fav:
        w = rewritten(w0, c)
        for s in c.schedules:
            if s.impl == "kernel":
                g = gathered_operands(w, lambda t: c.layout(t, len(w.shapes[t])), kernel_parts(w, c.fused_pairs, s.anchor))
                if g:
                    hits.append((c.key[:8], s.anchor, g))
    print(f"{name:30s} favourites {len(fav)}  gathering {hits}", flush=True)
