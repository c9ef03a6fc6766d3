"""The workload language: every parser/validator error class, each with its exact file:line:col.

Each test writes a small TOML text and checks the ONE-line WorkloadError.  In the standard
document below, `program = \"\"\"` is on line 3, so the program's first line is file line 4.
"""
from __future__ import annotations

import re
import warnings

import pytest

from search_spaces import WorkloadError, parse_workload
from search_spaces.loader import UnusedInputWarning

HEAD = 'name = "w"\noutputs = ["y"]\nprogram = """\n'          # program starts on line 4
TAIL = '"""\n[dims]\nN = 4\nK = 3\n[inputs]\nx = ["N", "K"]\nv = ["K"]\n'
GOOD = "y[i] += x[i,k] * v[k]\n"


def doc(program: str = GOOD, head: str = HEAD, tail: str = TAIL) -> str:
    return head + program + tail


def tail_lines(program: str = GOOD, head: str = HEAD) -> int:
    """File line number of the first line after ``head + program``."""
    return (head + program).count("\n") + 1


def parse_ok(text: str):
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # a valid document raises no warning either
        return parse_workload(text, "w.toml")


def error_of(text: str) -> WorkloadError:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedInputWarning)
        with pytest.raises(WorkloadError) as info:
            parse_workload(text, "w.toml")
    return info.value


def check(text: str, line: int, col: int, *needles: str) -> WorkloadError:
    err = error_of(text)
    msg = str(err)
    assert msg.startswith(f"w.toml:{line}:{col}: error:"), msg
    assert "\n" not in msg
    assert (err.path, err.line, err.col) == ("w.toml", line, col)
    for n in needles:
        assert n.lower() in msg.lower(), (n, msg)
    return err


def test_the_standard_document_is_valid():
    w = parse_ok(doc())
    assert w.name == "w" and w.outputs == ("y",)
    assert [op.out for op in w.ops] == ["y"]
    assert w.shapes["y"] == (4,)


# ---- errors inside the program: (program text, file line, file column, words in the message) --
PROGRAM_ERRORS = {
    "syntax: operator without operand": ("y[i] += x[i,k] * * v[k]\n", 4, 18, "expected"),
    "syntax: unclosed paren": (GOOD + "z[i] = (y[i]\n", 5, 13, "')'"),
    "syntax: junk after expression": ("y[i] += x[i,k] v[k]\n", 4, 16, "unexpected 'v'"),
    "syntax: bad character": ("y[i] += x[i,k] @ v[k]\n", 4, 16, "unexpected character '@'"),
    "syntax: missing assignment": ("y[i] x[i,k]\n", 4, 6, "expected '=', '+=' or 'max='"),
    "syntax: empty subscripts": ("y[] += x[i,k]\n", 4, 3, "y[] has no index",
                                 "not supported", "extent 1"),
    "syntax: empty subscripts on the right": ("y[i] += x[i,k] * v[]\n", 4, 20, "v[] has no index"),
    "syntax: subscript not a name": ("y[i] += x[i,1] * v[i]\n", 4, 13, "index name"),
    "syntax: non-integer exponent": ("y[i] += x[i,k] ** 2.5\n", 4, 19, "integer exponent"),
    "syntax: statement not a tensor": ("3 = x[i,k]\n", 4, 1, "tensor name"),
    "unknown tensor": ("y[i] += x[i,k] * q[k]\n", 4, 18, "unknown tensor 'q'"),
    "tensor defined twice": (GOOD + "y[i] += x[i,k]\n", 5, 1, "'y' defined twice"),
    "assigning an input": ("x[i,k] = v[k] * 2\n" + GOOD, 4, 1, "'x' is an input"),
    "read before defined": ("z[i] = y[i] * 2\n" + GOOD, 4, 8, "'y' is read before it is defined"),
    "tensor without subscripts": ("y[i] += x * v[k]\n", 4, 9, "'x' used without subscripts"),
    "index/extent conflict": ("y[i] += x[i,k] * v[i]\n", 4, 20, "index 'i' has extent 3"),
    "index/extent conflict on the left": (GOOD + "z[k] = y[k] + v[k]\n", 5, 17, "extent"),
    "too few subscripts": ("y[i] += x[i] * v[i]\n", 4, 9, "has 2 dimension(s)", "1 subscript"),
    "too many subscripts": ("y[i] += x[i,k] * v[k,i]\n", 4, 18, "has 1 dimension(s)",
                            "2 subscript"),
    "repeated index in one access": ("y[i] += x[k,k] * v[i]\n", 4, 13, "repeated"),
    "repeated index on the left": ("y[i,i] = x[i,k] + v[k]\n", 4, 5, "repeated"),
    "reduction index on '='": ("y[i] = x[i,k] * v[k]\n", 4, 12, "'k' appears only on the right",
                               "'+='"),
    "'+=' without a reduction index": ("y[i,k] += x[i,k]\n", 4, 1, "'+='"),
    "'max=' without a reduction index": ("y[i,k] max= x[i,k]\n", 4, 1, "'max='"),
    "left index unbound": ("y[i,j] += x[i,k] * v[k]\n", 4, 5, "'j'", "extent is unknown"),
    "unknown function": ("y[i] += foo(x[i,k]) * v[k]\n", 4, 9, "unknown function 'foo'", "exp"),
    "wrong number of arguments": ("y[i] += max(x[i,k]) * v[k]\n", 4, 9, "max() takes 2"),
    "unknown dim": ("y[i] += x[i,k] * v[k] / M\n", 4, 25, "unknown dim 'M'"),
    "literal out of range (inf)": ("y[i] += x[i,k] * v[k] * 1e999\n", 4, 25, "1e999",
                                   "out of range"),
    "nan is not a literal": ("y[i] += x[i,k] * v[k] * nan\n", 4, 25, "unknown dim 'nan'"),
    "inf is not a literal": ("y[i] += x[i,k] * v[k] * inf\n", 4, 25, "unknown dim 'inf'"),
    "exponent too large": ("y[i] += x[i,k] ** 100\n", 4, 19, "exponent"),
}


@pytest.mark.parametrize("case", list(PROGRAM_ERRORS), ids=list(PROGRAM_ERRORS))
def test_program_error_location(case):
    program, line, col, *needles = PROGRAM_ERRORS[case]
    check(doc(program), line, col, *needles)


def test_program_lines_are_file_lines():
    # comments and blank lines before the bad statement: program line 5 is file line 8
    program = "# a comment\n\n" + GOOD + "   # indented comment\nz[i] = y[i] * w[i]\n"
    check(doc(program), 8, 15, "unknown tensor 'w'")
    # a longer header moves everything down by the same amount
    head = "# leading comment\n\n" + 'summary = "s"\n' + HEAD
    check(doc("y[i] += x[i,k] * q[k]\n", head=head), 7, 18, "unknown tensor 'q'")


def test_error_column_counts_indentation_and_trailing_comments():
    check(doc("    y[i] += x[i,k] * q[k]   # q is unknown\n"), 4, 22, "unknown tensor 'q'")


def test_single_line_program_columns_are_file_columns():
    text = doc(head='name = "w"\noutputs = ["y"]\n', program='program = "y[i] += x[i,k] * q[k]"\n',
               tail=TAIL[4:])
    # 'q' is at column 18 of the statement, which starts at column 12 of line 3
    check(text, 3, 29, "unknown tensor 'q'")


def test_program_starting_on_the_delimiter_line():
    text = 'name = "w"\noutputs = ["y"]\nprogram = """y[i] += x[i,k] * v[k]\nz[i] = q[i]\n' + TAIL
    check(text, 4, 8, "unknown tensor 'q'")


def test_whitespace_after_the_opening_delimiter_is_not_trimmed_by_toml():
    # TOML trims only a newline directly after the delimiter: line 3 is program line 1 here
    text = 'name = "w"\noutputs = ["y"]\nprogram = """   \ny[i] += x[i,k] * q[k]\n' + TAIL
    check(text, 4, 18, "unknown tensor 'q'")


def test_line_ending_backslash_after_the_delimiter():
    text = 'name = "w"\noutputs = ["y"]\nprogram = """\\\n\n  y[i] += x[i,k] * q[k]\n' + TAIL
    check(text, 5, 20, "unknown tensor 'q'")


def test_literal_multiline_string_and_crlf_line_endings():
    text = doc(head="name = 'w'\noutputs = ['y']\nprogram = '''\n",
               program="y[i] += x[i,k] * q[k]\n", tail="'''" + TAIL[3:])
    check(text, 4, 18, "unknown tensor 'q'")
    check(doc("y[i] += x[i,k] * q[k]\n").replace("\n", "\r\n"), 4, 18, "unknown tensor 'q'")


def test_output_never_defined():
    head = 'name = "w"\noutputs = ["y", "z"]\nprogram = """\n'
    check(doc(head=head), 2, 1, "output 'z' is never defined")


def test_output_that_is_an_input_is_not_defined_by_the_program():
    head = 'name = "w"\noutputs = ["x"]\nprogram = """\n'
    check(doc(head=head), 2, 1, "output 'x' is never defined")


def test_unused_input_is_a_warning_with_its_location():
    tail = TAIL + 'u = ["N"]\n'
    line_u = tail_lines() + tail.count("\n") - 1
    with pytest.warns(UnusedInputWarning) as rec:
        w = parse_workload(doc(tail=tail), "w.toml")
    assert w.outputs == ("y",)      # still loads
    msgs = [str(r.message) for r in rec]
    assert msgs == [f"w.toml:{line_u}:1: warning: input 'u' is never read"], msgs


# ---- errors in the TOML document around the program -------------------------------------
def test_invalid_toml():
    err = check(doc(tail=TAIL.replace('x = ["N", "K"]', 'x = ["N", "K"')), 11, 1, "invalid TOML")
    assert "array" in str(err).lower()
    check('name = "w"\noutputs = ["y"]\nname = "again"\n', 3, 15, "invalid TOML")
    # an unterminated string is reported at the end of the document
    check('name = "w"\nprogram = """\ny[i] = x[i]\n', 4, 1, "invalid TOML", "unterminated")


def test_deeply_nested_toml_is_one_clean_error():
    err = error_of('name = "w"\nx = ' + "[" * 5000 + "]" * 5000 + "\n")
    assert str(err).startswith("w.toml:") and "invalid TOML" in str(err)


def test_unknown_top_level_key():
    head = 'name = "w"\noutputs = ["y"]\nbogus = 1\nprogram = """\n'
    check(doc(head=head), 3, 1, "unknown key 'bogus'")


def test_missing_required_key():
    check('name = "w"\noutputs = ["y"]\n[inputs]\nx = ["N"]\n', 1, 1, "missing required key 'program'")


def test_bad_dtype():
    head = 'name = "w"\noutputs = ["y"]\ndtype = "int8"\nprogram = """\n'
    check(doc(head=head), 3, 1, "unsupported dtype 'int8'")


@pytest.mark.parametrize("spec, needle", [
    ('"gauss(0,1)"', "bad init"),
    ('"normal(0,-1)"', "out of range"),
    ('"normal(0,1e999)"', "out of range"),
    ('"uniform(2,1)"', "out of range"),
    ('"bernoulli(1.5)"', "bernoulli"),
    ('"normal(0,1) + 1"', "bad init"),
    ("3", "bad init"),
])
def test_bad_init_string(spec, needle):
    tail = TAIL + "[init]\n" + f"v = {spec}\n"
    line = tail_lines() + tail.count("\n") - 1
    check(doc(tail=tail), line, 1, "init of v", needle)


def test_init_for_an_unknown_input():
    tail = TAIL + '[init]\nx = "normal(0,1)"\nnope = "normal(0,1)"\n'
    line = tail_lines() + tail.count("\n") - 1
    check(doc(tail=tail), line, 1, "'nope'", "not an input")


@pytest.mark.parametrize("body, key_line, needle", [
    ("foo = 1\n", 1, "unknown key 'foo'"),
    ("tiles = [3, 8]\n", 1, "powers of two"),
    ("tiles = []\n", 1, "powers of two"),
    ('forbid_fusion = ["a->b"]\n', 1, "not a producer->consumer edge"),
    ('contraction_impls = ["magic"]\n', 1, "contraction_impls"),
    ('layouts = "some"\n', 1, "layouts"),
    ('tiles = [8]\nlayouts = 7\n', 2, "layouts"),
])
def test_bad_space_table(body, key_line, needle):
    program = GOOD + "z[i] = y[i] * 2\n"
    tail = TAIL + "[space]\n" + body
    line = tail_lines(program) + TAIL.count("\n") + key_line
    check(doc(program, tail=tail), line, 1, "[space]", needle)


def test_space_that_is_not_a_table():
    head = 'name = "w"\noutputs = ["y"]\nspace = 3\nprogram = """\n'
    check(doc(head=head), 3, 1, "[space] must be a table")


def test_valid_space_table_is_accepted_and_normalised():
    program = GOOD + "z[i] = y[i] * 2\n"
    tail = TAIL + '[space]\ntiles = [32, 8, 8]\nforbid_fusion = ["y -> z"]\n'
    w = parse_ok(doc(program, tail=tail))
    assert w.space == {"tiles": [8, 32], "forbid_fusion": ["y->z"]}


@pytest.mark.parametrize("body, needle", [
    ("rtol = 2\n", "must be a number in (0, 1)"),
    ("rtol = nan\n", "rtol = nan"),
    ("rtol = inf\n", "rtol = inf"),
    ('rtol = "small"\n', "must be a number"),
])
def test_bad_tolerance(body, needle):
    tail = TAIL + "[tolerance]\n" + body
    check(doc(tail=tail), tail_lines() + tail.count("\n") - 1, 1, needle)


@pytest.mark.parametrize("dims, line, needle", [
    ("N = 0\nK = 3\n", 7, "dim N = 0"),
    ("N = 4\nK = 3.5\n", 8, "dim K = 3.5"),
    ("N = 4\nK = -1\n", 8, "dim K = -1"),
    ("N = 4\nK = 4294967296\n", 8, "2^31"),
])
def test_bad_dims(dims, line, needle):
    tail = TAIL.replace("N = 4\nK = 3\n", dims)
    check(doc(tail=tail), line, 1, needle)


def test_inline_dims_table_errors_point_at_its_key():
    text = 'name = "w"\noutputs = ["y"]\ndims = {N = 0, K = 3}\nprogram = """\n' + GOOD + \
           '"""\n[inputs]\nx = ["N", "K"]\nv = ["K"]\n'
    check(text, 3, 1, "dim N = 0")


def test_input_shape_with_unknown_dim():
    tail = TAIL.replace('x = ["N", "K"]', 'x = ["N", "M"]')
    check(doc(tail=tail), 10, 1, "input x", "unknown dim 'M'")


def test_dims_override_of_unknown_dim():
    from search_spaces import load_workload
    with pytest.raises(WorkloadError, match="unknown dim 'Q'"):
        load_workload("trimul_outgoing", dims={"Q": 3})
    with pytest.raises(WorkloadError, match=re.escape("[1, 2^31)")):
        load_workload("trimul_outgoing", dims={"N": 0})


def test_unknown_workload_name_or_path():
    from search_spaces import load_workload
    with pytest.raises(WorkloadError, match="no built-in workload or file named 'nope'"):
        load_workload("nope")


# ---- hostile input: bounded, one clean error, never a RecursionError ---------------------
@pytest.mark.parametrize("expr, col", [
    ("(" * 500 + "x[i,k]" + ")" * 500, 109),      # the 101st level is at column 9 + 100
    ("-" * 500 + "x[i,k]", 109),
    ("+" * 5000 + "x[i,k]", 109),                 # was a RecursionError before the fix
    ("-+" * 3000 + "x[i,k]", 109),
    ("exp(" * 500 + "x[i,k]" + ")" * 500, 409),
])
def test_deep_nesting_is_one_clean_error(expr, col):
    err = check(doc(f"y[i] += {expr} * v[k]\n"), 4, col, "nested deeper than")
    assert isinstance(err, WorkloadError)


def test_nesting_within_the_bound_is_fine():
    w = parse_ok(doc("y[i] += " + "(" * 50 + "x[i,k]" + ")" * 50 + " * v[k]\n"))
    assert w.ops[0].out == "y"


def test_too_many_operators_is_one_clean_error():
    # 150 terms "x[i,k] * v[k]" (16 columns each with " + "): operator 201 is the '*' of term 101
    expr = " + ".join(["x[i,k] * v[k]"] * 150)
    check(doc(f"y[i] += {expr}\n"), 4, 9 + 100 * 16 + 7, "more than 200 operators")


def test_program_is_never_evaluated_by_python():
    # Python syntax in the program is just a syntax error, not executed
    check(doc('y[i] += __import__("os").system("true")\n'), 4, 20, "unexpected character")
    check(doc("y[i] += x[i,k] if 1 else v[k]\n"), 4, 16, "unexpected 'if'")


def test_every_valid_construct_parses():
    program = """
y[i]  += x[i,k] * v[k] / K          # sum, dim as a constant
m[i] max= x[i,k]                     # max
z[i]   = -exp(m[i]) + log(abs(y[i]) + 1) - sqrt(abs(m[i])) * rsqrt(2.5)
u[i]   = sigmoid(z[i]) * tanh(z[i]) + relu(z[i]) + max(z[i], 0) + min(z[i], 1.)
p[i]   = u[i] ** 2 + u[i] ** -1 + .5e1 + 1e-3 + +u[i]
"""
    head = 'name = "w"\noutputs = ["y", "p"]\nprogram = """'
    w = parse_ok(doc(program, head=head))
    assert [op.combiner for op in w.ops] == ["sum", "max", "none", "none", "none"]
    assert w.outputs == ("y", "p")
