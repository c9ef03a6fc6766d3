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
import os
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import optuna
from optuna.distributions import CategoricalDistribution
from optuna.study import StudyDirection
from optuna.trial import TrialState, create_trial

from costmodel import estimate
from costmodel.model import memory_bytes
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
    # one trial in local_every is the model's pick among mutations of the incumbent; the rest
    # are the sampler's.  Every other (2) measured ~100 near-ties of the incumbent in a 200-trial
    # N=702 search, each ~10 s, that the model ranked within 0.1 % of it and a 2-core machine's
    # run-to-run noise (~10 %) could not tell apart
    local_every: int = 3
    storage: str | None = None       # Optuna storage shared by several workers (see open_storage)


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
    new: int = 0                     # trials this process ran (not replayed, not another's)


@dataclass
class SearchResult:
    key: PlanKey
    study: str
    progress: Progress
    best: dict | None = field(default=None)


def make_sampler(name: str, seed: int, shared: bool = False) -> optuna.samplers.BaseSampler:
    """``shared``: several workers sample one study at once, so TPE imagines the running
    trials' results (constant liar) instead of proposing the same point to every worker."""
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=10, multivariate=True,
                                          group=True, constant_liar=shared)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed)
    if name == "cmaes":
        # CMA-ES handles no categorical parameters: Optuna samples those independently
        return optuna.samplers.CmaEsSampler(seed=seed, warn_independent_sampling=False)
    raise ValueError(f"unknown sampler {name!r} (choices: {', '.join(SAMPLERS)})")


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """``journal:PATH`` -> a journal file (any shared file system with working locks);
    anything else is an RDB URL (``postgresql://user:pw@host/db``, ``sqlite:///file.db``)."""
    what = ("--storage {!r}: {}; use journal:PATH or an RDB URL such as "
            "postgresql://user:password@host/database")
    if url.startswith("journal:"):
        path = url[len("journal:"):]
        if not path:
            raise ValueError(what.format(url, "no path after journal:"))
        from optuna.storages.journal import JournalFileBackend
        try:
            return optuna.storages.JournalStorage(JournalFileBackend(path))
        except OSError as e:
            raise ValueError(what.format(url, f"cannot open the journal file ({e})")) from None
    if "://" not in url:
        raise ValueError(what.format(url, "not a storage URL"))
    kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
    for attempt in range(3):
        try:
            # wrapped as optuna.load_study would wrap it, so that our atomic claims and the
            # study's reads go through one object
            return optuna.storages._CachedStorage(optuna.storages.RDBStorage(
                url, engine_kwargs=kwargs))
        except Exception as e:  # driver missing, server down, bad URL: one line for the CLI
            if attempt < 2 and "already exists" in str(e):
                # workers starting together all create the tables; the losers retry
                time.sleep(0.5 + random.random())
                continue
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise ValueError(what.format(url, f"cannot open it ({type(e).__name__}: {first})")
                             ) from None
    raise AssertionError("unreachable")


def shared_study_name(key: PlanKey, config: SearchConfig) -> str:
    """The Optuna study every worker of one search joins (and its study in the plan DB)."""
    return f"autotune-{key.key[:16]}-{config.sampler}-seed{config.seed}"


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
        return _neighbour(self.w, self.space, self.dev, self.incumbent, rng,
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
        q += _model_favourites(self.w, self.space, self.dev, self.config, {c.key for c in q})
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
        return _search_shared(s, db, key, on_trial)
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


# ---- several workers on one shared Optuna study ------------------------------------------------

def _create_study_once(storage, name: str) -> bool:
    """Create study ``name``; True for exactly one caller however many race (the storage's
    unique study names arbitrate: RDB constraint, journal log order)."""
    try:
        storage.create_new_study([StudyDirection.MINIMIZE], name)
        return True
    except optuna.exceptions.DuplicatedStudyError:
        return False


def _claim(study, storage, study_id: int):
    """Atomically take a WAITING trial of the shared study (the same test-and-set Optuna's
    own ask() uses); (trial_id, frozen trial), or None when none is left."""
    for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        tid = storage.get_trial_id_from_study_id_trial_number(study_id, t.number)
        try:
            if storage.set_trial_state_values(tid, state=TrialState.RUNNING):
                return tid, t
        except optuna.exceptions.UpdateFinishedTrialError:
            continue
    return None


def _search_shared(s: _Search, db: PlanDB, key: PlanKey, on_trial) -> SearchResult:
    """One worker of a search shared through Optuna's storage.

    Budget: the study holds exactly ``budget`` trials.  One worker per budget value (the one
    that creates the marker study ``NAME:budget=N``) enqueues what is missing: the named
    plans and the model's favourites when the study is new, then empty trials (slots) whose
    parameters the sampler chooses when a worker takes them.  Workers only ever take queued
    trials, with the storage's atomic WAITING -> RUNNING switch, so no trial is run twice and
    none is created beyond the budget.  Each trial is written to the plan DB under the
    study's name and Optuna's trial number: the pair is unique, so a row is never duplicated.
    """
    config = s.config
    storage = open_storage(config.storage)
    name = shared_study_name(key, config)
    _create_study_once(storage, name)
    # every worker draws its own proposals: the same seed would propose the same points
    seed = int(np.random.SeedSequence([config.seed, os.getpid()]).generate_state(1)[0])
    study = optuna.load_study(study_name=name, storage=storage,
                              sampler=make_sampler(config.sampler, seed, shared=True))
    study_id = storage.get_study_id_from_name(name)
    ready = f"budget:{config.budget}"
    queue = s.queue() if not study.get_trials(deepcopy=False) else []
    if _create_study_once(storage, f"{name}:budget={config.budget}"):
        existing = study.get_trials(deepcopy=False)
        missing = config.budget - len(existing)
        firsts = (queue if not existing else [])[:max(missing, 0)]
        for params, cname in firsts:
            study.enqueue_trial(params, user_attrs={"name": cname})
        for _ in range(missing - len(firsts)):
            study.enqueue_trial({})
        study.set_user_attr(ready, True)
    else:   # another worker tops up: wait until it has queued the trials (or seems gone)
        deadline = time.monotonic() + 120
        while ready not in study.user_attrs and time.monotonic() < deadline:
            time.sleep(0.2)

    rows_seen: set[int] = set()
    rng = np.random.default_rng(seed)
    while True:
        for row in db.trials(key.key, name):        # what other workers sharing the DB did
            if row["number"] not in rows_seen:
                rows_seen.add(row["number"])
                s.absorb(row)
        claimed = _claim(study, storage, study_id)
        if claimed is None:
            break
        tid, frozen = claimed
        if s.incumbent and frozen.number % s.config.local_every == 1 and \
                not frozen.system_attrs.get("fixed_params"):
            nb = s.neighbour(rng)
            if nb is not None:     # how enqueue_trial fixes a trial's parameters
                storage.set_trial_system_attr(tid, "fixed_params", nb)
        trial = optuna.Trial(study, tid)
        r = s.evaluate(trial)
        _record(db, key, name, trial, r, number=trial.number)
        rows_seen.add(trial.number)
        s.finish(study, trial, r, None)
        _shared_progress(s.prog, study)
        if on_trial:
            on_trial(s.prog)
    _shared_progress(s.prog, study)
    return SearchResult(key, name, s.prog, db.best(key.key))


def _shared_progress(prog: Progress, study) -> None:
    """Counts over the whole shared study (every worker's finished trials)."""
    done = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED,
                                                    TrialState.FAIL))
    prog.done = len(done)
    prog.measured = sum(t.state == TrialState.COMPLETE for t in done)
    prog.pruned = sum(t.state == TrialState.PRUNED for t in done)
    prog.failed = sum(t.state == TrialState.FAIL for t in done)
    ok = [t for t in done if t.state == TrialState.COMPLETE]
    if ok:
        best = min(ok, key=lambda t: t.value)
        if prog.best_s is None or best.value < prog.best_s:
            # another worker's trial (whose plan-DB row this worker may not see)
            prog.best_s = best.value
            prog.best_name = best.user_attrs.get("name") or f"trial {best.number}"


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
