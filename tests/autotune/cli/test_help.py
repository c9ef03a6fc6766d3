"""`--help` of every command and sub-command, enumerated from the typer app itself: a command
added without a docstring or an option without help text fails here."""
from __future__ import annotations

import pytest
import typer.main
from typer.testing import CliRunner

from autotune.cli.app import app

runner = CliRunner()
ROOT = typer.main.get_command(app)


def _walk(group, path=()):
    """(path, click command) of every command and group under ``group``, depth first."""
    for name, cmd in group.commands.items():
        yield path + (name,), cmd
        if hasattr(cmd, "commands"):
            yield from _walk(cmd, path + (name,))


COMMANDS = dict(_walk(ROOT))
LEAVES = {p: c for p, c in COMMANDS.items() if not hasattr(c, "commands")}


def _id(path):
    return " ".join(path)


def test_the_commands_are_all_there():
    assert {_id(p) for p in LEAVES} >= {
        "workloads", "check", "search", "show-best", "explain", "calibrate", "emit", "bench",
        "plot", "import-mlir", "db check", "cache prune", "model-check"}
    assert {_id(p) for p in COMMANDS if p not in LEAVES} >= {"db", "cache"}


@pytest.mark.parametrize("path", list(LEAVES), ids=_id)
def test_help_names_every_option(path):
    cmd = LEAVES[path]
    assert (cmd.help or "").strip(), f"{_id(path)} has no docstring"
    r = runner.invoke(app, [*path, "--help"])
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert f"Usage: root {_id(path)}" in out
    assert cmd.help.split()[0] in out
    for p in cmd.params:
        assert (p.help or "").strip(), f"{_id(path)} {p.name}: no help text"
        if p.param_type_name == "option":
            for opt in p.opts + p.secondary_opts:
                assert opt in out, f"{_id(path)} --help does not name {opt}"
        else:
            assert (p.metavar or p.name) in out


@pytest.mark.parametrize("path", [p for p in COMMANDS if p not in LEAVES], ids=_id)
def test_help_of_a_group_lists_its_commands(path):
    r = runner.invoke(app, [*path, "--help"])
    assert r.exit_code == 0, r.output
    assert COMMANDS[path].help
    for name in COMMANDS[path].commands:
        assert name in r.stdout


def test_root_help_lists_every_command():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0, r.output
    for name in ROOT.commands:
        assert name in r.stdout


FORMAT_COMMANDS = [p for p, c in LEAVES.items()
                   if any("--format" in q.opts for q in c.params)]


def test_format_is_one_shared_option():
    assert {_id(p) for p in FORMAT_COMMANDS} == {"workloads", "show-best", "explain", "bench",
                                                 "model-check"}
    opts = [next(q for q in LEAVES[p].params if "--format" in q.opts) for p in FORMAT_COMMANDS]
    assert len({(q.help, q.metavar, q.default) for q in opts}) == 1
    dbs = [q for c in LEAVES.values() for q in c.params if "--db" in q.opts]
    assert len(dbs) >= 7 and len({(q.help, q.default) for q in dbs}) == 1


@pytest.mark.parametrize("path", FORMAT_COMMANDS, ids=_id)
def test_a_bad_format_is_one_line_exit_1(path):
    r = runner.invoke(app, [*path, "--format", "yaml"])
    assert r.exit_code == 1, r.output
    assert r.stderr == "autotune: --format 'yaml': use table or json\n"
    assert r.stdout == ""
