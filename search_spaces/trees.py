"""Contraction trees: binary trees over a statement's factors (leaves numbered from 0), in a
canonical form (children ordered by their smallest leaf) so that equal orders compare equal.
Stored in candidate JSON as nested lists (``[[0, 1], 2]``); a search parameter's value is the
compact text (``((0,1),2)``)."""
from __future__ import annotations

import json
from typing import Union

Tree = Union[int, tuple["Tree", "Tree"]]


def leaves_of(t: Tree) -> tuple[int, ...]:
    """The leaves, left to right."""
    return (t,) if isinstance(t, int) else leaves_of(t[0]) + leaves_of(t[1])


def canonical(t) -> Tree:
    """Nested lists or tuples -> the canonical tree (children ordered by their smallest leaf)."""
    if isinstance(t, int) and not isinstance(t, bool):
        return t
    if isinstance(t, (list, tuple)) and len(t) == 2:
        a, b = canonical(t[0]), canonical(t[1])
        return (a, b) if min(leaves_of(a)) < min(leaves_of(b)) else (b, a)
    raise ValueError(f"not a contraction tree: {t!r}")


def tree_text(t: Tree) -> str:
    """``((0,1),2)``: the compact form used as a search-parameter value."""
    return str(t) if isinstance(t, int) else f"({tree_text(t[0])},{tree_text(t[1])})"


def parse_tree(text: str) -> Tree:
    """The tree of its compact text."""
    return canonical(json.loads(text.replace("(", "[").replace(")", "]")))


def to_json(t: Tree):
    """Nested lists, for JSON."""
    return t if isinstance(t, int) else [to_json(t[0]), to_json(t[1])]
