"""Which cached best plans (a plan database) hold kernel groups that gather."""
import autotune, sys
from search_spaces.loader import builtin_names, load_workload
from search_spaces.kernel_reads import gathered_operands
from search_spaces.kernel_fusion import kernel_parts
from search_spaces.rewrite import rewritten
from autotune.api import best_candidate
for name in builtin_names():
    w0 = load_workload(name)
    c = best_candidate(w0, "cpu", sys.argv[1])
    c = c[0] if isinstance(c, tuple) else c
    if c is None:
        print(name, "none"); continue
    w = rewritten(w0, c)
    hits = [(s.anchor, gathered_operands(w, lambda t: c.layout(t, len(w.shapes[t])), kernel_parts(w, c.fused_pairs, s.anchor)))
            for s in c.schedules if s.impl == "kernel"]
    print(f"{name:30s} kernels {[a for a, _ in hits]} gathering {[(a, g) for a, g in hits if g]}")
