"""What a search is configured with and reports: its knobs, its running counts, its result, the
Optuna sampler it uses and the storage several workers of one search share."""
from __future__ import annotations

from dataclasses import dataclass, field

import optuna

from db.keys import PlanKey
from db.records import BestPlan

SAMPLERS = ("tpe", "random", "gp", "cmaes")


@dataclass(frozen=True)
class SearchConfig:
    """Knobs of one search (the CLI's options)."""
    budget: int = 200
    sampler: str = "tpe"
    seed: int = 0
    # skip a candidate predicted this many times slower than the best; None: at most 2,
    # tightened to the model's out-of-sample errors as they are measured (autotune.search.trust)
    prune_factor: float | None = None
    timeout_factor: float = 10.0     # a run may take this many times the best so far
    min_timeout_s: float | None = None   # None: the backend kind's (BackendKind.min_timeout_s)
    model_seeds: int = 12            # model-ranked candidates enqueued after the named plans
    model_pool: int = 300            # random candidates the model also ranks for them
    # coordinate-descent rounds of the model from the named plans before the first trial
    # (a round that improves nothing ends the climb).  Two since kernel pairs: in the first
    # round fuse:ga->a is visited (alphabetically) before impl:ga turns ga to the kernel, so
    # the epilogue and the pair it opens are only reachable in a second; at trimul N=702 it
    # made every favourite a pair plan (predicted 1.309 s against 1.346 s) for 12.7 s of climb
    # against 9.5 s.  (Before pairs, a second round changed none of the two best favourites
    # at N=702 or attention.)  The local search climbs on from the measured incumbent.
    climb_rounds: int = 2
    # one trial in local_every is the model's pick among mutations of the incumbent; the rest
    # are the sampler's.  Every other (2) measured ~100 near-ties of the incumbent in a 200-trial
    # N=702 search, each ~10 s, that the model ranked within 0.1 % of it and a 2-core machine's
    # run-to-run noise (~10 %) could not tell apart
    local_every: int = 3
    storage: str | None = None       # Optuna storage shared by several workers (see open_storage)
    # At the end, the finalists are re-measured side by side in confirm_rounds interleaved
    # rounds (0: no confirmation) and the winner by median is cached: the `finalists` fastest
    # measured candidates, the named plans, those of the `finalists` best-predicted measured
    # ones that ran only once, and the best stored before (see autotune.search.confirm).
    confirm_rounds: int = 3
    # ... more rounds (up to max_confirm_rounds) while all of them fit in confirm_s: a round of
    # a plan of a millisecond is a tenth of a second (calls_per_round), and three of them are
    # three samples of a shared host's slow seconds.  Attention (S=256): a finalist measured
    # 0.85, 0.66 and 0.87 ms in its three rounds where the others read 0.67-0.69 in each, and
    # lost the confirmation; rebuilt and timed in 41 interleaved single calls it ran 0.744 ms
    # against the winner's 0.771.  At N=702 (8 finalists of ~1 s) one round takes the budget.
    confirm_s: float = 6.0
    max_confirm_rounds: int = 11
    finalists: int = 4
    # a candidate the model ranks among this many best predictions so far is never given up
    # on after one run: a slow first run of a model favourite is made again
    favourites: int = 4
    # prune and propose with the correction learnt from measurements (autotune.search.learning)
    # rather than the analytic model alone
    learn: bool = True


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
    busy: bool = False               # the last measurement had runs taken under load
    loaded_runs: int = 0             # runs this process made again because of load


@dataclass(frozen=True)
class Confirmation:
    """What a search's confirmation found: ``finalists`` (their labels: name or key) re-measured
    side by side in ``rounds`` interleaved rounds, the winner by median (its label and
    seconds), how many finalists failed, and the runs made again because of load."""
    rounds: int
    finalists: tuple[str, ...]
    winner: str
    winner_s: float
    failed: int = 0
    loaded_runs: int = 0


@dataclass
class SearchResult:
    """What a search returns: its key and study, the counts, the best plan stored and the
    confirmation that chose it (None: none ran)."""
    key: PlanKey
    study: str
    progress: Progress
    best: BestPlan | None = field(default=None)
    confirmation: Confirmation | None = None


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
