"""`autotune import-mlir`: linalg-on-tensors MLIR -> an equivalent workload TOML.

The MLIR is read by the real parser of iree-base-compiler's Python bindings (an optional extra,
imported lazily), callees are inlined and named linalg ops (matmul, batch_matmul, fill,
transpose, broadcast, reduce, elementwise ...) are turned into ``linalg.generic`` by MLIR's own
``linalg-generalize-named-ops`` pass; then every generic (or ``linalg.map``) becomes one
statement:

* its parallel iterators are the left-hand indices, its reduction iterators are summed (``+=``
  when the body yields ``out + expr`` onto a zero init, ``max=`` for ``maximumf`` onto ``-inf``);
  another init (a tensor, or another number) becomes a second statement adding (or max-ing) it;
* its indexing maps (projected permutations) become the subscripts;
* its body (arith / math ops on the block arguments) becomes the expression; a splat constant
  operand becomes a number; ``1/(1+exp(-x))`` within one body is recognised as ``sigmoid(x)``;
  ``arith.select`` on an ``arith.cmpi`` of ``linalg.index`` values (plus or minus integers)
  becomes ``where(COND, A, B)``, also when the indices reach the body through integer and
  ``i1`` tensors built from them (an iota, reshaped, broadcast, compared: IREE's form of
  ``jnp.where`` on iota comparisons), which produce no statement of their own.

Copies (transposes, broadcasts), ``tensor.empty``, fills and splat constants produce no
statement: they become views of, or numbers in, the statements that read them.  The language has
no reshape, so ``tensor.expand_shape`` / ``collapse_shape`` are folded away: a dimension that some
reshape splits is split everywhere it is connected to (through the generics' iteration dims), so
every tensor is stored with the finest dims and a reshape is just a regrouping of them.  Size-1
dims vanish from intermediates.  Dims get one name per extent (``D0``, ``D1``, ...).  The
function's arguments, in order, are the inputs (named from a ``jax.arg_info`` attribute where
there is one, else ``arg0``, ``arg1``, ...); its results are the outputs (``out``, or ``out0``,
``out1``, ...).  ``loc(...)`` annotations are dropped before parsing, so messages name lines of
the file itself.

Anything else is refused with one line naming the op and its line::

    model.mlir:12:5: error: unsupported op 'scf.for'

    toml = import_mlir(text, "model.mlir")      # raises MlirImportError / MlirUnavailable
    write_workload(toml, "model.toml")
"""
from __future__ import annotations

import os
import warnings
from pathlib import Path

from search_spaces.errors import WorkloadError

from autotune.frontends.mlir.attributes import one_line, str_attr
from autotune.frontends.mlir.reader import FunctionReader
from autotune.frontends.mlir.source import MlirImportError, MlirSource, line_col, strip_locations
from autotune.frontends.mlir.statements import write_statements
from autotune.frontends.mlir.workload_toml import render_workload

INSTALL_HINT = ("install it with `pip install iree-base-compiler` "
                "(or `pip install 'autotune[mlir]'`)")
PIPELINE = "builtin.module(inline{default-pipeline=}, linalg-generalize-named-ops)"


class MlirUnavailable(Exception):
    """The MLIR Python bindings (iree-base-compiler) are not installed."""


# ---- the API -------------------------------------------------------------------------------------
def import_mlir(text: str, path: str = "<mlir>", function: str | None = None) -> str:
    """Linalg-on-tensors MLIR text -> workload TOML text (validated by the workload loader).

    Raises :class:`MlirUnavailable` without iree-base-compiler,
    :class:`~autotune.frontends.mlir.source.MlirImportError` (a WorkloadError:
    ``path:line:col: error: ...``) for what cannot be imported."""
    toml = _translate(MlirSource(path, text), function)
    from search_spaces.loader import parse_workload
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # an unused argument is reported when it is loaded
        try:
            parse_workload(toml, path)
        except WorkloadError as e:  # pragma: no cover - a bug in the importer
            raise MlirImportError(f"internal error: the imported workload does not validate "
                                  f"({e.message})", path, 1, 1) from None
    return toml


def import_mlir_file(path: str | Path, function: str | None = None) -> str:
    """:func:`import_mlir` of a file."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise MlirImportError(f"cannot read the file: {e}", str(path), 1, 1) from None
    return import_mlir(text, str(path), function)


def write_workload(toml: str, out: str | Path) -> Path:
    """Write workload TOML text to ``out`` atomically (through a temporary in its folder)."""
    out = Path(out)
    if out.parent and not out.parent.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(toml)
    os.replace(tmp, out)
    return out


# ---- the pipeline: parse, pick the function, run the passes, read, write ------------------------
def _bindings():
    try:
        from iree.compiler import ir, passmanager
    except Exception as e:  # ImportError, or a broken install failing at import
        raise MlirUnavailable(f"import-mlir needs the MLIR Python bindings of iree-base-compiler "
                              f"({type(e).__name__}: {e}); {INSTALL_HINT}") from None
    return ir, passmanager


def _translate(source: MlirSource, function: str | None) -> str:
    ir, pm = _bindings()
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = False
        try:
            module = ir.Module.parse(strip_locations(source.text))
        except ir.MLIRError as e:
            raise source.diagnostic_error("cannot parse the MLIR", e) from None
        except Exception as e:  # older bindings raise ValueError with the diagnostics
            raise source.error(f"cannot parse the MLIR: {one_line(str(e))}") from None
        func = _pick_function(module, source, function)
        func_line = line_col(func.location)[0]
        try:
            pm.PassManager.parse(PIPELINE).run(module.operation)
        except Exception as e:
            if isinstance(e, ir.MLIRError):
                raise source.diagnostic_error("MLIR passes failed", e) from None
            raise source.error(f"MLIR passes failed: {one_line(str(e))}") from None
        func = _pick_function(module, source, function)
        fn = FunctionReader(ir, source, func_line).read(func)
    return render_workload(write_statements(fn, source), fn, source.path)


def _pick_function(module, source: MlirSource, function: str | None):
    """The function to import: ``function`` if given, else the only public one (or @main)."""
    funcs = []
    for op in module.body.operations:
        name = op.operation.name
        if name in ("func.func", "util.func"):
            attrs = op.operation.attributes
            sym = str_attr(attrs["sym_name"])
            private = ("sym_visibility" in attrs
                       and str_attr(attrs["sym_visibility"]) == "private")
            has_body = len(op.operation.regions) and len(op.operation.regions[0].blocks)
            if has_body:
                funcs.append((sym, private, op))
        elif name in ("util.global", "ml_program.global"):
            raise source.op_error(op, f"unsupported op '{name}' (globals)")
    if function is not None:
        for sym, _, op in funcs:
            if sym == function:
                return op
        raise source.error(f"no function @{function} in the file "
                           f"(functions: {', '.join('@' + s for s, _, _ in funcs) or 'none'})")
    public = [f for f in funcs if not f[1]] or funcs
    if not public:
        raise source.error("no func.func with a body in the file")
    if len(public) > 1:
        mains = [f for f in public if f[0] == "main"]
        if len(mains) != 1:
            raise source.error(f"several public functions ({', '.join('@' + f[0] for f in public)}"
                               f"); choose one with --function")
        public = mains
    return public[0][2]
