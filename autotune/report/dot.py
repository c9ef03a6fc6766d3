"""The dispatch graph of a candidate in Graphviz DOT.  Pure: (workload, candidate) -> text.

Each fused group is a ``subgraph cluster_K`` holding its ops (the anchor drawn bold).  Tensors
that cross group boundaries are materialized in memory: they are drawn as edges from the
producing op to each consuming op, labelled with the tensor's name and size in bytes.  Program
inputs and outputs are plain nodes outside every cluster.  Fused (in-register / in-tile) reads
inside a group are dotted edges without a size: nothing goes through memory there.
"""
from __future__ import annotations

import math

from search_spaces.candidate import Candidate
from search_spaces.partition import groups
from search_spaces.rewrite import rewritten
from search_spaces.workload import Workload


def _q(text: str) -> str:
    """A DOT double-quoted string."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def human_bytes(n: float) -> str:
    """``1536`` -> ``"1.5 KiB"`` (binary prefixes; bytes below 1 KiB as an integer)."""
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def tensor_bytes(w: Workload, tensor: str) -> int:
    """Size of ``tensor`` in memory (4 bytes per float32 element, 8 per float64)."""
    item = 4 if w.dtype == "float32" else 8
    return math.prod(w.shapes[tensor]) * item


def _size_label(tensor: str, size: int) -> str:
    return f"{tensor} {human_bytes(size)} ({size} bytes)"


def dispatch_dot(w: Workload, cand: Candidate, title: str | None = None) -> str:
    """Graphviz DOT text of ``cand``'s groups, materialized tensors and inputs (of the
    workload the candidate runs: its contraction orders applied)."""
    w = rewritten(w, cand)
    gs = groups(w, cand.fused_pairs)
    group_of = {m: k for k, g in enumerate(gs) for m in g.members}
    op_id = lambda name: _q(f"op:{name}")
    label = title or f"{w.name} - {cand.name or cand.key}"
    lines = [f"digraph {_q(w.name)} {{",
             f"  label={_q(label)};",
             "  labelloc=t;",
             "  rankdir=TB;",
             "  node [shape=box, fontname=\"Helvetica\"];",
             "  edge [fontname=\"Helvetica\", fontsize=10];"]
    # inputs: plain nodes
    for name in w.input_names:
        lines.append(f"  {_q('in:' + name)} [label={_q(name)}, shape=plaintext];")
    # one cluster per group
    for k, g in enumerate(gs):
        sched = cand.schedule(g.anchor)
        tiles = ",".join(str(t) for t in sched.tiles)
        head = f"group {k}: {g.anchor} ({sched.impl}" + (f", tiles {tiles})" if tiles else ")")
        lines.append(f"  subgraph cluster_{k} {{")
        lines.append(f"    label={_q(head)};")
        lines.append("    style=rounded;")
        for m in g.members:
            style = ", style=bold" if m == g.anchor else ""
            lines.append(f"    {op_id(m)} [label={_q(m)}{style}];")
        lines.append("  }")
    # edges: inputs -> consumers, tensors between groups (materialized) or inside (fused)
    for op in w.ops:
        for t in op.inputs():
            if t in w.input_names:
                lines.append(f"  {_q('in:' + t)} -> {op_id(op.out)} "
                             f"[label={_q(_size_label(t, tensor_bytes(w, t)))}];")
            elif group_of[t] == group_of[op.out]:
                lines.append(f"  {op_id(t)} -> {op_id(op.out)} [style=dotted];")
            else:
                lines.append(f"  {op_id(t)} -> {op_id(op.out)} "
                             f"[label={_q(_size_label(t, tensor_bytes(w, t)))}];")
    # program outputs: plain nodes fed by their ops
    for name in w.outputs:
        lines.append(f"  {_q('out:' + name)} [label={_q(name + ' (output)')}, shape=plaintext];")
        lines.append(f"  {op_id(name)} -> {_q('out:' + name)} "
                     f"[label={_q(_size_label(name, tensor_bytes(w, name)))}];")
    lines.append("}")
    return "\n".join(lines) + "\n"
