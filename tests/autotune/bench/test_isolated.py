"""A peer in a process of its own: checked on outputs that come back from there, timed there,
and every way it can fail (framework missing, build error, a process that dies) is a one-line
report, never a hung bench or a process left behind."""
from __future__ import annotations

import pytest

from autotune.backends.base import verify
from autotune.bench.isolated import PeerProcessError, isolated_runner
from autotune.bench.peers import PeerUnavailable
from autotune.bench.runners import Context
from autotune.reference import reference
from search_spaces import load_workload
from tests.support.skips import require

SEED = 3


def ctx(tmp_path):
    w = load_workload("trimul_outgoing", {"N": 12, "C": 8})
    return Context(w, w.random_inputs(seed=SEED), "cpu", tmp_path)


def test_a_peer_in_its_own_process_is_checked_and_timed(tmp_path):
    require("jax")
    c = ctx(tmp_path)
    r = isolated_runner("jax", c, SEED)
    try:
        assert r.detail["process"] == "own" and r.detail["precision"] == "default"
        outs = r.to_host(r.call())
        # the same inputs were made there: the outputs match this process's reference
        err, why = verify(outs, reference(c.w, c.inputs), c.w.rtol)
        assert why == "" and err < c.w.rtol
        per_call = r.seconds_per_call(5, 0.01)
        assert 0 < per_call < 1.0
    finally:
        r.close()
    r.close()                                  # closing twice is harmless
    assert not list(tmp_path.glob("outputs.npz"))


def fake_framework(tmp_path, monkeypatch, body: str) -> None:
    """A ``jax`` package that only the peer's process sees first (a spawned process takes
    this one's sys.path; this process has already imported the real one or never will)."""
    pkg = tmp_path / "fake" / "jax"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path / "fake"))


def test_a_missing_framework_is_reported_as_unavailable(tmp_path, monkeypatch):
    fake_framework(tmp_path, monkeypatch, "raise ImportError('no jaxlib here')\n")
    with pytest.raises(PeerUnavailable, match="JAX is not installed.*no jaxlib here"):
        isolated_runner("jax", ctx(tmp_path), SEED)


def test_a_process_that_dies_while_building_is_one_line(tmp_path, monkeypatch):
    fake_framework(tmp_path, monkeypatch, "import os\nos._exit(7)\n")
    with pytest.raises(PeerProcessError) as e:
        isolated_runner("jax", ctx(tmp_path), SEED)
    assert "exit code 7" in str(e.value) and "\n" not in str(e.value)


def test_a_build_that_hangs_is_stopped(tmp_path, monkeypatch):
    fake_framework(tmp_path, monkeypatch, "import time\ntime.sleep(60)\n")
    with pytest.raises(PeerProcessError, match="not built after 3 s"):
        isolated_runner("jax", ctx(tmp_path), SEED, build_timeout_s=3)


def test_an_unknown_peer_is_refused_before_any_process():
    with pytest.raises(ValueError, match="unknown peer 'tvm'"):
        isolated_runner("tvm", None, SEED)
