"""order_ab.py TILE_ROWS: causal_attention S=2048's chain group (the model-favourite chained
plan's, tiles of TILE_ROWS query rows) as generated (tiles dealt heaviest first), the same with
the tiles dealt in loop order, and the same chain without the mask; each compiled to a shared
object and timed by drv.c in one process, 41 interleaved rounds (medians)."""
import autotune  # noqa: F401  (first: sets up the library before numpy)
import re
import shutil
import subprocess
import sys
from pathlib import Path

from autotune.api import space_for
from autotune.backends.cpu.calibrate import load_cpu_spec
from autotune.backends.cpu.codegen import generate_units
from autotune.backends.cpu.compiler import compile_source
from autotune.search.config import SearchConfig
from autotune.search.proposals import model_favourites
from search_spaces import load_workload, parse_workload
from search_spaces.candidate import Candidate
from search_spaces.loader import builtin_text

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 256
here, out = Path(__file__).parent, Path("/tmp/causal-order")
out.mkdir(exist_ok=True)
dev = load_cpu_spec()
w = load_workload("causal_attention", {})
text = builtin_text("causal_attention")
nomask = parse_workload(text.replace("where(j <= i, s[h,i,j], -1000000000)", "s[h,i,j]"), "u.toml")
cand = next(c for c in model_favourites(w, space_for(w, "cpu"), dev, SearchConfig(), set())
            if any(s.chain_block for s in c.schedules))
d = cand.to_dict()
for s in d["schedules"]:
    if s.get("chain_block"):
        s["tiles"] = [rows, 8, 32]
cand = Candidate.from_dict(d)
srcs = {}
for tag, wl in (("heavy_first", w), ("unmasked", nomask)):
    (srcs[tag],) = [s for s, g in generate_units(wl, cand) if g.anchor == "o"]
m = re.search(r"static const int (TILES_\d+)\[(\d+)\] = \{[\d, ]+\};", srcs["heavy_first"])
srcs["loop_order"] = srcs["heavy_first"].replace(
    m.group(0), f"static const int {m.group(1)}[{m.group(2)}] = "
                f"{{{', '.join(map(str, range(int(m.group(2)))))}}};")
libs = []
for tag, src in srcs.items():
    src = src.replace(re.search(r"void (group_\d+)\(", src).group(1), "group_3")
    so = out / f"{tag}.so"
    shutil.copyfile(compile_source(src, out), so)
    libs.append(str(so))
subprocess.run(["gcc", "-O2", "-fopenmp", str(here / "drv.c"), "-o", str(out / "drv"), "-ldl"],
               check=True)
print(f"tiles of {rows} rows:", flush=True)
subprocess.run([str(out / "drv"), *libs], check=True)
