"""`autotune import-mlir`: linalg-on-tensors MLIR -> workload, checked through the reference.

(a) the built-ins themselves: their JAX peer -> StableHLO -> `iree-compile --compile-to=input`
    (linalg on tensors) -> import -> the imported workload's float64 reference equals the
    built-in's on the same inputs;
(b) hand-written linalg IR (a fused triangle einsum with its gating inside the body; named ops
    and reshapes) against NumPy;
(c) what cannot be imported is one line naming the op and its line.
"""
from __future__ import annotations

import re
import sys

import numpy as np
import pytest

from tests.support.skips import require

require("iree.compiler")

from typer.testing import CliRunner  # noqa: E402

from tests.support import DATA  # noqa: E402
from tests.support.where import causal  # noqa: E402

import autotune  # noqa: E402
from autotune.cli.app import app  # noqa: E402
from autotune.frontends.mlir.importer import (MlirUnavailable, import_mlir,  # noqa: E402
                                              import_mlir_file)
from autotune.frontends.mlir.source import MlirImportError  # noqa: E402
from search_spaces import load_workload, parse_workload  # noqa: E402
from search_spaces.loader import builtin_text  # noqa: E402

runner = CliRunner()

# Small dims, powers of two, so that every constant of the program (1/C, 1/sqrt(D), ...) is exact
# in the float32 IR and the two float64 references can agree to 1e-10.
SMALL = {
    "trimul_outgoing": {"N": 8, "C": 4},
    "trimul_incoming": {"N": 8, "C": 4},
    "gated_mlp": {"T": 8, "C": 4, "F": 16},
    "attention": {"S": 8, "H": 2, "D": 4, "C": 16},
    "outer_product_mean": {"S": 4, "N": 8, "C": 16, "E": 2, "Z": 8},
    "triangle_attention_starting": {"N": 8, "C": 8, "H": 2, "D": 4},
    "triangle_attention_ending": {"N": 8, "C": 8, "H": 2, "D": 4},
    "msa_row_attention": {"S": 2, "N": 8, "Cm": 8, "Cz": 4, "H": 2, "D": 4},
    "pair_transition": {"N": 4, "C": 8, "F": 32},
    "gelu_mlp": {"T": 8, "C": 8, "F": 32},
    "causal_attention": {"S": 8, "H": 2, "D": 4, "C": 16},
}


# a number in the program text (not the digits of a name such as w_1)
NUMBER = re.compile(r"(?<![\w.])(?:\d+\.\d*|\.\d+|\d+)(?:[eE][+-]?\d+)?")


def with_float32_literals(name: str):
    """The built-in at its SMALL dims with each number of its program as the importer writes the
    float32 constant it becomes (the shortest decimal that reads back as the same float32):
    GELU's sqrt(2/pi) = 0.7978845608... comes back as 0.7978846, and the two float64 references
    would differ by 1e-8 where the round trip changed nothing."""
    head, program, tail = builtin_text(name).split('"""')

    def as_imported(m):
        short = str(np.float32(float(m.group())))
        return m.group() if float(short) == float(m.group()) else short
    text = '"""'.join([head, NUMBER.sub(as_imported, program), tail])
    return parse_workload(text, f"{name}.toml", SMALL[name])


def linalg_of_builtin(name: str) -> tuple:
    """The built-in at small dims, and its JAX peer lowered to linalg on tensors by IREE."""
    return linalg_of(load_workload(name, SMALL[name]))


def linalg_of(w) -> tuple:
    """``w``, and its JAX peer lowered to linalg on tensors by IREE."""
    jax = require("jax")
    from iree.compiler.tools import compile_str

    from autotune.bench.peers import jax_function
    fn = jax_function(w, precision="highest")
    names = w.input_names

    def positional(*args):   # the function's arguments in the workload's input order
        outs = fn(**dict(zip(names, args)))
        return tuple(outs[o] for o in w.outputs)
    specs = [jax.ShapeDtypeStruct(shape, np.dtype(w.dtype)) for _, shape in w.inputs]
    stablehlo = jax.jit(positional).lower(*specs).as_text()
    linalg = compile_str(stablehlo, input_type="stablehlo", target_backends=["llvm-cpu"],
                         extra_args=["--compile-to=input"])
    return w, linalg.decode() if isinstance(linalg, bytes) else linalg


def same_reference(builtin, imported, seed=3):
    inputs = builtin.random_inputs(seed)
    assert [shape for _, shape in imported.inputs] == [shape for _, shape in builtin.inputs]
    ref = autotune.reference(builtin, inputs)
    got = autotune.reference(imported, dict(zip(imported.input_names,
                                                (inputs[n] for n in builtin.input_names))))
    assert len(imported.outputs) == len(builtin.outputs)
    for ob, oi in zip(builtin.outputs, imported.outputs):
        scale = float(np.abs(ref[ob]).max())
        np.testing.assert_allclose(got[oi], ref[ob], rtol=1e-10, atol=1e-12 * scale)


# ---- (a) round trips through IREE ----------------------------------------------------------------
@pytest.fixture(scope="module")
def trimul_linalg():
    return linalg_of_builtin("trimul_outgoing")


def test_trimul_outgoing_round_trips_through_iree(trimul_linalg, tmp_path):
    w, linalg = trimul_linalg
    assert "linalg." in linalg and "stablehlo." not in linalg
    path = tmp_path / "trimul_outgoing.mlir"
    path.write_text(linalg)
    toml = import_mlir_file(path)
    imported = parse_workload(toml, "imported.toml")
    assert imported.dtype == "float32" and len(imported.inputs) == len(w.inputs)
    same_reference(w, imported)
    # the triangle einsum survives as one contraction over (i, j, c | k) of two computed tensors
    inputs = set(imported.input_names)
    tri = [op for op in imported.ops if op.is_contraction and len(op.parallel) == 3
           and len(op.reduction) == 1 and sorted(op.extents) == [4, 8, 8, 8]
           and not set(op.inputs()) & inputs]
    assert len(tri) == 1, toml
    # the dims are grouped by extent: N and C
    assert imported.dim_dict == {"D0": 8, "D1": 4}


@pytest.mark.parametrize("name", ["trimul_incoming", "gated_mlp", "attention",
                                  "outer_product_mean", "triangle_attention_starting",
                                  "triangle_attention_ending", "msa_row_attention",
                                  "pair_transition", "gelu_mlp", "causal_attention"])
def test_other_builtins_round_trip_through_iree(name):
    w, linalg = linalg_of_builtin(name)
    imported = parse_workload(import_mlir(linalg, f"{name}.mlir"), "imported.toml")
    same_reference(with_float32_literals(name), imported)


def test_cli_writes_the_workload_and_prints_it(trimul_linalg, tmp_path):
    _, linalg = trimul_linalg
    src = tmp_path / "t.mlir"
    src.write_text(linalg)
    out = tmp_path / "w.toml"
    r = runner.invoke(app, ["import-mlir", str(src), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "wrote" in r.stderr and out.exists()
    w = load_workload(str(out))
    assert w.outputs == ("out",)
    r2 = runner.invoke(app, ["import-mlir", str(src)])
    assert r2.exit_code == 0, r2.output
    assert r2.stdout == out.read_text()


# ---- (b) hand-written linalg.generic IR ----------------------------------------------------------
def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def test_fused_triangle_einsum_with_gating_in_its_body():
    toml = import_mlir_file(DATA / "triangle_fused.mlir")
    w = parse_workload(toml, "triangle.toml")
    assert w.input_names == ("ga", "pa", "gb", "pb", "mask") or \
        w.input_names == tuple(f"arg{n}" for n in range(5))
    assert len(w.ops) == 2 and "sigmoid(" in toml
    einsum = w.ops[0]
    assert einsum.combiner == "sum" and einsum.is_contraction
    assert einsum.extents == (8, 8, 4, 8)          # i, j, c parallel; k reduced
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(s) for s in ((8, 8, 4),) * 4 + ((8, 8),)]
    ga, pa, gb, pb, mask = ins
    a, b = sigmoid(ga) * pa, sigmoid(gb) * pb
    want = np.einsum("ikc,jkc->ijc", a, b) * mask[:, :, None]
    got = autotune.reference(w, dict(zip(w.input_names, ins)))["out"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_named_ops_and_reshapes_are_generalized_and_folded():
    toml = import_mlir_file(DATA / "named_ops.mlir")
    w = parse_workload(toml, "named.toml")
    assert dict(w.inputs)[w.input_names[0]] == (2, 3, 4)
    assert any(op.combiner == "max" for op in w.ops), toml
    # the collapse to 6x4 and the expand back to 2x3x8 are gone: the matmul runs over (2, 3)
    mm = next(op for op in w.ops if op.is_contraction)
    assert sorted(mm.extents) == [2, 3, 4, 8]
    rng = np.random.default_rng(1)
    x, wt, bias = rng.standard_normal((2, 3, 4)), rng.standard_normal((8, 4)), \
        rng.standard_normal(8)
    y = x @ wt.T + bias
    p = np.exp(y - y.max(axis=-1, keepdims=True))
    want = p / p.sum(axis=-1, keepdims=True)
    got = autotune.reference(w, dict(zip(w.input_names, (x, wt, bias))))["out"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_edge_cases_size1_dims_tensor_init_calls_repeated_and_passthrough_results():
    toml = import_mlir_file(DATA / "edge_cases.mlir")
    w = parse_workload(toml, "edges.toml")
    assert [s for _, s in w.inputs] == [(1, 8), (8, 4), (4, 6), (8, 6)]
    assert w.outputs == ("out0", "out1", "out2", "out3", "out4")
    rng = np.random.default_rng(2)
    x, a, b, c = (rng.standard_normal(s) for _, s in w.inputs)
    got = autotune.reference(w, dict(zip(w.input_names, (x, a, b, c))))
    want = [np.exp(x[0]), a @ b + c, a @ b + c, a, np.tanh(x[0]) ** 3]
    for o, v in zip(w.outputs, want):
        np.testing.assert_allclose(got[o], v, rtol=1e-12, atol=1e-14)


# ---- (c) errors ----------------------------------------------------------------------------------
def test_unsupported_op_is_one_line_with_its_line(tmp_path):
    path = DATA / "unsupported_scf.mlir"
    line = next(n for n, l in enumerate(path.read_text().split("\n"), 1) if "scf.for" in l
                and not l.startswith("//"))
    with pytest.raises(MlirImportError) as e:
        import_mlir_file(path)
    msg = str(e.value)
    assert "\n" not in msg
    assert re.match(rf"^{re.escape(str(path))}:{line}:\d+: error: unsupported op 'scf.for'", msg)
    r = runner.invoke(app, ["import-mlir", str(path)])
    assert r.exit_code == 1 and r.stdout == ""
    assert len(r.stderr.strip().split("\n")) == 1 and "unsupported op 'scf.for'" in r.stderr
    assert "Traceback" not in r.output


def test_unsupported_body_op_names_its_line():
    text = (DATA / "triangle_fused.mlir").read_text()
    lines = text.split("\n")
    k = next(n for n, l in enumerate(lines) if "%y = arith.mulf %x, %m" in l)
    lines[k] = "    %c = arith.cmpf ogt, %x, %m : f32\n    %y = arith.select %c, %x, %m : f32"
    with pytest.raises(MlirImportError, match=rf"^m\.mlir:{k + 1}:\d+: error: unsupported op "
                                              rf"'arith.cmpf'"):
        import_mlir("\n".join(lines), "m.mlir")


def test_invalid_mlir_is_one_line():
    with pytest.raises(MlirImportError, match=r"^bad\.mlir:2:\d+: error: cannot parse"):
        import_mlir("func.func @f() {\n  %x = nonsense\n}\n", "bad.mlir")


def test_missing_bindings_is_one_clear_error(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "iree.compiler", None)
    with pytest.raises(MlirUnavailable, match="pip install iree-base-compiler"):
        import_mlir("", "x.mlir")
    src = tmp_path / "x.mlir"
    src.write_text("")
    r = runner.invoke(app, ["import-mlir", str(src)])
    assert r.exit_code == 1 and "pip install iree-base-compiler" in r.stderr
    assert len(r.stderr.strip().split("\n")) == 1


# ---- where(COND, A, B): arith.cmpi on linalg.index feeding arith.select --------------------------
def test_causal_mask_from_index_comparisons():
    toml = import_mlir_file(DATA / "causal_mask.mlir")
    w = parse_workload(toml, "causal.toml")
    assert "where(j <= i," in toml and "where(j < i + 1," in toml and "where(k - 1 < i," in toml
    rng = np.random.default_rng(5)
    q, k, v = (rng.standard_normal((8, 4)) for _ in range(3))
    s = q @ k.T * 0.5
    allowed = np.tril(np.ones((8, 8), dtype=bool))
    e = np.exp(np.where(allowed, s, -1e30) - np.where(allowed, s, -np.inf).max(axis=1,
                                                                              keepdims=True))
    p = np.where(allowed, e, 0.0)
    want = (p / p.sum(axis=1, keepdims=True)) @ v
    got = autotune.reference(w, dict(zip(w.input_names, (q, k, v))))["out"]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_causal_attention_round_trips_through_iree():
    """jnp.where on iota comparisons, as IREE lowers it: an i32 iota, reshaped, broadcast,
    offset and compared into i1 tensors that later generics select with (and a float mask that
    reads no data): the conditions come back as where() in the statements that read them."""
    w, linalg = linalg_of(causal({"S": 8, "H": 2, "D": 4, "C": 16}))
    assert "linalg.index" in linalg and "xi1>" in linalg and "arith.cmpi" in linalg
    toml = import_mlir(linalg, "causal.mlir")
    assert toml.count("where(") == 3, toml
    same_reference(w, parse_workload(toml, "imported.toml"))


def _causal_edit(old: str, new: str) -> tuple[str, int]:
    """causal_mask.mlir with its first line holding ``old`` replaced; (text, that line)."""
    lines = (DATA / "causal_mask.mlir").read_text().split("\n")
    k = next(n for n, l in enumerate(lines) if old in l and not l.lstrip().startswith("//"))
    lines[k] = lines[k].replace(old, new)
    return "\n".join(lines), k + 1


@pytest.mark.parametrize("old,new,needle,at", [
    ("%keep = arith.cmpi ule, %j, %i : index",
     "%jm = arith.subi %j, %i : index\n    %keep = arith.cmpi ule, %jm, %i : index",
     "unsigned 'arith.cmpi'", 1),
    ("%keep = arith.cmpi ule, %j, %i : index",
     "%k1 = arith.cmpi ule, %j, %i : index\n    %k2 = arith.cmpi ne, %j, %i : index\n"
     "    %keep = arith.andi %k1, %k2 : i1",
     "unsupported op 'arith.andi'", 2),
    ("%y = arith.select %keep, %x, %big : f32",
     "%j64 = arith.index_cast %j : index to i64\n    %jf = arith.sitofp %j64 : i64 to f32\n"
     "    %y = arith.select %keep, %jf, %big : f32", "unsupported op 'arith.sitofp'", 1),
    ("%y = arith.select %keep, %x, %big : f32",
     "%y0 = arith.select %keep, %x, %big : f32\n    %y = arith.addf %y0, %keep : f32",
     "cannot parse", 1),
])
def test_index_comparison_errors_name_their_line(old, new, needle, at):
    """``at``: the line of ``new`` (from 0) that holds the op the error names."""
    text, line = _causal_edit(old, new)
    with pytest.raises(MlirImportError) as e:
        import_mlir(text, "c.mlir")
    msg = str(e.value)
    assert "\n" not in msg and needle in msg, msg
    assert msg.startswith(f"c.mlir:{line + at}:"), msg


def test_a_reduction_of_numbers_selected_by_index_alone_is_refused():
    """t = where(j <= i, 0.5, -1e30) reads no data: it is inlined into its readers, but the row
    max over it is a reduction the language cannot write (its index is bound by no read)."""
    text, _ = _causal_edit("%y = arith.select %keep, %x, %big : f32",
                           "%y = arith.select %keep, %scale, %big : f32")
    lines = text.split("\n")
    line = next(n for n, l in enumerate(lines, 1) if "%m = linalg.generic" in l)
    with pytest.raises(MlirImportError, match=rf"^c\.mlir:{line}:\d+: error: a reduction of "
                                              rf"numbers selected by index comparisons"):
        import_mlir(text, "c.mlir")
