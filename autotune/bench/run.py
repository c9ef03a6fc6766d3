"""``autotune bench``: the tuned plan against the named plans and other frameworks, in one process.

    result = run_bench(load_workload("trimul_outgoing", {"N": 256}), peers=("jax", "iree"))
    print(format_table(result))

Contenders, all run on the same inputs (``seed``) and checked against the float64 reference
(relative L2 error within the workload's ``rtol``) before any timing; a wrong one is reported and
not timed:

* ``best``: the plan cached for (workload, device, library versions); with no cached plan, a
  search of ``search_budget`` trials runs first (and the result says so);
* ``heuristic`` and ``unfused``: the named plans;
* ``greedy`` (the 2023 IREE rule, per-element tiles): one run in a spawned subprocess under a
  timeout, reported as "timed out after X s" with its cost-model prediction when it does not end;
* peers generated from the workload's IR (:mod:`autotune.bench.peers`): ``jax`` (XLA, ``jax.jit``,
  default precision), ``torch`` (eager), ``inductor`` (``torch.compile``) and ``iree`` (the JAX
  function lowered to StableHLO, compiled by ``iree.compiler`` for ``llvm-cpu`` or ``cuda``, run
  through ``iree.runtime``).  A peer whose framework is not installed is reported as skipped,
  with the reason; it is never fatal.  ``isolate_peers=True`` builds and runs each peer in a
  process of its own, driven round by round from this one (:mod:`autotune.bench.isolated`).

Timing is in interleaved rounds: every round runs each contender once, in a shuffled order; the
median and the minimum are reported, with ratios to XLA's median and to the floor
``max(useful flops / peak FMA rate, compulsory bytes / bandwidth)`` of the calibrated device
spec (the machine's limit; the same flops at the library GEMM rate are reported too).
The JSON record (:meth:`BenchResult.to_dict`) goes to ``out_dir`` with the command line, the
machine, the versions and every time.
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

from db.records import BestPlan, Status
from search_spaces.workload import Workload

from autotune import threads
from autotune.bench.isolated import isolated_runner
from autotune.bench.peers import PeerUnavailable   # a builder raises it when its framework is missing
from autotune.bench.result import (DEFAULT_OUT, ORDER, PEER_NAMES, SAME_PLAN, BenchResult,
                                   Contender, result_name, save_result)
from autotune.bench.roofline import floor_of, spec_of
from autotune.bench.runners import (PEER_BUILDERS, Context, Runner, first_line, plan_runner,
                                    run_greedy)
from autotune.bench.timing import check_outputs, time_rounds
from autotune.environment import dist_version
from autotune.report.units import fmt_s

VERSION_DISTS = ("numpy", "jax", "jaxlib", "torch", "iree-base-compiler", "iree-base-runtime",
                 "optuna", "cupy-cuda12x", "matplotlib")


class BenchError(ValueError):
    """A benchmark that cannot run at all (no plan cached and no search budget, bad peer name)."""


def _parse_peers(peers) -> tuple[str, ...]:
    if isinstance(peers, str):
        peers = [p for p in (s.strip() for s in peers.split(",")) if p]
    peers = tuple(dict.fromkeys(peers))
    bad = [p for p in peers if p not in PEER_NAMES]
    if bad:
        raise BenchError(f"unknown peer {bad[0]!r}: choose from {', '.join(PEER_NAMES)}")
    return peers


def _cached_or_searched(w: Workload, device: str, db_path: Path, search_budget: int | None,
                        kind: str, say) -> tuple[Any, BestPlan, dict | None]:
    """The cached best plan (candidate, its DB record), searching ``search_budget`` trials first
    when none is cached; the third item describes that search (None if none ran)."""
    from autotune.api import best_candidate, run_search
    dims_txt = ",".join(f"{k}={v}" for k, v in w.dims)
    cand, best = best_candidate(w, device, db_path) if db_path.exists() else (None, None)
    searched = None
    if cand is None:
        if not search_budget:
            raise BenchError(
                f"no plan cached for {w.name} ({dims_txt}) on this {kind} in {db_path}; "
                f"run `autotune search {w.source.removeprefix('builtin:') or w.name} --dims "
                f"{dims_txt} --device {device} --db {db_path}` first, or pass --search-budget N")
        from autotune.search.config import SearchConfig
        say(f"no plan cached: searching {search_budget} trials first ...")
        t0 = time.perf_counter()

        def on_trial(p):
            if p.done % 5 == 0 or p.done == search_budget:
                say(f"  trial {p.done}/{search_budget}: best {fmt_s(p.best_s)} "
                    f"({p.best_name or '-'}); {p.pruned} pruned, {p.failed} failed")
        res = run_search(w, device, db_path, SearchConfig(budget=search_budget),
                         on_trial=on_trial)
        p = res.progress
        searched = {"budget": search_budget, "wall_s": time.perf_counter() - t0,
                    "measured": p.measured, "pruned": p.pruned, "failed": p.failed}
        cand, best = best_candidate(w, device, db_path)
        if cand is None:
            raise BenchError(f"the search of {search_budget} trials found no verified plan "
                             f"for {w.name}")
        say(f"searched {search_budget} trials in {searched['wall_s']:.1f} s: best "
            f"{fmt_s(best.measured_s)} in the search")
    return cand, best, searched


def run_bench(w: Workload, device: str = "cpu", peers=PEER_NAMES, rounds: int = 5, db=None,
              search_budget: int | None = None, greedy_timeout_s: float | None = 60.0,
              seed: int = 1, out_dir: str | os.PathLike | None = DEFAULT_OUT,
              command: str | None = None, log: Callable[[str], None] | None = None,
              isolate_peers: bool = False) -> BenchResult:
    """Benchmark ``w`` on ``device`` (see the module doc).  ``greedy_timeout_s=None`` skips the
    greedy plan; ``out_dir=None`` writes no JSON; ``log`` receives progress lines;
    ``isolate_peers=True`` builds and runs each peer in a process of its own
    (:mod:`autotune.bench.isolated`)."""
    from costmodel import estimate
    from db.store import default_db_path
    from search_spaces.plans import named_plan

    from autotune.version import __version__
    from autotune.api import cache_root, space_for
    from autotune.backends.factory import backend_kind, resolve
    from autotune.reference import reference
    from autotune.report.best import plan_summary

    say = log or (lambda s: None)
    peers = _parse_peers(peers)
    if rounds < 1:
        raise BenchError("rounds must be at least 1")
    if device == "cuda":
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # share the GPU
    env = resolve(device)
    spec, calibrated = spec_of(env)
    db_path = Path(db).expanduser() if db is not None else default_db_path()
    dims_txt = ",".join(f"{k}={v}" for k, v in w.dims)
    say(f"{w.name}  dims {dims_txt}  dtype {w.dtype}  on {env.name} ({env.cores} "
        f"{backend_kind(env.kind).units});  plan database {db_path}")

    cand, best, searched = _cached_or_searched(w, device, db_path, search_budget, env.kind, say)

    inputs = w.random_inputs(seed=seed)
    t0 = time.perf_counter()
    ref = reference(w, inputs)
    ref_s = time.perf_counter() - t0
    say(f"float64 reference: {ref_s:.2f} s")

    root = cache_root(db_path)
    space = space_for(w, env.kind)
    plans = {"best": cand, "heuristic": named_plan(space, "heuristic"),
             "unfused": named_plan(space, "unfused")}
    greedy = named_plan(space, "greedy")
    predicted = {k: estimate(w, c, spec).total_s for k, c in {**plans, "greedy": greedy}.items()}
    ctx = Context(w, inputs, env.kind, root, env.compute_capability)

    rows: dict[str, dict] = {}
    runners: dict[str, Runner] = {}

    def build(name: str, kind: str, make) -> None:
        info = rows[name] = {"kind": kind, "detail": {}}
        try:
            t0 = time.perf_counter()
            runners[name] = make()
            info["build_s"] = time.perf_counter() - t0
            info["detail"] = dict(runners[name].detail)
        except PeerUnavailable as e:
            info.update(status=Status.SKIPPED, error=str(e))
            say(f"{name}: skipped ({e})")
        except Exception as e:
            info.update(status=Status.FAILED, error=first_line(e))
            say(f"{name}: FAILED to build: {info['error']}")

    for name, c in plans.items():
        build(name, "plan", lambda c=c: plan_runner(ctx, c))
        rows[name]["predicted_s"] = predicted[name]
        if name != "best" and c.key == cand.key:
            rows[name]["note"] = SAME_PLAN
    try:
        for name in peers:
            build(name, "peer", (lambda name=name: isolated_runner(name, ctx, seed))
                  if isolate_peers else (lambda name=name: PEER_BUILDERS[name](ctx)))
        check_outputs(w, runners, rows, ref, say)
        times, calls = time_rounds(runners, rounds, seed, say)
    finally:
        for r in runners.values():
            r.close()
    for name, n in calls.items():
        rows[name]["calls_per_round"] = n
    runners.clear()

    # -- the greedy plan: once, in a subprocess, after the rounds (no contention) -------------
    if greedy_timeout_s is None:
        rows["greedy"] = {"kind": "plan", "status": Status.SKIPPED, "error": "not asked for"}
    else:
        say(f"greedy: one run in a subprocess (timeout {greedy_timeout_s:g} s) ...")
        g = run_greedy(w, seed, env.kind, root, greedy_timeout_s, ref)
        rows["greedy"] = {"kind": "plan", **{k: v for k, v in g.items()
                                             if k not in ("time_s", "timeout_s")}}
        if g["status"] in (Status.OK, Status.WRONG) and "time_s" in g:
            rows["greedy"]["note"] = "one run"
            if g["status"] == Status.OK:
                times["greedy"] = [g["time_s"]]
        elif g["status"] == Status.TIMED_OUT:
            rows["greedy"]["note"] = (f"timed out after {greedy_timeout_s:g} s (one run; "
                                      f"compiled in {g['build_s']:.1f} s)")
            rows["greedy"]["detail"] = {"timeout_s": greedy_timeout_s}
    rows["greedy"]["predicted_s"] = predicted["greedy"]

    # -- ratios, the floor ------------------------------------------------------------------------
    floor = floor_of(w, spec, calibrated)
    xla = statistics.median(times["jax"]) if times.get("jax") else None
    contenders = []
    for name in ORDER:
        if name not in rows:
            continue
        info = rows[name]
        ts = times.get(name, [])
        med = statistics.median(ts) if ts else None
        contenders.append(Contender(
            name=name, kind=info["kind"], status=Status(info.get("status", Status.FAILED)),
            median_s=med, min_s=min(ts) if ts else None, times_s=tuple(ts),
            ratio_to_xla=med / xla if (med is not None and xla) else None,
            ratio_to_floor=med / floor["floor_s"] if med is not None else None,
            predicted_s=info.get("predicted_s"), rel_err=info.get("rel_err"),
            build_s=info.get("build_s"), first_call_s=info.get("first_call_s"),
            calls_per_round=info.get("calls_per_round", 1), error=info.get("error", ""), note=info.get("note", ""),
            detail=info.get("detail", {})))

    if command is None:
        command = shlex.join([sys.executable, *sys.argv])
    best_plan = {"plan_key": best.plan_key, "study": best.study,
                 "trial_number": best.trial_number, "measured_s_in_search": best.measured_s,
                 "predicted_s": best.predicted_s, "summary": plan_summary(cand),
                 "candidate": best.candidate}
    path = Path(out_dir) / result_name(w, env.kind) if out_dir is not None else None
    result = BenchResult(
        workload=w.name, dims=dict(w.dims), dtype=w.dtype, workload_hash=w.hash,
        device=env.kind, device_name=env.name, rtol=w.rtol, seed=seed, rounds=rounds,
        command=command,
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        machine={"device": env.name, "cores": env.cores, "platform": platform.platform(),
                 "python": platform.python_version(), "cc": env.library_dict().get("cc", ""),
                 # how busy the machine was over the run (1, 5, 15 min at its end): a shared
                 # machine's figures are read with it
                 "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
                 # the idle threads' spins every contender here ran under (torch's too)
                 "threads": threads.settings(),
                 **({"compute_capability": env.compute_capability, "driver": env.driver,
                     "cuda_runtime": env.cuda_runtime} if env.kind == "cuda" else {})},
        versions={"autotune": __version__, **{d: dist_version(d) for d in VERSION_DISTS}},
        db=str(db_path), best_plan=best_plan, search=searched, reference_s=ref_s,
        floor=floor, contenders=tuple(contenders), json_path=str(path) if path else None)
    if path is not None:
        save_result(result, path)
        say(f"wrote {path}")
    return result
