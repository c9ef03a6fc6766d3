"""The optional ``[space]`` table of a workload: restrictions on the derived search space.

```toml
[space]
tiles = [8, 16, 32, 64]            # allowed tile sizes (powers of two)
forbid_fusion = ["a->t"]           # producer->consumer edges never fused
force_fusion = ["mu->xc"]          # edges always fused
contraction_impls = ["library"]    # subset of library, loop, kernel
layouts = "auto"                   # "auto" (identity and GEMM-friendly orders), "all", "identity"
chains = false                     # no online-softmax chain fusion (search_spaces.chain)
stacks = false                     # no sibling contractions stacked (search_spaces.siblings)
inline = false                     # no intermediate inlined (search_spaces.inline)
```
"""
from __future__ import annotations

from typing import Callable

from .ir import Op

SPACE_KEYS = {"tiles", "forbid_fusion", "force_fusion", "contraction_impls", "layouts", "chains",
              "stacks", "inline"}
# a library GEMM, a generated tiled loop nest, or the generated GEMM kernel (CPU backend)
IMPLS = ("library", "loop", "kernel")


def edges_of(ops: list[Op] | tuple[Op, ...]) -> list[tuple[str, str]]:
    """Every producer->consumer edge between ops (inputs excluded), in program order."""
    defined = {op.out for op in ops}
    return [(t, op.out) for op in ops for t in op.inputs() if t in defined]


def validate_space(raw, ops, err: Callable[..., Exception]) -> dict:
    """Check the ``[space]`` table; returns it normalised (sorted lists)."""
    if not isinstance(raw, dict):
        raise err("[space] must be a table")
    for k in raw:
        if k not in SPACE_KEYS:
            raise err(f"[space] has unknown key {k!r} (allowed: {', '.join(sorted(SPACE_KEYS))})", k)
    out: dict = {}
    if "tiles" in raw:
        t = raw["tiles"]
        if not isinstance(t, list) or not t or not all(
                isinstance(x, int) and not isinstance(x, bool) and 0 < x <= 4096 and x & (x - 1) == 0
                for x in t):
            raise err("[space] tiles must be a non-empty list of powers of two in [1, 4096]", "tiles")
        out["tiles"] = sorted(set(t))
    edges = set(edges_of(ops))
    for key in ("forbid_fusion", "force_fusion"):
        if key not in raw:
            continue
        vals = raw[key]
        if not isinstance(vals, list) or not all(isinstance(v, str) for v in vals):
            raise err(f"[space] {key} must be a list of \"producer->consumer\" strings", key)
        parsed = []
        for v in vals:
            parts = [p.strip() for p in v.split("->")]
            if len(parts) != 2 or (parts[0], parts[1]) not in edges:
                raise err(f"[space] {key}: {v!r} is not a producer->consumer edge of the program", key)
            parsed.append(f"{parts[0]}->{parts[1]}")
        out[key] = sorted(set(parsed))
    if set(out.get("forbid_fusion", [])) & set(out.get("force_fusion", [])):
        raise err("[space] an edge is both forbidden and forced", "force_fusion")
    if "contraction_impls" in raw:
        v = raw["contraction_impls"]
        if not isinstance(v, list) or not v or not all(x in IMPLS for x in v):
            raise err(f"[space] contraction_impls must be a non-empty subset of {list(IMPLS)}",
                      "contraction_impls")
        out["contraction_impls"] = sorted(set(v))
    if "layouts" in raw:
        if raw["layouts"] not in ("auto", "all", "identity"):
            raise err("[space] layouts must be \"auto\", \"all\" or \"identity\"", "layouts")
        out["layouts"] = raw["layouts"]
    for key in ("chains", "stacks", "inline"):
        if key in raw:
            if not isinstance(raw[key], bool):
                raise err(f"[space] {key} must be true or false", key)
            out[key] = raw[key]
    return out
