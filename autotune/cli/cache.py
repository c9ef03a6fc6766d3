"""`autotune db check` and `autotune cache prune`: the plan database's maintenance commands."""
from __future__ import annotations

import typer

from autotune.cli.common import Db, _api, handled


@handled
def db_check(db: Db = None):
    """Diagnose the plan database without modifying it; exit 1 if anything is wrong."""
    from db import check_file, default_db_path
    from db.errors import missing_db
    path = db or str(default_db_path())
    if not _api().db_exists(db or None):
        raise missing_db(path, db is not None)    # one line: no recovery advice for no file
    problems = check_file(path)
    if not problems:
        typer.echo(f"{path}: OK" + _older_schema_note(path))
        return
    for p in problems:
        typer.echo(p if p.startswith(path) else f"{path}: {p}", err=True)
    typer.echo("recover: move the file aside (mv PATH PATH.bad) and rerun the search, or pass "
               "--db NEW_PATH; trials in a damaged file can be read with `sqlite3 PATH .recover`",
               err=True)
    raise typer.Exit(1)


def _older_schema_note(path: str) -> str:
    """" (schema 1; ...)" for a healthy database of an older schema, else ""."""
    from pathlib import Path

    from db.check import connect_ro
    from db.keys import SCHEMA_VERSION
    from db.schema import stored_version
    p = Path(path).expanduser()
    if not p.is_file() or p.stat().st_size == 0:
        return ""
    conn = connect_ro(p)
    try:
        v = stored_version(conn)
    finally:
        conn.close()
    if v is not None and 0 < v < SCHEMA_VERSION:
        return (f" (schema {v}: the next search or load migrates it to schema "
                f"{SCHEMA_VERSION})")
    return ""


@handled
def cache_prune(db: Db = None,
                device: str = typer.Option("cpu", help="the device whose current key is kept"),
                dry_run: bool = typer.Option(False, "--dry-run", help="list, delete nothing")):
    """Delete trials and best plans recorded under another search-space, schema, device or
    library version than this machine's current one for DEVICE."""
    from db.keys import PlanKey
    from autotune.environment import detect
    env = detect(device)
    store = _api().open_db(db, create=False)
    try:
        stale = store.stale_rows(PlanKey.for_env("", env))
        for r in stale:
            typer.echo(f"stale {r['plan_key'][:16]}: {', '.join(r['reasons'])} changed "
                       f"({r['trials']} trials{', best plan' if r['has_best'] else ''})")
        if dry_run:
            typer.echo(f"{len(stale)} stale key(s); nothing deleted (--dry-run)")
            return
        n = store.prune(store.all_keys() - {r["plan_key"] for r in stale})
        typer.echo(f"deleted {n} row(s) under {len(stale)} stale key(s)")
    finally:
        store.close()


def register(app: typer.Typer) -> None:
    """Add the `db` and `cache` command groups (`db check`, `cache prune`) to the app."""
    db_app = typer.Typer(help="Inspect the plan database.", no_args_is_help=True)
    db_app.command("check")(db_check)
    app.add_typer(db_app, name="db")
    cache_app = typer.Typer(help="Maintain the plan cache.", no_args_is_help=True)
    cache_app.command("prune")(cache_prune)
    app.add_typer(cache_app, name="cache")
