"""A candidate plan: a fusion partition plus per-group schedule choices.  Frozen, JSON-serialisable."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import cached_property

from .kernel import KernelParams
from .trees import Tree, canonical, to_json

IMPL_LOOP = "loop"        # one generated loop nest per group (producers fused into its tiles)
IMPL_LIBRARY = "library"  # a lone contraction handed to BLAS / cuBLAS in the candidate's layouts
IMPL_KERNEL = "kernel"    # a lone contraction run by the generated GEMM kernel (CPU), see kernel.py
STANDALONE_IMPLS = (IMPL_LIBRARY, IMPL_KERNEL)   # contractions that run alone, nothing fused


@dataclass(frozen=True)
class GroupSchedule:
    """How one fused group runs.

    ``tiles`` gives a tile size per parallel index of the anchor (a size >= the extent means the
    whole extent).  ``impl`` is ``loop`` or, for a group holding a single contraction,
    ``library`` or ``kernel``; a ``kernel`` group carries its kernel's parameters.
    ``chain_block``: for a group that is an online-softmax chain (search_spaces.chain) walked in
    blocks of its reduced index, the block size; 0 for every other group.
    ``precision``: for a library contraction, its arithmetic (search_spaces.precision: "fp32",
    "3xtf32", "tf32"); "" for the workload's default.
    """
    anchor: str
    tiles: tuple[int, ...]
    impl: str = IMPL_LOOP
    kernel: KernelParams | None = None
    chain_block: int = 0
    precision: str = ""

    def to_dict(self) -> dict:
        d = {"anchor": self.anchor, "tiles": list(self.tiles), "impl": self.impl}
        # each absent unless used: the keys of other plans stay as they were
        if self.kernel is not None:
            d["kernel"] = self.kernel.to_dict()
        if self.chain_block:
            d["chain_block"] = self.chain_block
        if self.precision:
            d["precision"] = self.precision
        return d

    @staticmethod
    def from_dict(d: dict) -> "GroupSchedule":
        kern = KernelParams.from_dict(d["kernel"]) if d.get("kernel") else None
        return GroupSchedule(d["anchor"], tuple(int(t) for t in d["tiles"]),
                             d.get("impl", IMPL_LOOP), kern, int(d.get("chain_block", 0)),
                             str(d.get("precision", "")))


@dataclass(frozen=True)
class Candidate:
    """A fusion partition (the fused producer->consumer edges), the storage layout of every
    materialized intermediate (a permutation of its dims, outermost first) and one schedule per
    group (keyed by its anchor).  ``name`` labels the named plans (unfused, greedy, heuristic).

    ``orders``: the product statements split into pairwise contractions, each with its order (a
    binary tree over the statement's factors, see search_spaces.orders).  Partition, layouts and
    schedules then refer to the rewritten workload (search_spaces.rewrite.rewritten), whose new
    intermediates (``r__1``, ...) are ordinary tensors.

    ``stacks``: sibling contractions run as one library GEMM, each tuple in program order
    (search_spaces.siblings); the stack runs in the first member's place.

    ``inlined``: elementwise intermediates recomputed in each of their consumers instead of
    stored (search_spaces.inline), ops of the workload after its orders."""
    fused: tuple[str, ...]
    layouts: tuple[tuple[str, tuple[int, ...]], ...]
    schedules: tuple[GroupSchedule, ...]
    name: str = ""
    orders: tuple[tuple[str, Tree], ...] = ()
    stacks: tuple[tuple[str, ...], ...] = ()
    inlined: tuple[str, ...] = ()

    def layout(self, tensor: str, rank: int) -> tuple[int, ...]:
        for t, perm in self.layouts:
            if t == tensor:
                return perm
        return tuple(range(rank))

    def schedule(self, anchor: str) -> GroupSchedule:
        for s in self.schedules:
            if s.anchor == anchor:
                return s
        raise KeyError(anchor)

    @property
    def fused_pairs(self) -> set[tuple[str, str]]:
        return {tuple(e.split("->")) for e in self.fused}  # type: ignore[misc]

    def to_dict(self) -> dict:
        d = {"fused": list(self.fused),
             "layouts": {t: list(p) for t, p in self.layouts},
             "schedules": [s.to_dict() for s in self.schedules],
             "name": self.name}
        if self.orders:   # absent when nothing is split: such plans keep their keys
            d["orders"] = {stmt: to_json(t) for stmt, t in self.orders}
        if self.stacks:   # likewise absent when nothing is stacked
            d["stacks"] = [list(s) for s in self.stacks]
        if self.inlined:  # and when nothing is inlined
            d["inlined"] = list(self.inlined)
        return d

    def stack(self, member: str) -> tuple[str, ...]:
        """The stack ``member`` runs in (empty if none)."""
        return next((s for s in self.stacks if member in s), ())

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_dict(d: dict) -> "Candidate":
        return Candidate(
            fused=tuple(sorted(d["fused"])),
            layouts=tuple(sorted((t, tuple(int(x) for x in p)) for t, p in d["layouts"].items())),
            schedules=tuple(sorted((GroupSchedule.from_dict(s) for s in d["schedules"]),
                                   key=lambda s: s.anchor)),
            name=d.get("name", ""),
            orders=tuple(sorted((stmt, canonical(t)) for stmt, t in d.get("orders", {}).items())),
            stacks=tuple(sorted(tuple(str(m) for m in s) for s in d.get("stacks", []))),
            inlined=tuple(sorted(str(t) for t in d.get("inlined", []))))

    @staticmethod
    def from_json(text: str) -> "Candidate":
        return Candidate.from_dict(json.loads(text))

    @cached_property
    def key(self) -> str:
        """Identity of what runs (the name is a label, not part of it).  Kept once computed
        (a frozen candidate's key cannot change): a search asked for keys ~30,000 times, 12 s
        of hashing at trimul N=702."""
        d = self.to_dict()
        d.pop("name")
        blob = json.dumps(d, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def make_candidate(fused, layouts: dict, schedules, name: str = "", orders=(),
                   stacks=(), inlined=()) -> Candidate:
    """Canonical constructor: sorted edges, layouts, schedules, orders and stacks, so equal
    plans compare equal (a stack keeps its members' program order)."""
    return Candidate(tuple(sorted(fused)),
                     tuple(sorted((t, tuple(p)) for t, p in layouts.items()
                                  if tuple(p) != tuple(range(len(p))))),
                     tuple(sorted(schedules, key=lambda s: s.anchor)), name,
                     tuple(sorted((stmt, canonical(t)) for stmt, t in dict(orders).items())),
                     tuple(sorted(tuple(s) for s in stacks)), tuple(sorted(inlined)))
