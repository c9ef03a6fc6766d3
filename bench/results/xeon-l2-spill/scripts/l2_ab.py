"""The model's top pick with tile_cache_bytes at 512 KB and at this host's L2, each verified
against float64 and timed in interleaved rounds in one process (with the heuristic plan)."""
import autotune, json, os, statistics, sys, time
from dataclasses import replace
from pathlib import Path
from search_spaces.loader import load_workload
from search_spaces.space import SearchSpace
from search_spaces.plans import named_plan
from autotune.backends.base import BufferPool, verify
from autotune.backends.factory import backend_kind, resolve
from autotune.reference import reference
from autotune.search.config import SearchConfig
from autotune.search.proposals import model_favourites
from costmodel import estimate

rounds = 9
out = {}
for name in sys.argv[1:]:
    w = load_workload(name)
    env = resolve("cpu"); kind = backend_kind(env.kind); dev = kind.device_spec(env)
    space = SearchSpace(w, kind.tile_bounds)
    cands = {"heuristic": named_plan(space, "heuristic")}
    for tag, tc in (("l2_512k", 512e3), ("l2_host", dev.tile_cache_bytes)):
        d = replace(dev, tile_cache_bytes=tc)
        fav = model_favourites(w, space, d, SearchConfig(), set())
        if fav:
            cands[tag] = fav[0]
    inputs = w.random_inputs(0); ref = reference(w, inputs)
    cache = Path.home() / ".cache" / "autotune" / "kernels"
    plans = {}
    for tag, c in cands.items():
        plan = kind.make_plan(w, c, cache, pool=BufferPool())
        err, why = verify(plan(**inputs), ref, w.rtol)
        assert not why, (tag, why)
        plans[tag] = plan
        print(name, tag, c.key[:10], f"pred {estimate(w, c, dev).total_s*1e3:.3f} ms (host L2)", flush=True)
    runs = {t: [] for t in plans}
    for r in range(rounds):
        order = list(plans) if r % 2 == 0 else list(plans)[::-1]
        for t in order:
            t0 = time.perf_counter(); plans[t](**inputs); runs[t].append(time.perf_counter() - t0)
    med = {t: statistics.median(v) for t, v in runs.items()}
    print(name, {t: f"{m*1e3:.3f} ms" for t, m in med.items()}, flush=True)
    out[name] = {"candidates": {t: json.loads(c.to_json()) for t, c in cands.items()},
                 "median_s": med, "runs": runs}
Path("/work/scratch/s53/tc/l2_ab.json").write_text(json.dumps(out, indent=1))
