"""What `autotune show-best` reports: the best plan per key, with speedups and trial counts."""
from __future__ import annotations

import json

from db.keys import PlanKey, stale_reasons
from db.records import Status
from db.store import PlanDB
from search_spaces.candidate import Candidate
from search_spaces.trees import tree_text

from autotune.environment import detect


def _named_times(db: PlanDB, plan_key: str) -> tuple[dict[str, float], dict[str, float]]:
    """Best measured time of each named plan under a key (unfused, greedy, heuristic), and
    the predicted time of those never measured (pruned: greedy at full size, typically)."""
    measured: dict[str, float] = {}
    predicted: dict[str, float] = {}
    for t in db.trials(plan_key):
        name = t.name
        if not name:
            continue
        if t.status == Status.OK:
            if name not in measured or t.measured_s < measured[name]:
                measured[name] = t.measured_s
        elif t.predicted_s is not None:
            predicted[name] = t.predicted_s
    return measured, {k: v for k, v in predicted.items() if k not in measured}


def plan_summary(cand: Candidate) -> str:
    """One line: contraction orders, fused edges, library groups, non-identity layouts."""
    lib = [s.anchor for s in cand.schedules if s.impl == "library"]
    parts = [f"{len(cand.schedules)} groups", f"fused {', '.join(cand.fused) or 'nothing'}"]
    if cand.orders:
        parts.insert(0, "split " + ", ".join(f"{stmt} as {tree_text(t)}"
                                             for stmt, t in cand.orders))
    if lib:
        parts.append(f"library GEMM for {', '.join(lib)}")
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
            named, named_pred = _named_times(db, b.plan_key)
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
                "stale": ("stale: " + ", ".join(reasons) + " changed") if reasons else "",
                "plan": plan_summary(cand), "candidate": cand.to_dict()})
        return out
    finally:
        db.close()
