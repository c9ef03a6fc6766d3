"""The cost model's result types: frozen and JSON-serialisable."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FusedProducer:
    """A producer evaluated inside another op's tiles, and how often its body runs per element."""
    producer: str
    recompute_factor: float


@dataclass(frozen=True)
class GroupCost:
    """Predicted cost of one fused group (one kernel / one loop nest / one library call)."""
    ops: tuple[str, ...]
    anchor: str
    impl: str
    tiles: tuple[int, ...]
    predicted_s: float
    flops: float               # every body evaluation, recomputation included
    recomputed_flops: float    # the part of the work that recomputes what was already computed
    transcendentals: float
    bytes: float               # DRAM traffic, with reloads
    unique_bytes: float        # each tensor touched once
    launches: int
    bound: str                 # "compute" | "memory"
    fused: tuple[FusedProducer, ...]
    chain: str = ""            # an online-softmax chain group: what it walks (else empty)
    # generated loops: flops whose innermost loop walks an operand with a stride (scalar,
    # gathers), and flops whose innermost loop is a reduction (one dependent chain of adds);
    # priced by the roofline only through the SIMD fill, features of the learned correction
    strided_flops: float = 0.0
    chained_flops: float = 0.0

    def to_dict(self) -> dict:
        return {"ops": list(self.ops), "anchor": self.anchor, "impl": self.impl,
                "tiles": list(self.tiles), "predicted_s": self.predicted_s, "flops": self.flops,
                "recomputed_flops": self.recomputed_flops,
                "transcendentals": self.transcendentals, "bytes": self.bytes,
                "unique_bytes": self.unique_bytes, "launches": self.launches,
                "bound": self.bound,
                "fused": [{"producer": f.producer, "recompute_factor": f.recompute_factor}
                          for f in self.fused],
                **({"chain": self.chain} if self.chain else {}),
                **({"strided_flops": self.strided_flops} if self.strided_flops else {}),
                **({"chained_flops": self.chained_flops} if self.chained_flops else {})}


@dataclass(frozen=True)
class CostEstimate:
    """Predicted time of a candidate on a device, with its per-group breakdown."""
    workload: str
    dims: dict
    device: str
    plan: str
    total_s: float
    groups: tuple[GroupCost, ...]

    def to_dict(self) -> dict:
        return {"workload": self.workload, "dims": dict(self.dims), "device": self.device,
                "plan": self.plan, "total_s": self.total_s,
                "groups": [g.to_dict() for g in self.groups]}

    @property
    def flops(self) -> float:
        return sum(g.flops for g in self.groups)

    @property
    def recomputed_flops(self) -> float:
        return sum(g.recomputed_flops for g in self.groups)

    @property
    def bytes(self) -> float:
        return sum(g.bytes for g in self.groups)
