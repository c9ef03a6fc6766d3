"""Shared test set-up: the ``cuda`` marker skips by itself where no GPU is present, small dims
for every built-in, a fresh plan database per test (on tmpfs where there is one), and the
strict-skip hooks (tests.support.skips: with AUTOTUNE_STRICT_SKIPS=1 a skip for anything but a
missing CUDA device fails the run)."""
from __future__ import annotations

import functools
import os
import shutil
import tempfile
from pathlib import Path

import pytest

import autotune  # noqa: F401  (first: its thread settings precede NumPy's OpenBLAS)
from search_spaces import load_workload
from tests.support.caches import link_caches, make_shared
from tests.support.skips import (GPU_SKIP, pytest_collectreport,  # noqa: F401  (hooks)
                                 pytest_runtest_logreport, pytest_sessionfinish,
                                 pytest_terminal_summary)

# Dims small enough that a reference, a compile and a run take milliseconds.
SMALL_DIMS = {
    "trimul_outgoing": {"N": 16, "C": 8},
    "trimul_incoming": {"N": 16, "C": 8},
    "attention": {"S": 16, "H": 2, "D": 8, "C": 16},
    "gated_mlp": {"T": 16, "C": 16, "F": 32},
    "outer_product_mean": {"S": 8, "N": 8, "C": 8, "E": 4, "Z": 8},
    "triangle_attention_starting": {"N": 8, "C": 8, "H": 2, "D": 4},
    "triangle_attention_ending": {"N": 8, "C": 8, "H": 2, "D": 4},
    "msa_row_attention": {"S": 4, "N": 8, "Cm": 8, "Cz": 8, "H": 2, "D": 4},
    "pair_transition": {"N": 8, "C": 8, "F": 32},
    "gelu_mlp": {"T": 16, "C": 16, "F": 64},
    "causal_attention": {"S": 16, "H": 2, "D": 8, "C": 16},
}


@functools.cache
def cuda_device_present() -> bool:
    """CuPy importable and at least one CUDA device visible (imported lazily, never required)."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    skip = pytest.mark.skip(reason=GPU_SKIP)
    # the marker itself, not keywords: a parametrize id "cuda" is no GPU test
    gpu_tests = [item for item in items if item.get_closest_marker("cuda") is not None]
    if gpu_tests and not cuda_device_present():
        for item in gpu_tests:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def fresh_price_memo(monkeypatch):
    """Every test prices with an empty group memo (costmodel.memo): a test that changes a cost
    term (monkeypatching its constant) gets none of another test's prices, nor leaves its own."""
    from costmodel import model
    monkeypatch.setattr(model, "_MEMO", type(model._MEMO)())


@pytest.fixture
def small():
    """``small(name)`` -> the built-in workload at dims small enough for a unit test."""
    return lambda name: load_workload(name, SMALL_DIMS[name])


@pytest.fixture
def fast_tmp(tmp_path):
    """A fresh folder on tmpfs (/dev/shm) where there is one, else ``tmp_path``: SQLite and
    Optuna's journal file fsync every write, some milliseconds each on a disk."""
    shm = Path("/dev/shm")
    if not (shm.is_dir() and os.access(shm, os.W_OK)):
        yield tmp_path
        return
    folder = Path(tempfile.mkdtemp(prefix="autotune-test-", dir=shm))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def shared_caches(tmp_path_factory):
    """The session's folder of compiled kernels and references (tests.support.caches)."""
    return make_shared(tmp_path_factory.mktemp("shared-caches"))


@pytest.fixture
def cached_tmp(fast_tmp, shared_caches):
    """``fast_tmp`` whose searches reuse the session's compiled kernels and references: for
    tests that search, not for tests of the caches themselves."""
    return link_caches(fast_tmp, shared_caches)


@pytest.fixture
def fresh_db(fast_tmp):
    """An empty plan database in the test's own folder, closed afterwards."""
    from db.store import PlanDB
    db = PlanDB(fast_tmp / "plans.sqlite")
    yield db
    db.close()
