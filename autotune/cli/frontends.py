"""`autotune import-mlir`: a workload from linalg-on-tensors MLIR."""
from __future__ import annotations

from typing import Optional

import typer

from autotune.cli.common import CliError, handled, load


@handled
def import_mlir_cmd(
        file: str = typer.Argument(..., metavar="FILE.mlir",
                                   help="linalg-on-tensors MLIR (a func.func of linalg ops)"),
        out: Optional[str] = typer.Option(None, "-o", "--out", metavar="FILE",
                                          help="write the workload TOML here (default: print it)"),
        function: Optional[str] = typer.Option(None, "--function",
                                               help="the function to import, when the file has "
                                                    "several public ones")):
    """Translate linalg-on-tensors MLIR into an equivalent workload (needs iree-base-compiler)."""
    from autotune.frontends.mlir.importer import MlirUnavailable, import_mlir_file, write_workload
    try:
        toml = import_mlir_file(file, function)
    except MlirUnavailable as e:
        raise CliError(str(e)) from None
    if out is None:
        typer.echo(toml, nl=False)
        return
    try:
        write_workload(toml, out)
    except OSError as e:
        raise CliError(f"-o {out}: cannot write ({e.strerror or e})") from None
    w = load(out, None)   # prints any warning (an argument the program never reads)
    typer.echo(f"wrote {out}: workload {w.name}, {len(w.inputs)} inputs, {len(w.ops)} "
               f"statements, outputs {', '.join(w.outputs)}", err=True)


def register(app: typer.Typer) -> None:
    """Add `import-mlir` to the app."""
    app.command("import-mlir")(import_mlir_cmd)
