"""Spearman's rho of the analytic model over the model-check databases (mc_*.sqlite, not kept:
re-create them with the README's command) for loop rates and accumulator latencies.  Needs
loop_rate_v1.patch applied to 6e5ec0f; the second table (the measured rate for sums only)
also needs a `sum_flops: float = 0.0` field in costmodel.devices.DeviceSpec, used in
model._loop_group in place of loop_flops for an op with a reduction and a parallel innermost
loop."""
import autotune  # noqa: F401
import dataclasses, sqlite3, sys
import numpy as np
import costmodel
from autotune.backends.cpu.calibrate import cpu_spec_status
from autotune.cli.common import load
from costmodel.ranking import spearman_rho
from search_spaces.candidate import Candidate
spec = cpu_spec_status()[0]
dbs = {"gated_mlp": "mc_gm.sqlite", "gelu_mlp": "mc_gelu_mlp.sqlite", "pair_transition": "mc_pair_transition.sqlite",
       "attention": "mc_attention.sqlite", "triangle_attention_starting": "mc_triangle_attention_starting.sqlite"}
for extra in sys.argv[1:]:
    dbs[extra] = f"mc_{extra}.sqlite"
data = {}
for wl, dbp in dbs.items():
    seen = {}
    for cj, m in sqlite3.connect(dbp).execute("select candidate_json, measured_s from trials where status='ok' and measured_s > 0"):
        seen.setdefault(cj, []).append(m)
    data[wl] = (load(wl, None), [(Candidate.from_json(cj), float(np.median(ms))) for cj, ms in seen.items()])


def row(label: str, s) -> None:
    rhos = []
    for w, cands in data.values():
        pred = np.array([costmodel.estimate(w, c, s).total_s for c, _ in cands])
        meas = np.array([m for _, m in cands])
        rhos.append(spearman_rho(np.log(pred), np.log(meas)))
    print(label + " " + " ".join(f"{r:10.3f}" for r in rhos) + f"   {np.mean(rhos):.3f}")


def scaled(rate: float):
    """The spec at loop rate ``rate``, its function weights scaled so a transcendental's time
    is kept."""
    sc = rate / spec.loop_flops
    return dataclasses.replace(spec, loop_flops=rate, functions=dataclasses.replace(
        spec.functions, **{f.name: getattr(spec.functions, f.name) * sc
                           for f in dataclasses.fields(spec.functions)}))


header = " ".join(f"{w[:10]:>10s}" for w in dbs) + "   mean"
print("rate lat " + header)
for rate in (33.5e9, 60e9, 90e9, 136e9):
    for lat in (0.0, 2.0, 5.5):
        row(f"{rate/1e9:4.0f} {lat:3.1f}", dataclasses.replace(scaled(rate), accumulator_latency=lat))
print("sum  lat " + header)
for rate in (60e9, 90e9, 136e9):
    for lat in (0.0, 2.0, 5.5):
        row(f"{rate/1e9:4.0f} {lat:3.1f}", dataclasses.replace(spec, sum_flops=rate,
                                                              accumulator_latency=lat))
