"""Searches killed with SIGKILL at random moments, run concurrently on one database, and run
as several workers sharing one Optuna study.  The checks live in bench/reliability.py (which
prints them as figures at a larger scale); here they run small.

Small dims (trimul_outgoing N=24, C=8) keep each search to seconds; the three end-to-end
tests still take a minute or more each on a 2-core machine, so they are marked slow.
"""
from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from autotune.cli.app import app
from autotune.search.storage import open_storage
from autotune.search.shared import _create_study_once
from tests.support import load_script
from tests.support.caches import link_caches
from tests.support.skips import extra_reason

reliability = load_script("reliability")

runner = CliRunner()


@pytest.mark.slow
def test_kill_9_at_random_moments_loses_nothing_and_resumes(tmp_path, shared_caches):
    figures = reliability.kills(5, link_caches(tmp_path, shared_caches), seed=7,
                                log=lambda *a: None)
    assert figures["survived"] == 5 and figures["trials_lost"] == 0
    assert figures["trials_changed"] == 0
    assert figures["kills_with_trials_in_db"] >= 2, figures["records"]   # kills mid-search
    assert figures["resumed_run_added"] == 5


@pytest.mark.slow
def test_four_concurrent_searches_on_one_database(tmp_path, shared_caches):
    figures = reliability.concurrent(link_caches(tmp_path, shared_caches), budget=4,
                                     log=lambda *a: None)
    assert figures["all_finished"] and figures["trials_lost"] == 0
    assert figures["trials_in_db"] == figures["trials_reported"] >= 4 * 4 - 4
    same = next(d for d in figures["per_workload"] if d["processes"] == 2)
    assert same["in_db"] == same["reported"] and same["best_is_min"]


@pytest.mark.slow
def test_three_workers_share_one_study_through_a_journal_file(tmp_path, shared_caches):
    figures = reliability.shared(link_caches(tmp_path, shared_caches), workers=3, budget=7,
                                 log=lambda *a: None)
    assert figures["optuna_trials"] == figures["distinct_numbers"] == 7
    assert figures["plan_db_rows"] == 7 and figures["duplicates"] == 0
    assert figures["lost"] == 0 and sum(figures["trials_per_worker"]) == 7


# ---- the shared storage's pieces, quickly -------------------------------------------------

def test_open_storage_errors_are_one_line(tmp_path):
    for url, needle in (("journal:", "no path after journal:"),
                        ("plans.db", "not a storage URL"),
                        ("nosuchdb://x/y", "cannot open it")):
        with pytest.raises(ValueError) as e:
            open_storage(url)
        assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)
        assert "journal:PATH" in str(e.value)
    r = runner.invoke(app, ["search", "trimul_outgoing", "--dims", "N=8,C=4", "--budget", "1",
                            "--db", str(tmp_path / "p.sqlite"), "--storage", "bogus"])
    assert r.exit_code == 1 and len(r.stderr.strip().splitlines()) == 1
    assert r.stderr.startswith("autotune: --storage 'bogus'") and "Traceback" not in r.output
    assert not (tmp_path / "p.sqlite").exists()


@pytest.mark.parametrize("kind", ["journal", "sqlite"])
def test_study_is_created_once(tmp_path, kind):
    url = f"journal:{tmp_path / 'j.log'}" if kind == "journal" else \
        f"sqlite:///{tmp_path / 'o.db'}"
    storage = open_storage(url)
    assert _create_study_once(storage, "s") is True
    assert _create_study_once(open_storage(url), "s") is False
    assert _create_study_once(storage, "s:budget=5") is True
    assert [s.study_name for s in optuna.get_all_study_summaries(storage)] == ["s", "s:budget=5"]


POSTGRES_ENV = "AUTOTUNE_TEST_POSTGRES"     # a server's URL (.ci/run starts one and sets it)


def _postgres_bin() -> Path | None:
    for root in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (root / "initdb").exists() and (root / "pg_ctl").exists():
            return root
    found = shutil.which("pg_ctl")
    return Path(found).parent if found and (Path(found).parent / "initdb").exists() else None


@contextlib.contextmanager
def _own_postgres():
    """A PostgreSQL server on a Unix socket in a temp folder (as the postgres user when we are
    root: the server refuses to run as root); yields its URL, stops and removes it after."""
    bin_ = _postgres_bin()
    if bin_ is None:
        pytest.skip(f"needs a PostgreSQL server: apt-get install postgresql, or set "
                    f"{POSTGRES_ENV} to a server's URL")
    as_user: list[str] = []
    folder = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    try:
        (folder / "data").mkdir()
        (folder / "sock").mkdir()
        if os.geteuid() == 0:
            if not shutil.which("runuser"):
                pytest.skip("running as root without runuser to start postgres as another user")
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                pytest.skip("running as root and no postgres user to start the server as")
            folder.chmod(0o755)
            for p in (folder / "data", folder / "sock"):
                os.chown(p, pw.pw_uid, pw.pw_gid)
            as_user = ["runuser", "-u", "postgres", "--"]
        port = str(50000 + os.getpid() % 10000)
        r = subprocess.run(as_user + [str(bin_ / "initdb"), "-D", str(folder / "data"), "-A",
                                      "trust", "-U", "at"], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"initdb failed here: {r.stderr.strip()[:200]}")
        log = folder / "sock" / "log"
        r = subprocess.run(as_user + [str(bin_ / "pg_ctl"), "-D", str(folder / "data"), "-w",
                                      "-l", str(log), "-o",
                                      f"-k {folder / 'sock'} -h '' -p {port}", "start"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0:
            pytest.skip(f"postgres did not start: {r.stderr.strip()[:200]}")
        try:
            yield f"postgresql+psycopg2://at@/postgres?host={folder / 'sock'}&port={port}"
        finally:
            subprocess.run(as_user + [str(bin_ / "pg_ctl"), "-D", str(folder / "data"), "-m",
                                      "immediate", "stop"], capture_output=True, timeout=120)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def _fresh_database(server_url: str):
    """A new database on the server for one test, dropped afterwards; yields its URL."""
    import sqlalchemy
    url = sqlalchemy.engine.make_url(server_url)
    name = f"autotune_test_{os.getpid()}_{int(time.time() * 1000) % 10**8}"
    admin = sqlalchemy.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as con:
            con.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
        try:
            yield url.set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as con:
                con.execute(sqlalchemy.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture
def postgres_url():
    """A fresh database on the server named by $AUTOTUNE_TEST_POSTGRES, else on a server
    started here for the test."""
    try:
        import psycopg2  # noqa: F401
    except ImportError:
        pytest.skip(extra_reason("psycopg2"))
    server = os.environ.get(POSTGRES_ENV)
    with (contextlib.nullcontext(server) if server else _own_postgres()) as url:
        with _fresh_database(url) as db_url:
            yield db_url


@pytest.mark.slow
def test_workers_share_one_study_through_postgresql(postgres_url, tmp_path, shared_caches):
    """Three `autotune search` processes on one study through the server: exactly the budget
    run, none twice, each trial in the plan database (bench/reliability.py's shared check)."""
    figures = reliability.shared(link_caches(tmp_path, shared_caches), workers=3, budget=6,
                                 log=lambda *a: None, storage=postgres_url)
    assert figures["optuna_trials"] == figures["plan_db_rows"] == 6
    assert figures["distinct_numbers"] == 6
    assert figures["duplicates"] == 0 and figures["lost"] == 0
    assert sum(figures["trials_per_worker"]) == 6
