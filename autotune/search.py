"""The search: Optuna ask/tell over the space, the cost model as a filter, every trial persisted.

Order of trials: the named plans (unfused, heuristic, greedy), then the candidates the cost model
ranks best (coordinate descent from the named plans, plus random draws), then the sampler.  A candidate predicted more
than ``prune_factor`` times slower than the prediction for the best measured candidate is recorded
as pruned without running (the model's ratios are trusted, not its absolute seconds).  Each
finished trial is written to the database at once; a rerun of the same search replays them into
the study and continues.
"""
from __future__ import annotations

import json
import math
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from costmodel import estimate
from costmodel.devices import DeviceSpec
from db.keys import PlanKey
from db.store import PlanDB
from search_spaces.candidate import Candidate
from search_spaces.plans import NAMED_PLANS, named_plan
from search_spaces.space import SearchSpace, params_of
from search_spaces.workload import Workload

SAMPLERS = ("tpe", "random", "gp", "cmaes")
MODEL_MARGIN = 0.97   # a model favourite must beat the best named plan's prediction by 3 %


@dataclass(frozen=True)
class SearchConfig:
    """Knobs of one search (the CLI's options)."""
    budget: int = 200
    sampler: str = "tpe"
    seed: int = 0
    prune_factor: float = 2.0
    timeout_factor: float = 10.0     # a run may take this many times the best so far
    min_timeout_s: float = 30.0
    model_seeds: int = 12            # model-ranked candidates enqueued after the named plans
    model_pool: int = 300            # random candidates the model also ranks for them
    climb_rounds: int = 3            # coordinate-descent rounds of the model from named plans


@dataclass
class Progress:
    """Running counts, handed to the progress callback after every trial."""
    done: int = 0
    measured: int = 0
    pruned: int = 0
    failed: int = 0
    best_s: float | None = None
    best_name: str = ""
    last: str = ""


@dataclass
class SearchResult:
    key: PlanKey
    study: str
    progress: Progress
    best: dict | None = field(default=None)


def make_sampler(name: str, seed: int) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, multivariate=True,
                                          group=True, constant_liar=False)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "cmaes":
        # CMA-ES handles no categorical parameters: Optuna samples those independently
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    raise ValueError(f"unknown sampler {name!r} (choices: {', '.join(SAMPLERS)})")


def _distributions(params: dict, options: dict) -> dict:
    return {k: CategoricalDistribution(options[k]) for k in params}


def search(w: Workload, space: SearchSpace, backend, db: PlanDB, key: PlanKey, dev: DeviceSpec,
           config: SearchConfig, on_trial: Callable[[Progress], None] | None = None
           ) -> SearchResult:
    """Run (or continue) the search for ``key`` until ``config.budget`` trials exist."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    study_name = f"{config.sampler}-seed{config.seed}"
    db.add_workload(w.hash, w.name, json.dumps(w.canonical(), sort_keys=True))
    study = optuna.create_study(direction="minimize", sampler=make_sampler(config.sampler,
                                                                          config.seed))
    prog = Progress()
    measured: dict[str, tuple[str, float | None]] = {}    # candidate key -> (status, median)
    predicted: dict[str, float] = {}
    best_pred: float | None = None
    options: dict[str, list] = {}
    incumbent: dict = {}                                   # params of the best plan so far

    def note(status: str, cand: Candidate, pred: float, median: float | None) -> None:
        nonlocal best_pred
        prog.done += 1
        if status == "ok":
            prog.measured += 1
            if prog.best_s is None or median < prog.best_s:
                prog.best_s, prog.best_name, best_pred = median, cand.name or cand.key, pred
        elif status == "pruned":
            prog.pruned += 1
        else:
            prog.failed += 1

    # ---- replay what an earlier run of this search finished --------------------------------
    for row in db.trials(key.key, study_name):
        cand = Candidate.from_json(row["candidate_json"])
        params = json.loads(row.get("params_json") or "{}")
        opts = json.loads(row.get("options_json") or "{}")
        options.update(opts)
        pred = row["predicted_s"] or math.inf
        predicted[cand.key] = pred
        if row["status"] != "pruned":
            measured[cand.key] = (row["status"], row["measured_s"])
        if row["status"] == "ok" and params and row["measured_s"] <= (prog.best_s or math.inf):
            incumbent = params
        note(row["status"], cand, pred, row["measured_s"])
        if params and all(k in opts for k in params):
            state = {"ok": TrialState.COMPLETE, "failed": TrialState.FAIL}.get(
                row["status"], TrialState.PRUNED)
            study.add_trial(create_trial(
                params=params, distributions=_distributions(params, opts), state=state,
                value=row["measured_s"] if state == TrialState.COMPLETE else None))
    if on_trial and prog.done:
        on_trial(prog)

    # ---- queue: named plans, then the model's favourites -----------------------------------
    if prog.done == 0:
        queue = [named_plan(space, n) for n in ("unfused", "heuristic", "greedy")]
        queue += _model_favourites(w, space, dev, config, {c.key for c in queue})
        for cand in queue:
            params = params_of(space, cand)
            if params is not None:
                study.enqueue_trial(params, user_attrs={"name": cand.name})

    rng = np.random.default_rng(config.seed + prog.done)
    while prog.done < config.budget:
        # Every other trial is a model-filtered neighbour of the best plan so far (local
        # search around the incumbent); the rest come from the sampler.
        if incumbent and prog.done % 2 == 1 and not _queued(study):
            nb = _neighbour(w, space, dev, incumbent, rng, set(measured) | set(predicted))
            if nb is not None:
                study.enqueue_trial(nb)
        trial = study.ask()
        asked: dict[str, list] = {}

        def choose(name, opts):
            asked[name] = list(opts)
            return trial.suggest_categorical(name, list(opts))

        cand = space.build(choose, name=trial.user_attrs.get("name", ""))
        options.update(asked)
        pred = estimate(w, cand, dev).total_s
        predicted[cand.key] = pred
        if cand.key in measured:                      # already measured: reuse, don't rerun
            status, median = measured[cand.key]
            error = "same candidate as an earlier trial"
        elif best_pred is not None and pred > config.prune_factor * best_pred:
            status, median = "pruned", None
            error = f"predicted {pred:.3g} s > {config.prune_factor:g} x {best_pred:.3g} s"
        else:
            limit = max(config.min_timeout_s, config.timeout_factor * (prog.best_s or 0)) * (
                2 + backend.settings.warmup + backend.settings.repeats) + config.min_timeout_s
            m = backend.measure(cand, limit, prog.best_s)
            status, median, error = m.status, m.median_s, m.error
            measured[cand.key] = (status, median)
        db.append_trial(key, study_name, cand.to_json(), status, pred, median, error or None,
                        params_json=json.dumps(trial.params, sort_keys=True),
                        options_json=json.dumps(asked, sort_keys=True))
        if status == "ok":
            study.tell(trial, median)
        elif status == "pruned":
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, state=TrialState.FAIL)
        if status == "ok" and median <= (prog.best_s or math.inf):
            incumbent = dict(trial.params)
        note(status, cand, pred, median)
        prog.last = f"{cand.name or cand.key}: {status}" + (f" {median:.4g} s" if median else "")
        if on_trial:
            on_trial(prog)
    return SearchResult(key, study_name, prog, db.best(key.key))


def _model_favourites(w, space, dev, config: SearchConfig, seen: set[str]) -> list[Candidate]:
    """Candidates the cost model ranks fastest, found by coordinate descent in parameter
    space from the heuristic and unfused plans (one parameter changed at a time, best
    improvement kept), plus a few random draws for diversity."""
    pool: dict[str, tuple[float, Candidate]] = {}

    def build(params: dict) -> tuple[Candidate, dict, dict]:
        asked: dict = {}
        used: dict = {}

        def choose(name, opts):
            opts = list(opts)
            asked[name] = opts
            val = params.get(name)
            if val not in opts:
                val = opts[len(opts) // 2] if name.startswith("tile:") else opts[0]
            used[name] = val
            return val
        return space.build(choose), used, asked

    def score(c: Candidate) -> float:
        if c.key not in pool:
            pool[c.key] = (estimate(w, c, dev).total_s, c)
        return pool[c.key][0]

    for start in ("heuristic", "unfused"):
        params = params_of(space, named_plan(space, start))
        if params is None:
            continue
        cand, params, opts = build(params)
        best = score(cand)
        for _ in range(config.climb_rounds):
            improved = False
            for name in sorted(opts):
                for o in opts.get(name, []):
                    if o == params.get(name):
                        continue
                    c, p2, o2 = build({**params, name: o})
                    if score(c) < best * (1 - 1e-6):
                        best, params, opts, improved = score(c), p2, o2, True
            if not improved:
                break
    rng = np.random.default_rng(config.seed)
    for _ in range(config.model_pool):
        score(space.random(rng))
    # only what the model clearly prefers to every named plan is worth a measurement up front
    bar = MODEL_MARGIN * min(estimate(w, named_plan(space, n), dev).total_s for n in NAMED_PLANS)
    ranked = sorted((v for k, v in pool.items() if k not in seen and v[0] < bar),
                    key=lambda x: x[0])
    return [c for _, c in ranked[: config.model_seeds]]


def _queued(study: optuna.Study) -> bool:
    return any(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))


def _neighbour(w, space, dev, params: dict, rng, seen: set[str], tries: int = 40) -> dict | None:
    """Params of the unseen one- or two-parameter mutation of ``params`` that the cost model
    ranks fastest (None if every mutation tried was seen before)."""
    best = None
    for _ in range(tries):
        asked: dict = {}
        used: dict = {}
        flips = set(rng.choice(sorted(params), size=min(len(params), int(rng.integers(1, 3))),
                               replace=False)) if params else set()

        def choose(name, opts):
            opts = list(opts)
            asked[name] = opts
            val = params.get(name)
            if name in flips or val not in opts:
                val = opts[int(rng.integers(len(opts)))]
            used[name] = val
            return val
        cand = space.build(choose)
        if cand.key in seen:
            continue
        pred = estimate(w, cand, dev).total_s
        if best is None or pred < best[0]:
            best = (pred, used)
    return best[1] if best else None
