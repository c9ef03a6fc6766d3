"""What `autotune show-best` reports: the best plan per key, with speedups and trial counts, and
whether the best is a confirmation's winner."""
from __future__ import annotations

import json

from db.keys import PlanKey, stale_reasons
from db.records import BestPlan, Status, StoredTrial, is_confirmation
from db.store import PlanDB
from search_spaces.candidate import Candidate
from search_spaces.trees import tree_text

from autotune.environment import detect


def _confirmation(trials: list[StoredTrial], best: BestPlan) -> list[StoredTrial]:
    """The rows of the confirmation whose winner ``best`` is ([] when it is none's)."""
    if not is_confirmation(best.study):
        return []
    won = next((t for t in trials if t.study == best.study and
                t.number == best.trial_number), None)
    return [t for t in trials if won and t.study == won.study and t.created == won.created]


def _named_times(trials: list[StoredTrial], batch: list[StoredTrial]
                 ) -> tuple[dict[str, float], dict[str, float]]:
    """Best measured time of each named plan under a key (unfused, greedy, heuristic), and
    the predicted time of those never measured (pruned: greedy at full size, typically).
    A named plan in the confirmation ``batch`` that chose the best is compared by its median
    there (measured side by side with the winner), not by its fastest single run."""
    measured: dict[str, float] = {}
    predicted: dict[str, float] = {}
    confirmed = {t.name: t.measured_s for t in batch if t.name and t.status == Status.OK}
    for t in trials:
        name = t.name
        if not name:
            continue
        if t.status == Status.OK:
            if name not in measured or t.measured_s < measured[name]:
                measured[name] = t.measured_s
        elif t.predicted_s is not None:
            predicted[name] = t.predicted_s
    measured.update(confirmed)
    return measured, {k: v for k, v in predicted.items() if k not in measured}


def plan_summary(cand: Candidate) -> str:
    """One line: contraction orders, inlined intermediates, fused edges, library groups,
    stacked siblings, non-identity layouts."""
    lib = [s.anchor + (f" ({s.precision})" if s.precision else "")
           for s in cand.schedules if s.impl == "library"]
    parts = [f"{len(cand.schedules)} groups", f"fused {', '.join(cand.fused) or 'nothing'}"]
    if cand.inlined:
        parts.insert(0, "inlined " + ", ".join(cand.inlined))
    if cand.orders:
        parts.insert(0, "split " + ", ".join(f"{stmt} as {tree_text(t)}"
                                             for stmt, t in cand.orders))
    if lib:
        parts.append(f"library GEMM for {', '.join(lib)}")
    if cand.stacks:
        parts.append("stacked " + ", ".join("+".join(s) for s in cand.stacks))
    if cand.layouts:
        parts.append("layouts " + ", ".join(f"{t}{list(p)}" for t, p in cand.layouts))
    return "; ".join(parts)


def best_report(db: PlanDB, workload_hash: str | None = None) -> list[dict]:
    """Rows for show-best, one per plan key, JSON-serialisable."""
    try:
        rows = db.best_rows(workload_hash)
        current = None
        cpu = detect("cpu")
        out = []
        for b in rows:
            device = json.loads(b.key.device_json)
            if device.get("kind") == "cpu":
                current = PlanKey.for_env(b.key.workload_hash, cpu)
            reasons = stale_reasons(b.key.parts(), current) if current else []
            trials = db.trials(b.plan_key)
            batch = _confirmation(trials, b)
            named, named_pred = _named_times(trials, batch)
            wl = db.workload(b.key.workload_hash) or {}
            dims = json.loads(wl.get("canonical_json", "{}")).get("dims", {})
            cand = b.to_candidate()
            out.append({
                "workload": b.workload_name, "dims": dims, "plan_key": b.key.key,
                "device": device.get("name", ""), "measured_s": b.measured_s,
                "predicted_s": b.predicted_s, "study": b.study,
                "trial_number": b.trial_number, "updated": b.updated,
                "speedup": {n: t / b.measured_s for n, t in named.items()},
                "named_s": named, "named_predicted_s": named_pred,
                "trials": db.trial_counts(b.plan_key),
                "confirmed": {"rounds": max(len(t.times) for t in batch),
                              "finalists": len(batch)} if batch else None,
                "stale": ("stale: " + ", ".join(reasons) + " changed") if reasons else "",
                "plan": plan_summary(cand), "candidate": cand.to_dict()})
        return out
    finally:
        db.close()
