"""The shape of the code base: no import cycle between the project's modules (lazy imports inside
functions included: they hide a cycle, they do not remove it), no module over 400 lines, and a
small top level of ``autotune/`` with the pipeline in subpackages."""
from __future__ import annotations

import ast
from pathlib import Path

from tests.support import ROOT

PACKAGES = ("autotune", "costmodel", "search_spaces", "db")
MAX_LINES = 400


def project_modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the four packages."""
    mods = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def imports_of(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (module level or lazily)."""
    is_pkg = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_pkg else anchor[:-1]
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import mod`` imports the module pkg.mod; ``from mod import name`` mod
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                       for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in mods:       # ``import a.b.c`` where only a.b is ours, say
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_project_modules():
    mods = project_modules()
    graph = {name: imports_of(name, path, mods) for name, path in mods.items()}
    assert graph["autotune.api"], "the import graph came out empty: the parser is broken"
    assert cycles(graph) == []


def test_lower_layers_do_not_import_autotune():
    """search_spaces, costmodel and db sit below autotune (type-only imports aside)."""
    mods = project_modules()
    for name, path in mods.items():
        if name.split(".")[0] == "autotune":
            continue
        tree = ast.parse(path.read_text())
        type_only = {id(n) for top in ast.walk(tree) if isinstance(top, ast.If)
                     and "TYPE_CHECKING" in ast.unparse(top.test) for n in ast.walk(top)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and id(node) not in type_only:
                assert not (node.module or "").startswith("autotune"), f"{name} imports {node.module}"


def test_no_module_over_400_lines():
    too_long = {str(p.relative_to(ROOT)): n for p in project_modules().values()
                if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert too_long == {}


def test_autotune_top_level_is_small_and_the_pipeline_is_in_subpackages():
    top = sorted(p.name for p in (ROOT / "autotune").glob("*.py"))
    assert len(top) <= 10, top
    for sub in ("cli", "search", "backends", "backends/cpu", "backends/cuda", "frontends",
                "bench", "report"):
        assert (ROOT / "autotune" / sub / "__init__.py").is_file(), sub
