"""The drop-in triangle updates inside a model (``autotune bench trimul_outgoing --module``): an
AlphaFold pair-stack step, ``z + outgoing(z, mask)`` then ``+ incoming(z, mask)``, with
autotune.torch's TriangleMultiplicationOutgoing/Incoming against the same step written from
the equations (:mod:`autotune.bench.alphafold_reference`), each eager and under torch.compile,
in one process.

Four contenders per N, all float32 with the same OpenFold-named weights.  Every contender's
output is first checked against the reference step in float64 (relative Frobenius error under
``tol``); one that fails is reported and not timed.  Then interleaved rounds
(:func:`autotune.bench.timing.time_rounds`: shuffled order, a pause and a warm-up before each
turn); medians compared.  Which plan each drop-in module ran (tuned at exactly this N, adapted
from the nearest tuned N, or the heuristic plan) is recorded: tune both workloads at these N
first (``autotune search trimul_outgoing --dims N=384,702`` and the same for trimul_incoming).
"""
from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Callable

# the workloads a drop-in module runs (autotune.torch): the model holds one of each
MODULE_WORKLOADS = ("trimul_outgoing", "trimul_incoming")


def _reference_step(c: int, dtype):
    """The pair-stack step from the equations, with the bench's weights in ``dtype``."""
    from autotune.bench.alphafold_reference import AlphaFoldUpdate, PairBlock, random_state
    ref = PairBlock(AlphaFoldUpdate(c, c, True), AlphaFoldUpdate(c, c, False)).to(dtype)
    ref.outgoing.load_state_dict(random_state(c, 1, dtype))
    ref.incoming.load_state_dict(random_state(c, 2, dtype))
    return ref.eval()


def _models(c: int, db: str | None, backend: str) -> dict:
    """The four contenders with the same weights (float32); the compiled two compile at their
    first call (``backend``: torch.compile's)."""
    import torch

    from autotune.bench.alphafold_reference import PairBlock
    from autotune.torch import TriangleMultiplicationIncoming, TriangleMultiplicationOutgoing
    ref = _reference_step(c, torch.float32)
    ours = PairBlock(TriangleMultiplicationOutgoing(c, c, db=db),
                     TriangleMultiplicationIncoming(c, c, db=db))
    ours.outgoing.load_state_dict(ref.outgoing.state_dict())
    ours.incoming.load_state_dict(ref.incoming.state_dict())
    ours.eval()
    return {"reference eager": ref, "reference torch.compile": torch.compile(ref, backend=backend),
            "autotune eager": ours, "autotune torch.compile": torch.compile(ours, backend=backend)}


def _float64_step(c: int, z, mask):
    import torch
    with torch.no_grad():
        return _reference_step(c, torch.float64)(z.double(), mask.double())


def _rel_err(got, want) -> float:
    import torch
    return float(torch.linalg.norm(got.double() - want) / torch.linalg.norm(want))


def plans_used(n: int, c: int, db: str | None) -> dict:
    """Which plan each drop-in module resolves to at this N (the resolution is cached per
    process, so asking costs nothing the modules do not do anyway)."""
    from autotune.interop.resolve import plan_for
    from search_spaces import load_workload
    out = {}
    for name in MODULE_WORKLOADS:
        res = plan_for(load_workload(name, {"N": n, "C": c}), "cpu", db)[1]
        out[name] = {"source": res.source.value,
                     "tuned_dims": dict(res.tuned_dims) if res.tuned_dims else None}
    return out


def bench_n(n: int, c: int, rounds: int, tol: float, db: str | None, seed: int,
            backend: str, say: Callable[[str], None]) -> dict:
    """One N: every contender checked, then timed in interleaved rounds."""
    import torch

    from autotune.bench.runners import Runner
    from autotune.bench.timing import time_rounds
    gen = torch.Generator().manual_seed(seed + n)
    z = torch.randn(n, n, c, generator=gen)
    mask = (torch.rand(n, n, generator=gen) < 0.9).float()
    want = _float64_step(c, z, mask)
    contenders = _models(c, db, backend)
    rows: dict[str, dict] = {}
    with torch.no_grad():
        for name, m in contenders.items():
            t0 = time.perf_counter()
            got = m(z, mask)             # the first call compiles, binds and verifies
            first = time.perf_counter() - t0
            err = _rel_err(got, want)
            rows[name] = {"rel_err": err, "first_call_s": first,
                          "status": "ok" if err < tol else "wrong", "times_s": []}
            say(f"  N={n} {name:<26} first call {first:7.2f} s  rel err {err:.1e}"
                + ("" if err < tol else f"  WRONG (tol {tol:g}): not timed"))
        live = {k: Runner(lambda m=contenders[k]: m(z, mask), to_host=dict)
                for k, r in rows.items() if r["status"] == "ok"}
        times, calls = time_rounds(live, rounds, seed, say)
    for name, r in rows.items():
        r["times_s"] = times.get(name, [])
        r["calls_per_round"] = calls.get(name, 0)
        r["median_s"] = statistics.median(r["times_s"]) if r["times_s"] else None
    best_ref = min((rows[k]["median_s"] for k in ("reference eager", "reference torch.compile")
                    if rows[k]["median_s"] is not None), default=None)
    for r in rows.values():
        r["ratio_to_fastest_reference"] = (r["median_s"] / best_ref
                                           if r["median_s"] and best_ref else None)
    return {"n": n, "c": c, "plans": plans_used(n, c, db), "contenders": rows}


def run_module_bench(ns: list[int], c: int, rounds: int, db: str | None, out: str,
                     command: str, seed: int = 0, tol: float = 1e-3,
                     backend: str = "inductor",
                     say: Callable[[str], None] = print) -> tuple[dict, Path]:
    """Every N in turn; the record, written to ``<out>/torch-module-pairblock-C<c>-cpu.json``.
    Needs torch (:class:`autotune.bench.peers.PeerUnavailable` where it is missing)."""
    import json
    import warnings

    from autotune.bench.peers import PeerUnavailable
    try:
        import torch
    except ImportError:
        raise PeerUnavailable("the module bench needs PyTorch: pip install -e '.[torch]'") \
            from None
    load_before = os.getloadavg()
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")    # the plans' fallback warnings are recorded instead
        for n in ns:
            res = bench_n(n, c, rounds, tol, db, seed, backend, say)
            results.append(res)
            say(format_module_result(res, rounds))
    record = {"command": command, "torch": torch.__version__,
              "threads": torch.get_num_threads(), "load_before": load_before,
              "load_after": os.getloadavg(), "compile_backend": backend, "rounds": rounds,
              "statistic": "median of shuffled interleaved rounds (autotune.bench.timing)",
              "results": results}
    path = Path(out) / f"torch-module-pairblock-C{c}-cpu.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n")
    return record, path


def format_module_result(res: dict, rounds: int) -> str:
    plans = ", ".join(f"{k} {v['source']}" for k, v in res["plans"].items())
    lines = [f"pair-stack step N={res['n']} C={res['c']}: medians of {rounds} interleaved rounds "
             f"(plans: {plans})"]
    for name, r in res["contenders"].items():
        t = "-" if r["median_s"] is None else f"{r['median_s']:.4g} s"
        ratio = r["ratio_to_fastest_reference"]
        lines.append(f"  {name:<26} {t:>11}" + (f"  {ratio:.2f}x the faster reference"
                                                  if ratio else ""))
    return "\n".join(lines)
