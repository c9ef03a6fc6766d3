"""The state of one search in this process: what was measured and predicted, the best so far,
and how one Optuna trial is evaluated (build, predict, prune or measure) into the
:class:`~db.records.TrialOutcome` the loops write to the plan database.

Predictions are the analytic model's, corrected by what the search has learnt from
measurements (:class:`~autotune.search.learning.Learner`, unless ``config.learn`` is off):
pruning compares corrected predictions, and both are stored with each trial."""
from __future__ import annotations

import math

from optuna.trial import TrialState

from costmodel.model import memory_bytes
from db.records import Status, StoredTrial, TrialOutcome
from search_spaces.candidate import Candidate
from search_spaces.plans import CHAINED, INLINED, named_plan, seed_plans
from search_spaces.answers import params_of

from autotune.search.config import Progress
from autotune.search.noise import NoiseBand, leniency
from autotune.search.learning import Learner
from autotune.search.proposals import SingleFlips, model_favourites, neighbour
from autotune.search.trust import ModelTrust


REUSED = "same candidate as an earlier trial"   # the error note of a trial that was not rerun
UNPRICED = "the cost model could not price it"   # the error note's head of such a trial


def memory_error(need: int, available: int) -> str:
    return (f"needs {need / 1e9:.3g} GB, {available / 1e9:.3g} GB available "
            "(predicted memory: not run)")


class SearchState:
    """State of one search in this process: what was measured and predicted, the best so
    far, and the evaluation of one Optuna trial (build, predict, prune or measure)."""

    def __init__(self, w, space, backend, dev, config, memory_available):
        self.w, self.space, self.backend, self.dev, self.config = w, space, backend, dev, config
        self.memory_available = memory_available
        self.threads = backend.kind.memory_threads(dev)   # copies of the tile buffers
        self.prog = Progress()
        self.measured: dict[str, tuple[Status, float | None]] = {}  # cand key -> (status, median)
        self.predicted: dict[str, float] = {}
        self.best_pred: float | None = None
        self.best_cand: Candidate | None = None                    # the best measured so far
        self.learner = Learner(w, dev)
        self.options: dict[str, list] = {}
        self.incumbent: dict = {}                                  # params of the best so far
        self.noise = NoiseBand()                # run-to-run spread of the repeats so far
        self.loaded: set[str] = set()           # keys of candidates measured under load
        self.seen: set[str] = set()             # keys of every trial written (any status)
        # the model's out-of-sample errors, which set the prune factor unless the config fixes it
        self.trust = ModelTrust()
        self.flips = SingleFlips()              # the incumbent's one-parameter mutations

    def note(self, status: Status, cand: Candidate, pred: float, median: float | None) -> None:
        prog = self.prog
        prog.done += 1
        self.seen.add(cand.key)
        if status == Status.OK:
            prog.measured += 1
            if prog.best_s is None or median < prog.best_s:
                prog.best_s, prog.best_name, self.best_pred = median, cand.name or cand.key, pred
                self.best_cand = cand
        elif status == Status.PRUNED:
            prog.pruned += 1
        else:
            prog.failed += 1

    def absorb(self, t: StoredTrial) -> None:
        """Learn from a trial stored in the plan DB (an earlier run's, another worker's)."""
        cand = t.to_candidate()
        self.options.update(t.options)
        pred = t.predicted_s or math.inf
        self.predicted[cand.key] = pred
        if t.status != Status.PRUNED:
            self.measured[cand.key] = (t.status, t.measured_s)
        if t.status == Status.OK and t.error is None:   # not a reuse of an earlier trial's
            self.noise.add(t.times)
            self.trust.add(t.corrected_s or pred, t.measured_s)
        if t.status == Status.OK and t.params and t.measured_s <= (self.prog.best_s or math.inf):
            self.incumbent = t.params
        self.note(t.status, cand, pred, t.measured_s)
        if self.config.learn:
            self.learner.observe_stored(t)

    def neighbour(self, rng) -> dict | None:
        return neighbour(self.w, self.space, self.dev, self.incumbent, rng,
                         set(self.measured) | set(self.predicted),
                         correct=self.seconds, flips=self.flips)

    def prune_reason(self, pred: float, corrected: float) -> str | None:
        """Why a candidate predicted ``pred`` s (``corrected`` s with the learned correction)
        is not worth measuring, or None: it is predicted more than the prune factor times
        slower than the best measured candidate.  Corrected against corrected while a
        correction is fitted (the best candidate's corrected prediction, never below its
        measurement), analytic against analytic otherwise.  The factor is the config's, or
        (config None) at most 2, tightened to the model's measured errors
        (:mod:`autotune.search.trust`).

        Why never below the measurement: a correction fitted on other workloads' trials of the
        same database priced msa_row_attention's chained plan, the first measured, at 80 ms
        where it had just run 943 ms, and so pruned the heuristic plan (197 ms corrected,
        129 ms measured later) and the unfused one; the search cached a plan 1.5x slower than
        the heuristic."""
        factor = self.prune_factor()
        if self.best_cand is None or self.best_pred is None:
            return None
        if self.learner.active:
            best = max(self.learner.seconds(self.best_cand), self.prog.best_s or 0.0)
            if corrected > factor * best:
                return (f"corrected prediction {corrected:.3g} s (analytic {pred:.3g} s) > "
                        f"{factor:g} x {best:.3g} s")
            return None
        if pred > factor * self.best_pred:
            return f"predicted {pred:.3g} s > {factor:g} x {self.best_pred:.3g} s"
        return None

    def prune_factor(self) -> float:
        """The factor past the best prediction at which a candidate is pruned, now."""
        fixed = self.config.prune_factor
        return fixed if fixed is not None else self.trust.factor()

    def memory_refusal(self, cand: Candidate) -> str | None:
        """Why ``cand`` cannot run in the memory there is now (None: it fits, or unknown)."""
        avail = self.memory_available() if self.memory_available else None
        if avail is not None and (need := memory_bytes(self.w, cand, self.threads)) > avail:
            return memory_error(need, avail)
        return None

    def prepare_backend(self) -> None:
        """Start the backend's worker (inputs, float64 reference) in the background, unless
        no named plan fits in memory: then the worker and its reference, as large as the
        workload's outputs, are not worth starting early."""
        if any(self.memory_refusal(named_plan(self.space, n)) is None
               for n in ("unfused", "heuristic", "greedy")):
            self.backend.prepare()

    def evaluate(self, trial) -> TrialOutcome:
        """Build the trial's candidate; prune it, refuse it for memory, or measure it."""
        config = self.config
        asked: dict[str, list] = {}

        def choose(name, opts):
            asked[name] = list(opts)
            return trial.suggest_categorical(name, list(opts))

        cand = self.space.build(choose, name=trial.user_attrs.get("name", ""))
        self.options.update(asked)
        try:
            est, corrected = self.learner.predict(cand)
        except Exception as e:
            # a candidate the cost model cannot price is a bug in the space or the model (an
            # illegal partition was one): it fails as data, named in the trial's error, and the
            # search goes on with the others
            self.measured[cand.key] = (Status.FAILED, None)
            return TrialOutcome(candidate=cand, status=Status.FAILED,
                                error=f"{UNPRICED}: {type(e).__name__}: {_first_line(e)}",
                                params=dict(trial.params), options=asked)
        pred = est.total_s
        self.predicted[cand.key] = pred
        times, rel_err, timed_groups = (), None, ()
        if cand.key in self.measured:                 # already measured: reuse, don't rerun
            status, median = self.measured[cand.key]
            error = REUSED
        elif cand.name not in (CHAINED, INLINED) and \
                (error := self.prune_reason(pred, corrected)) is not None:
            # (the chained and inlined plans are measured whatever their predictions: each
            # stands for a whole region of the space the model prices least surely; a column
            # softmax's chain, predicted 3.4x the best, ran 1.2x faster than it)
            status, median = Status.PRUNED, None
        elif (error := self.memory_refusal(cand)) is not None:
            status, median = Status.FAILED, None
            self.measured[cand.key] = (status, median)
        else:
            runs = 2 + self.backend.settings.warmup + self.backend.settings.repeats
            limit = self.run_limit(self.prog.best_s) * runs + self.timeout_floor()
            m = self.backend.measure(cand, limit, self.prog.best_s, leniency(
                pred, self.predicted.values(), config.favourites, self.noise))
            status, median, error = m.status, m.median_s, m.error
            times, rel_err, timed_groups = m.times, m.rel_err, m.groups
            self.measured[cand.key] = (status, median)
            self.noise.add(times if status == Status.OK else ())
            if status == Status.OK:
                self.trust.add(corrected, median)
            self.prog.busy = m.loaded_runs > 0
            self.prog.loaded_runs += m.loaded_runs
            if m.loaded_runs:
                self.loaded.add(cand.key)
        return TrialOutcome(candidate=cand, status=status, predicted_s=pred, measured_s=median,
                            error=error or None, params=dict(trial.params), options=asked,
                            times=times, rel_err=rel_err, corrected_s=corrected,
                            groups=timed_groups)

    def timeout_floor(self) -> float:
        """The least time a run is given (the config's, else the backend kind's)."""
        config = self.config
        return config.min_timeout_s if config.min_timeout_s is not None \
            else self.backend.kind.min_timeout_s

    def run_limit(self, seconds: float | None) -> float:
        """The time one run of a candidate that takes ``seconds`` (None: unknown) is given."""
        return max(self.timeout_floor(), self.config.timeout_factor * (seconds or 0))

    def is_repeat(self, o: TrialOutcome) -> bool:
        """The outcome is of a candidate an earlier trial already had (measured, pruned or
        failed): it teaches the search nothing new."""
        return o.candidate.key in self.seen

    @staticmethod
    def tell(study, trial, o: TrialOutcome) -> None:
        """Tell Optuna the outcome (and nothing else)."""
        if o.status == Status.OK:
            study.tell(trial, o.measured_s)
        elif o.status == Status.PRUNED:
            study.tell(trial, state=TrialState.PRUNED)
        else:
            study.tell(trial, state=TrialState.FAIL)

    def finish(self, study, trial, o: TrialOutcome, on_trial) -> None:
        """Tell Optuna the outcome, update the incumbent and the counts."""
        status, median, cand = o.status, o.measured_s, o.candidate
        self.tell(study, trial, o)
        if status == Status.OK and median <= (self.prog.best_s or math.inf):
            self.incumbent = dict(o.params)
        self.note(status, cand, o.predicted_s, median)
        if status == Status.OK and o.times and self.config.learn:    # a fresh measurement
            self.learner.observe(cand, median, o.groups)
        self.prog.new += 1
        self.prog.last = f"{cand.name or cand.key}: {status}" + (
            f" {median:.4g} s" if median else "")
        if on_trial:
            on_trial(self.prog)

    def seconds(self, cand: Candidate) -> float:
        """The corrected prediction for ``cand``; infinite where it cannot be priced (its
        trial records why: :meth:`evaluate`)."""
        try:
            return self.learner.seconds(cand)
        except Exception:
            return math.inf

    def queue(self) -> list[tuple[dict, str]]:
        """(params, name) of the seed plans (the named plans, and the chained and inlined
        plans where the space has them), fastest predicted first, then of the model's
        favourites.  Their predictions are noted at once: whether a candidate is one of the
        model's favourites (never given up on after one run) is then decided among everything
        the model has ranked, not among the few trials run so far; and the first plan measured
        is the likely best, so a slow named plan after it is given up on after one run
        instead of being timed in full (the unfused plan at N=702: 3 runs of 2.8 s).  No
        favourites for a budget the seeds fill."""
        named = seed_plans(self.space)
        named.sort(key=self.seconds)
        q = list(named)
        if self.config.budget > len(named):
            # the climb prices thousands of candidates (10 s at trimul N=8); a budget the
            # seeds fill would never measure what it finds
            q += model_favourites(self.w, self.space, self.dev, self.config,
                                  {c.key for c in named}, correct=self.seconds)
        out = []
        for cand in q:
            try:
                self.predicted[cand.key] = self.learner.predict(cand)[0].total_s
            except Exception:           # one that cannot be priced fails as its trial (evaluate)
                pass
            params = params_of(self.space, cand)
            if params is not None:
                out.append((params, cand.name))
        return out


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""
