"""The record of one benchmark run: a row per contender, the machine, the versions, the floor;
saved as JSON under ``bench/results`` and read back by the table and the plots."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from db.records import Status
from search_spaces.workload import Workload

PEER_NAMES = ("jax", "torch", "inductor", "iree")
PLAN_NAMES = ("best", "heuristic", "unfused", "greedy")
ORDER = PLAN_NAMES + PEER_NAMES
LABELS = {"jax": "jax (XLA)", "inductor": "inductor (torch.compile)", "torch": "torch (eager)"}
DEFAULT_OUT = Path("bench") / "results"
SAME_PLAN = "the same plan as best"    # a named plan's note when the search cached that plan


@dataclass(frozen=True)
class Contender:
    """One row of the benchmark."""
    name: str
    kind: str                          # "plan" | "peer"
    status: Status                     # OK, WRONG, FAILED, SKIPPED or TIMED_OUT
    median_s: float | None = None
    min_s: float | None = None
    times_s: tuple[float, ...] = ()
    ratio_to_xla: float | None = None  # median / XLA's median
    ratio_to_floor: float | None = None
    predicted_s: float | None = None   # the cost model's prediction (plans only)
    rel_err: float | None = None
    build_s: float | None = None       # construction (compiles of plans, lowering of peers)
    first_call_s: float | None = None  # the checked run (JIT compiles of peers happen here)
    calls_per_round: int = 1           # back-to-back calls a round's figure is the mean of
    error: str = ""
    note: str = ""
    detail: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return LABELS.get(self.name, self.name)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["times_s"] = list(self.times_s)
        return d


@dataclass(frozen=True)
class BenchResult:
    """Everything one benchmark run found; ``to_dict()`` is its JSON record."""
    workload: str
    dims: dict
    dtype: str
    workload_hash: str
    device: str                        # "cpu" | "cuda"
    device_name: str
    rtol: float
    seed: int
    rounds: int
    command: str
    date: str
    machine: dict
    versions: dict
    db: str
    best_plan: dict
    search: dict | None
    reference_s: float
    floor: dict
    contenders: tuple[Contender, ...]
    json_path: str | None = None

    def contender(self, name: str) -> Contender | None:
        return next((c for c in self.contenders if c.name == name), None)

    @property
    def xla_median_s(self) -> float | None:
        c = self.contender("jax")
        return c.median_s if c is not None else None

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "contenders"}
        d["xla_median_s"] = self.xla_median_s
        d["contenders"] = {c.name: c.to_dict() for c in self.contenders}
        return d


def dims_tag(w: Workload) -> str:
    """``N256-C128``: the dims in a file name."""
    return "-".join(f"{k}{v}" for k, v in w.dims)


def result_name(w: Workload, device: str) -> str:
    return f"bench-{w.name}-{dims_tag(w)}-{device}.json"


def save_result(result: BenchResult, path: str | os.PathLike) -> Path:
    """Write the JSON record (atomically)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(result.to_dict(), indent=2, default=float) + "\n")
    os.replace(tmp, path)
    return path


def load_result(path: str | os.PathLike) -> dict:
    """A saved record, as the dict :meth:`BenchResult.to_dict` made."""
    return json.loads(Path(path).read_text())
