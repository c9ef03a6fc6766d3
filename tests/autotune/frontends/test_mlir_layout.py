"""The MLIR frontend's modules share only public names: no ``_private`` name is imported from
another module, and none is reached as an attribute of another module."""
from __future__ import annotations

import ast

from tests.support import ROOT

PACKAGE = ROOT / "autotune" / "frontends" / "mlir"


def private_uses(path) -> list[str]:
    """``module.name`` for each private name ``path`` takes from another module of the project."""
    tree = ast.parse(path.read_text())
    modules = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if alias.name.startswith("_"):
                    found.append(f"{node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                modules[alias.asname or alias.name] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in modules and node.attr.startswith("_") \
                and not node.attr.startswith("__"):
            found.append(f"{modules[node.value.id]}.{node.attr}")
    return found


def test_no_private_name_crosses_modules():
    files = sorted(PACKAGE.glob("*.py"))
    assert len(files) > 5
    crossing = {p.name: private_uses(p) for p in files}
    assert {k: v for k, v in crossing.items() if v} == {}


def test_the_check_sees_a_private_import(tmp_path):
    p = tmp_path / "m.py"
    p.write_text("from autotune.frontends.mlir.dims import _merge\nimport os\nos._exit\n")
    assert private_uses(p) == ["autotune.frontends.mlir.dims._merge", "os._exit"]
