"""`autotune bench --all`: one row per benchmarked workload, the tuned plan against its best peer
and its heuristic plan, as a table, a JSON record and a bar chart.

Each row comes from that workload's own one-process bench run (interleaved rounds, medians):
ratios are never formed across runs.  ``vs_best_peer`` < 1 means the tuned plan beat every peer
that ran correctly; ``vs_heuristic`` <= 1.05 is the issue's "within 5 % of the fixed rule or
faster" (the heuristic plan itself, when the search cached it, passes).  A peer that was
skipped, failed or gave wrong results is no contender.
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from db.records import Status

from autotune.bench.result import PEER_NAMES, SAME_PLAN, BenchResult
from autotune.report.units import fmt_s

HEURISTIC_SLACK = 1.05


@dataclass(frozen=True)
class SummaryRow:
    """One workload's bench run in one line."""
    workload: str
    dims: dict
    best_s: float | None
    heuristic_s: float | None
    best_peer: str | None               # the fastest peer that ran correctly
    best_peer_s: float | None
    vs_best_peer: float | None          # best_s / best_peer_s
    vs_heuristic: float | None          # best_s / heuristic_s
    peers_s: dict                       # every correct peer's median
    json_path: str | None
    error: str = ""                     # why the run made no row of figures
    # the search cached the heuristic plan itself: the two rows time one plan, so their
    # ratio is the rounds' noise and no verdict
    same_as_heuristic: bool = False

    @property
    def wins(self) -> bool:
        """Ahead of every peer and within HEURISTIC_SLACK of the heuristic plan or faster."""
        return self.vs_best_peer is not None and self.vs_best_peer < 1 and \
            (self.vs_heuristic is None or self.same_as_heuristic
             or self.vs_heuristic <= HEURISTIC_SLACK)


def _ok(c) -> float | None:
    return c.median_s if c is not None and c.status == Status.OK else None


def summary_row(result: BenchResult) -> SummaryRow:
    """The row of one bench run."""
    best, heur = _ok(result.contender("best")), _ok(result.contender("heuristic"))
    same = (h := result.contender("heuristic")) is not None and h.note == SAME_PLAN
    peers = {n: s for n in PEER_NAMES if (s := _ok(result.contender(n))) is not None}
    top = min(peers, key=peers.get) if peers else None
    return SummaryRow(
        result.workload, dict(result.dims), best, heur, top, peers.get(top),
        best / peers[top] if best and top else None, best / heur if best and heur else None,
        peers, result.json_path, same_as_heuristic=same)


def failed_row(workload: str, dims: dict, error: str) -> SummaryRow:
    """The row of a workload whose bench could not run."""
    return SummaryRow(workload, dims, None, None, None, None, None, None, {}, None, error)


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def format_summary(rows: list[SummaryRow]) -> str:
    """The table: per workload the best plan, its best peer, the two ratios, a verdict."""
    head = (f"{'workload':28s}{'best':>11s}{'best peer':>22s}{'vs peer':>9s}"
            f"{'vs heur.':>9s}  verdict")
    lines = [head, "-" * len(head)]
    for r in rows:
        if r.error:
            lines.append(f"{r.workload:28s}  failed: {r.error}")
            continue
        peer = f"{r.best_peer} {fmt_s(r.best_peer_s)}" if r.best_peer else "no peer ran"
        verdict = "wins" if r.wins else ("behind a peer" if r.vs_best_peer is None
                                         or r.vs_best_peer >= 1 else "behind the heuristic")
        heur = "same" if r.same_as_heuristic else _x(r.vs_heuristic)
        lines.append(f"{r.workload:28s}{fmt_s(r.best_s):>11s}{peer:>22s}"
                     f"{_x(r.vs_best_peer):>9s}{heur:>9s}  {verdict}")
    won = sum(r.wins for r in rows)
    lines.append(f"{won} of {len(rows)} workloads: tuned plan ahead of every peer and within "
                 f"{HEURISTIC_SLACK:.2f}x of the heuristic plan or faster")
    return "\n".join(lines)


def save_summary(rows: list[SummaryRow], path: str | os.PathLike, command: str,
                 device: str) -> Path:
    """The JSON record (atomically): the rows, each with its verdict, and the command."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"command": command, "device": device,
           "wins": sum(r.wins for r in rows), "workloads": len(rows),
           "rows": [{**asdict(r), "wins": r.wins} for r in rows]}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=float) + "\n")
    os.replace(tmp, path)
    return path
