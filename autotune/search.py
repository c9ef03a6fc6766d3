"""The search: Optuna ask/tell over the space, the cost model as a filter, every trial persisted.

Order of trials: the named plans (unfused, heuristic, greedy), then the candidates the cost model
ranks best (:mod:`autotune.search_model`), then the sampler, with one trial in ``local_every``
the model's pick among mutations of the best plan so far.  A candidate predicted more than
``prune_factor`` times slower than the prediction for the best measured candidate is recorded as
pruned without running (the model's ratios are trusted, not its absolute seconds).  Each
finished trial is written to the database at once; a rerun of the same search replays them into
the study and continues.  Several workers on one shared study: :mod:`autotune.search_shared`.
"""
from __future__ import annotations

import json
import math
import warnings
from typing import Callable

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import TrialState, create_trial

from costmodel import estimate
from costmodel.model import memory_bytes
from costmodel.devices import DeviceSpec
from db.keys import PlanKey
from db.store import PlanDB
from search_spaces.candidate import Candidate
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace, params_of
from search_spaces.workload import Workload

from .search_config import SAMPLERS, Progress, SearchConfig, SearchResult, make_sampler
from .search_model import model_favourites, neighbour

__all__ = ["SAMPLERS", "Progress", "SearchConfig", "SearchResult", "search", "memory_error"]

def _distributions(params: dict, options: dict) -> dict:
    return {k: CategoricalDistribution(options[k]) for k in params}


def memory_error(need: int, available: int) -> str:
    return (f"needs {need / 1e9:.3g} GB, {available / 1e9:.3g} GB available "
            "(predicted memory: not run)")


class _Search:
    """State of one search in this process: what was measured and predicted, the best so
    far, and the evaluation of one Optuna trial (build, predict, prune or measure)."""

    def __init__(self, w, space, backend, dev, config, memory_available):
        self.w, self.space, self.backend, self.dev, self.config = w, space, backend, dev, config
        self.memory_available = memory_available
        self.threads = dev.parallel_units if dev.kind == "cpu" else 0   # GPU tiles: smem
        self.prog = Progress()
        self.measured: dict[str, tuple[str, float | None]] = {}   # cand key -> (status, median)
        self.predicted: dict[str, float] = {}
        self.best_pred: float | None = None
        self.options: dict[str, list] = {}
        self.incumbent: dict = {}                                  # params of the best so far

    def note(self, status: str, cand: Candidate, pred: float, median: float | None) -> None:
        prog = self.prog
        prog.done += 1
        if status == "ok":
            prog.measured += 1
            if prog.best_s is None or median < prog.best_s:
                prog.best_s, prog.best_name, self.best_pred = median, cand.name or cand.key, pred
        elif status == "pruned":
            prog.pruned += 1
        else:
            prog.failed += 1

    def absorb(self, row: dict) -> tuple[dict, dict]:
        """Learn from a trial row of the plan DB; returns its (params, options)."""
        cand = Candidate.from_json(row["candidate_json"])
        params = json.loads(row.get("params_json") or "{}")
        opts = json.loads(row.get("options_json") or "{}")
        self.options.update(opts)
        pred = row["predicted_s"] or math.inf
        self.predicted[cand.key] = pred
        if row["status"] != "pruned":
            self.measured[cand.key] = (row["status"], row["measured_s"])
        if row["status"] == "ok" and params and row["measured_s"] <= (self.prog.best_s
                                                                       or math.inf):
            self.incumbent = params
        self.note(row["status"], cand, pred, row["measured_s"])
        return params, opts

    def neighbour(self, rng) -> dict | None:
        return neighbour(self.w, self.space, self.dev, self.incumbent, rng,
                         set(self.measured) | set(self.predicted))

    def evaluate(self, trial) -> dict:
        """Build the trial's candidate; prune it, refuse it for memory, or measure it."""
        config = self.config
        asked: dict[str, list] = {}

        def choose(name, opts):
            asked[name] = list(opts)
            return trial.suggest_categorical(name, list(opts))

        cand = self.space.build(choose, name=trial.user_attrs.get("name", ""))
        self.options.update(asked)
        pred = estimate(self.w, cand, self.dev).total_s
        self.predicted[cand.key] = pred
        times, rel_err = None, None
        if cand.key in self.measured:                 # already measured: reuse, don't rerun
            status, median = self.measured[cand.key]
            error = "same candidate as an earlier trial"
        elif self.best_pred is not None and pred > config.prune_factor * self.best_pred:
            status, median = "pruned", None
            error = f"predicted {pred:.3g} s > {config.prune_factor:g} x {self.best_pred:.3g} s"
        elif (avail := self.memory_available() if self.memory_available else None) is not None \
                and (need := memory_bytes(self.w, cand, self.threads)) > avail:
            status, median, error = "failed", None, memory_error(need, avail)
            self.measured[cand.key] = (status, median)
        else:
            limit = max(config.min_timeout_s, config.timeout_factor * (self.prog.best_s or 0)) \
                * (2 + self.backend.settings.warmup + self.backend.settings.repeats) \
                + config.min_timeout_s
            m = self.backend.measure(cand, limit, self.prog.best_s)
            status, median, error = m.status, m.median_s, m.error
            times, rel_err = m.times, m.rel_err
            self.measured[cand.key] = (status, median)
        return {"cand": cand, "pred": pred, "status": status, "median": median,
                "error": error or None, "asked": asked, "times": times, "rel_err": rel_err}

    def finish(self, study, trial, r: dict, on_trial) -> None:
        """Tell Optuna the outcome, update the incumbent and the counts."""
        status, median, cand = r["status"], r["median"], r["cand"]
        if status == "ok":
            study.tell(trial, median)
        elif status == "pruned":
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, state=TrialState.FAIL)
        if status == "ok" and median <= (self.prog.best_s or math.inf):
            self.incumbent = dict(trial.params)
        self.note(status, cand, r["pred"], median)
        self.prog.new += 1
        self.prog.last = f"{cand.name or cand.key}: {status}" + (
            f" {median:.4g} s" if median else "")
        if on_trial:
            on_trial(self.prog)

    def queue(self) -> list[tuple[dict, str]]:
        """(params, name) of the named plans, then of the model's favourites."""
        q = [named_plan(self.space, n) for n in ("unfused", "heuristic", "greedy")]
        q += model_favourites(self.w, self.space, self.dev, self.config, {c.key for c in q})
        out = []
        for cand in q:
            params = params_of(self.space, cand)
            if params is not None:
                out.append((params, cand.name))
        return out


def _record(db: PlanDB, key: PlanKey, study_name: str, trial, r: dict,
            number: int | None = None) -> None:
    args = (r["cand"].to_json(), r["status"], r["pred"], r["median"], r["error"])
    kw = dict(params_json=json.dumps(trial.params, sort_keys=True),
              options_json=json.dumps(r["asked"], sort_keys=True),
              times=r["times"], rel_err=r["rel_err"])
    if number is None:
        db.append_trial(key, study_name, *args, **kw)
    else:
        db.add_trial(key, study_name, number, *args, **kw)


def search(w: Workload, space: SearchSpace, backend, db: PlanDB, key: PlanKey, dev: DeviceSpec,
           config: SearchConfig, on_trial: Callable[[Progress], None] | None = None,
           memory_available: Callable[[], int | None] | None = None) -> SearchResult:
    """Run (or continue) the search for ``key`` until ``config.budget`` trials exist.

    ``memory_available()`` -> bytes (or None: unknown): a candidate whose predicted memory
    (costmodel.memory_bytes) exceeds it is recorded failed without running.  With
    ``config.storage`` the trials live in a shared Optuna study that other workers (other
    processes, other machines) run at the same time; see :func:`_search_shared`.
    """
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    db.add_workload(w.hash, w.name, json.dumps(w.canonical(), sort_keys=True))
    s = _Search(w, space, backend, dev, config, memory_available)
    if config.storage:
        from .search_shared import search_shared
        return search_shared(s, db, key, on_trial)
    study_name = f"{config.sampler}-seed{config.seed}"
    study = optuna.create_study(direction="minimize", sampler=make_sampler(config.sampler,
                                                                          config.seed))
    # ---- replay what an earlier run of this search finished --------------------------------
    for row in db.trials(key.key, study_name):
        params, opts = s.absorb(row)
        if params and all(k in opts for k in params):
            state = {"ok": TrialState.COMPLETE, "failed": TrialState.FAIL}.get(
                row["status"], TrialState.PRUNED)
            study.add_trial(create_trial(
                params=params, distributions=_distributions(params, opts), state=state,
                value=row["measured_s"] if state == TrialState.COMPLETE else None))
    prog = s.prog
    if on_trial and prog.done:
        on_trial(prog)

    # ---- queue: named plans, then the model's favourites -----------------------------------
    if prog.done == 0:
        for params, name in s.queue():
            study.enqueue_trial(params, user_attrs={"name": name})

    rng = np.random.default_rng(config.seed + prog.done)
    while prog.done < config.budget:
        # One trial in local_every is a model-filtered neighbour of the best plan so far
        # (local search around the incumbent); the rest come from the sampler.
        if s.incumbent and prog.done % config.local_every == 1 and not _queued(study):
            nb = s.neighbour(rng)
            if nb is not None:
                study.enqueue_trial(nb)
        trial = study.ask()
        r = s.evaluate(trial)
        _record(db, key, study_name, trial, r)
        s.finish(study, trial, r, on_trial)
    return SearchResult(key, study_name, prog, db.best(key.key))


def _queued(study: optuna.Study) -> bool:
    return any(t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False))
