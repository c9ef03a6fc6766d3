"""Helpers the tests share: plans with scripted faults for the measuring worker, the schema-1
database fixture, and the paths of the test data."""
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]      # the repository
DATA = ROOT / "tests" / "data"


def load_script(name: str):
    """A script of bench/ as a module (they are scripts, not a package)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
