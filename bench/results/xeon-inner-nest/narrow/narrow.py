"""Narrow tiles along unit-stride indices: measured group time against the model's prediction.
python narrow.py WORKLOAD.toml ANCHOR ROUNDS"""
import sys, json, tempfile, math
import autotune  # noqa
import numpy as np
import costmodel
from search_spaces.loader import load_workload
from search_spaces.candidate import GroupSchedule, make_candidate
from search_spaces.partition import groups
from search_spaces.footprint import plan_group
from autotune.api import make_executable
from autotune.backends.base import verify
from autotune.reference import reference
from autotune.cli.tools import _cost_model_device
from costmodel.rates import line_waste
spec = _cost_model_device("cpu")
w = load_workload(sys.argv[1]); anchor = sys.argv[2]; rounds = int(sys.argv[3])
TILES = [(1, 16, 24, 24), (32, 16, 24, 16), (32, 48, 24, 24), (8, 8, 24, 24), (8, 16, 24, 8),
         (8, 16, 24, 4), (8, 16, 24, 2), (8, 16, 24, 1), (8, 16, 8, 24), (8, 16, 2, 24),
         (8, 16, 1, 24), (32, 16, 2, 16), (48, 16, 1, 16), (8, 16, 2, 1), (48, 16, 2, 1),
         (32, 48, 24, 4), (4, 4, 4, 4), (2, 2, 2, 2)]
inputs = w.random_inputs(7)
ref = reference(w, inputs)
op = w.op(anchor)
rows = []
exes = []
for t in TILES:
    cand = make_candidate([], {}, [GroupSchedule(anchor, t)], "n")
    ex = make_executable(w, cand, "cpu", tempfile.mkdtemp())
    err, why = verify(ex(**inputs), ref, w.rtol)
    assert not why, why
    est = costmodel.estimate(w, cand, spec)
    (g,) = groups(w, set())
    order = plan_group(w, g, t, lambda x: tuple(range(len(w.shapes[x]))))[0].order
    # lines a run moves: each access's tensor bytes times the box's line spread
    lines = 0.0
    for acc in list(op.reads()) + [None]:
        if acc is None:
            shape, ext = op.out_shape, t
        else:
            if len(acc.idx) < 2:
                continue
            shape = w.shapes[acc.tensor]
            ext = [t[op.parallel.index(i)] for i in acc.idx]
        lines += math.prod(shape) * 4 / 64 * line_waste(shape, tuple(range(len(shape))), ext)
    exes.append(ex)
    rows.append({"tiles": t, "order": order, "predicted_s": est.total_s, "lines": lines,
                 "times": []})
for r in range(rounds):
    for ex, row in zip(exes, rows):
        ex.timed_call(inputs, warmup=1, repeats=5)
        row["times"].append(ex.group_seconds()[anchor])
for row in rows:
    row["median_s"] = float(np.median(row["times"]))
    print(f"{str(row['tiles']):18s} {' '.join(row['order']):12s} pred {row['predicted_s']*1e3:7.3f} ms"
          f"  meas {row['median_s']*1e3:7.3f} ms  lines {row['lines']/1e6:6.2f} M")
json.dump(rows, open(sys.argv[1].split('/')[-1].replace('.toml', '.json'), "w"), default=str)
