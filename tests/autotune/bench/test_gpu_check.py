"""bench/gpu_check.sh --dry-run: every stage of the GPU check on the CPU (the host emulator
standing in for the device, small dims), its log, summary JSON, plan database and timing JSON
written into $OUT as the GPU run writes them; and a run stopped half-way still reports."""
from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from tests.support import ROOT
from tests.support.skips import require

SCRIPT = ROOT / "bench" / "gpu_check.sh"
# what the device tool brings back: at most 8 files of at most 16 MB, names of these characters
MAX_FILES, MAX_BYTES = 8, 16 << 20
STAGES = ["wheels", "probe", "rates", "mma", "tests", "search", "timing"]


def env_for(out) -> dict:
    env = dict(os.environ, OUT=str(out), PYTHON=sys.executable)
    env.pop("AUTOTUNE_DB", None)
    return env


@pytest.mark.slow
def test_dry_run_writes_its_files_into_out(tmp_path):
    require("jax")                        # the timing stage's XLA peer
    out = tmp_path / "out"
    t0 = time.monotonic()
    # a budget of 4, not the dry run's 8: the knob is read, and the suite saves ten seconds
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run"], cwd=tmp_path,
                       env=env_for(out) | {"BUDGET": "4"}, capture_output=True, text=True,
                       timeout=600)
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= MAX_FILES and all((out / f).stat().st_size < MAX_BYTES for f in files)
    assert {"gpu_check-dryrun.log", "gpu_check-dryrun.json", "plans-dryrun.sqlite"} <= set(files)
    assert [f for f in files if f.startswith("gpu_trimul-") and f.endswith(".json")], files
    rates = json.loads((out / "gpu_gemm_shapes.json").read_text())
    assert rates["emulated"] and all(r["seconds"] > 0 for r in rates["rows"])
    mma = json.loads((out / "gpu_mma_shapes.json").read_text())
    assert mma["emulated"] and {r["case"] for r in mma["rows"]} == {"einsum", "projection",
                                                                       "pair"}
    assert all(r["seconds"] > 0 and r["kernels"] for r in mma["rows"])

    summary = json.loads((out / "gpu_check-dryrun.json").read_text())
    assert summary["dry_run"] and summary["tag"] == "dryrun"
    assert [s["stage"] for s in summary["stages"]] == STAGES
    assert all(s["status"] == "ok" and s["seconds"] <= s["limit_s"] for s in summary["stages"])
    assert sum(s["limit_s"] for s in summary["stages"]) <= summary["limit_s"] + 60
    assert summary["best"] and summary["best"][0]["measured_s"] > 0

    log = (out / "gpu_check-dryrun.log").read_text()
    assert log.strip().splitlines()[-1] == r.stdout.strip().splitlines()[-1]   # all of it
    for n in range(1, 5):                 # a plain progress line per trial (stdout is a pipe)
        assert f"trial {n}/4 " in log, log[-3000:]
    assert "== end " in log.splitlines()[-1] and "exit 0" in log.splitlines()[-1]

    with sqlite3.connect(out / "plans-dryrun.sqlite") as con:
        # the search's 4 trials (its confirmation's rows are trials of "<study>:confirm")
        assert con.execute("SELECT count(*) FROM trials WHERE study NOT LIKE '%:confirm'"
                           ).fetchone()[0] == 4
    timing = json.loads(next(out.glob("gpu_trimul-*.json")).read_text())
    assert timing["emulated"] and timing["contenders"]["xla-highest"]["status"] == "ok"
    assert timing["search"]["trials"]                 # it read the search's plans
    assert took < 150, f"the dry run took {took:.0f} s (it must fit in 2 minutes)"


def test_interrupted_run_still_reports(tmp_path):
    """SIGTERM during the tests stage: the stage is stopped, and the log and the summary of
    the stages so far are in $OUT."""
    out = tmp_path / "out"
    p = subprocess.Popen(["bash", str(SCRIPT), "--dry-run"], cwd=tmp_path, env=env_for(out),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        log = out / "gpu_check-dryrun.log"
        deadline = time.monotonic() + 120
        while not (log.exists() and "== tests (limit" in log.read_text()):
            assert p.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        stdout, _ = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 130, stdout[-3000:]
    summary = json.loads((out / "gpu_check-dryrun.json").read_text())
    assert [s["stage"] for s in summary["stages"]] == ["wheels", "probe", "rates", "mma"]
    text = log.read_text()
    assert "interrupted: stopping the running stage" in text
    assert text.strip().splitlines()[-1].startswith("== end ") and "exit 130" in text


@pytest.mark.parametrize("after", ['echo "== $name (limit $limit s): $*"',
                                   'timeout --kill-after=15 "$limit" "$@" &'])
def test_signal_between_header_and_stage_pid(tmp_path, after):
    """A signal landing in the window between the stage's header and `STAGE_PID=$!` (the CI run
    of stop 28 hit it: the header was in the log, the stage not yet known) still names the stage,
    stops it if it started, and ends once with exit 130. The window is forced by a copy of the
    script that signals itself right after the given line; the rest of the repository is linked."""
    repo = tmp_path / "repo"
    (repo / "bench").mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in ("bench", ".git"):
            (repo / entry.name).symlink_to(entry)
    for entry in (ROOT / "bench").iterdir():
        if entry.name != "gpu_check.sh":
            (repo / "bench" / entry.name).symlink_to(entry)
    text = SCRIPT.read_text()
    assert text.count(after) == 1
    (repo / "bench" / "gpu_check.sh").write_text(
        text.replace(after, after + '\n  [ "$name" = tests ] && kill -TERM $$'))
    out = tmp_path / "out"
    r = subprocess.run(["bash", str(repo / "bench" / "gpu_check.sh"), "--dry-run"], cwd=tmp_path,
                       env=env_for(out), capture_output=True, text=True, timeout=300)
    assert r.returncode == 130, r.stdout[-3000:] + r.stderr[-2000:]
    log = (out / "gpu_check-dryrun.log").read_text()
    assert "== interrupted: stopping the running stage (tests)" in log, log[-3000:]
    ends = [line for line in log.splitlines() if line.startswith("== end ")]
    assert len(ends) == 1 and "exit 130" in ends[0], log[-3000:]
    assert "passed" not in log                # the stage's tests were stopped, not run out
