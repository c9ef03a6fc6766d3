"""The strict-skip mode CI runs under (tests.support.skips): a skip for anything but a missing
CUDA device fails the session (PyTorch included: CI installs it); without AUTOTUNE_STRICT_SKIPS,
skips are only skips."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from tests.support import ROOT
from tests.support.skips import EXTRAS, GPU_SKIP, allowed, extra_reason

CONFTEST = "from tests.support.skips import *  # noqa\n"
TESTS = textwrap.dedent("""
    import pytest
    from tests.support.skips import GPU_SKIP, extra_reason

    def test_passes():
        pass

    @pytest.mark.skip(reason=GPU_SKIP)
    def test_gpu():
        pass

    def test_missing_torch():
        pytest.skip(extra_reason("torch"))

    def test_missing_extra():
        pytest.skip(extra_reason("jax"))
""")


def run(tmp_path, strict: bool, missing_extra: bool, missing_torch: bool = False
        ) -> subprocess.CompletedProcess:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    head, torch_test = TESTS.split("def test_missing_torch")
    torch_test, extra_test = torch_test.split("def test_missing_extra")
    src = head + (("def test_missing_torch" + torch_test) if missing_torch else "") + \
        (("def test_missing_extra" + extra_test) if missing_extra else "")
    (tmp_path / "test_x.py").write_text(src)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("AUTOTUNE_STRICT_SKIPS", None)
    if strict:
        env["AUTOTUNE_STRICT_SKIPS"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-rs", str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_strict_mode_fails_on_a_skip_for_a_missing_extra(tmp_path):
    r = run(tmp_path, strict=True, missing_extra=True)
    assert r.returncode == 1, r.stdout
    assert "1 passed, 2 skipped" in r.stdout
    assert "AUTOTUNE_STRICT_SKIPS: 1 skip(s)" in r.stdout
    assert "test_x.py::test_missing_extra" in r.stdout.split("AUTOTUNE_STRICT_SKIPS")[1]


def test_gpu_skips_pass_strict_mode(tmp_path):
    r = run(tmp_path, strict=True, missing_extra=False)
    assert r.returncode == 0, r.stdout
    assert "1 passed, 1 skipped" in r.stdout and "AUTOTUNE_STRICT_SKIPS" not in r.stdout


def test_a_torch_skip_fails_strict_mode(tmp_path):
    """CI installs PyTorch: a torch test that skips there is a failure, as any extra's."""
    r = run(tmp_path, strict=True, missing_extra=False, missing_torch=True)
    assert r.returncode == 1, r.stdout
    assert "1 passed, 2 skipped" in r.stdout
    assert "test_x.py::test_missing_torch" in r.stdout.split("AUTOTUNE_STRICT_SKIPS")[1]


def test_without_strict_mode_a_skip_is_a_skip(tmp_path):
    r = run(tmp_path, strict=False, missing_extra=True, missing_torch=True)
    assert r.returncode == 0, r.stdout
    assert "1 passed, 3 skipped" in r.stdout


def test_reasons_name_the_extra():
    assert allowed(GPU_SKIP)
    for module, extra in EXTRAS.items():
        reason = extra_reason(module)
        assert f"'.[{extra}]'" in reason and not allowed(reason)
