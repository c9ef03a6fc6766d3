"""Load a workload TOML file (or a built-in by name) into a validated :class:`Workload`."""
from __future__ import annotations

import json
import math
import re
import tomllib
import warnings
from importlib import resources
from pathlib import Path

from .errors import Located, WorkloadError
from .ir import Op, rename
from .lang import PAccess, PName, Statement, lower, parse_program, walk
from .where_syntax import PWhere, check_indices
from .workload import DTYPES, Workload, parse_init

TOP_KEYS = {"name", "summary", "dtype", "outputs", "program", "dims", "inputs", "init",
            "tolerance", "space", "parameters"}
MAX_EXTENT = 1 << 31
MAX_STATEMENTS = 2000


class UnusedInputWarning(UserWarning):
    """An input that no statement reads."""


def builtin_names() -> list[str]:
    root = resources.files("search_spaces") / "builtin"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def builtin_text(name: str) -> str:
    return (resources.files("search_spaces") / "builtin" / f"{name}.toml").read_text()


def load_workload(spec: str | Path, dims: dict[str, int] | None = None) -> Workload:
    """A built-in name or a path to a ``.toml`` file -> Workload, with ``dims`` overriding."""
    spec = str(spec)
    if spec in builtin_names():
        return parse_workload(builtin_text(spec), f"builtin:{spec}", dims)
    path = Path(spec)
    if not path.exists():
        raise WorkloadError(f"no built-in workload or file named {spec!r} "
                            f"(built-ins: {', '.join(builtin_names())})", spec, 1, 1)
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise WorkloadError(f"cannot read the file: {e}", spec, 1, 1) from None
    return parse_workload(text, spec, dims)


def _key_pos(text: str, section: str | None, key: str) -> tuple[int, int]:
    """Best-effort line/column of ``key`` inside ``[section]`` (or the top level)."""
    current = None
    for n, line in enumerate(text.split("\n"), start=1):
        s = line.strip()
        m = re.match(r"^\[\s*([A-Za-z0-9_.\-]+)\s*\]", s)
        if m:
            current = m.group(1)
            if section == current and key is None:
                return n, 1
            continue
        if current == section and key is not None:
            m = re.match(r"^(\s*)[\"']?" + re.escape(key) + r"[\"']?\s*=", line)
            if m:
                return n, len(m.group(1)) + 1
    if section is not None:  # written as a top-level key (`space = 3`, `dims = {N = 4}`)
        return _key_pos(text, None, section)
    return 1, 1


def parse_workload(text: str, path: str = "<workload>", dims: dict[str, int] | None = None,
                   ) -> Workload:
    """Parse and validate workload TOML text; every problem is one WorkloadError line."""
    def err(msg, section=None, key=None):
        line, col = _key_pos(text, section, key)
        return WorkloadError(msg, path, line, col)

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        line, col = (int(m.group(1)), int(m.group(2))) if m else (1, 1)
        if not m and "(at end of document)" in str(e):  # e.g. an unterminated string
            line, col = text.count("\n") + 1, len(text.rsplit("\n", 1)[-1]) + 1
        msg = re.sub(r"\s*\(at line.*\)", "", str(e)) or "invalid TOML"
        raise WorkloadError(f"invalid TOML: {msg}", path, line, col) from None
    except (ValueError, RecursionError) as e:  # tomllib can raise these on hostile input
        raise WorkloadError(f"invalid TOML: {type(e).__name__}", path, 1, 1) from None

    for k in doc:
        if k not in TOP_KEYS:
            raise err(f"unknown key {k!r} (allowed: {', '.join(sorted(TOP_KEYS))})", None, k)
    for k in ("name", "program", "outputs", "inputs"):
        if k not in doc:
            raise err(f"missing required key {k!r}")
    name, program = doc["name"], doc["program"]
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", name):
        raise err("'name' must be an identifier-like string", None, "name")
    if not isinstance(program, str):
        raise err("'program' must be a string", None, "program")
    summary = doc.get("summary", "")
    if not isinstance(summary, str):
        raise err("'summary' must be a string", None, "summary")
    dtype = doc.get("dtype", "float32")
    if dtype not in DTYPES:
        raise err(f"unsupported dtype {dtype!r} (supported: {', '.join(DTYPES)})", None, "dtype")

    # ---- dims ----------------------------------------------------------------------------
    raw_dims = doc.get("dims", {})
    if not isinstance(raw_dims, dict):
        raise err("[dims] must be a table of name = positive integer", "dims", None)
    dim_vals: dict[str, int] = {}
    for k, v in raw_dims.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise err(f"dim name {k!r} is not an identifier", "dims", k)
        if not isinstance(v, int) or isinstance(v, bool) or not 0 < v < MAX_EXTENT:
            raise err(f"dim {k} = {v!r}: must be an integer in [1, 2^31)", "dims", k)
        dim_vals[k] = v
    for k, v in (dims or {}).items():
        if k not in dim_vals:
            raise WorkloadError(f"--dims names unknown dim {k!r} (this workload's dims: "
                                f"{', '.join(dim_vals) or 'none'})", path, 1, 1)
        if not isinstance(v, int) or not 0 < v < MAX_EXTENT:
            raise WorkloadError(f"--dims {k}={v!r}: must be an integer in [1, 2^31)", path, 1, 1)
        dim_vals[k] = v

    # ---- inputs and init -----------------------------------------------------------------
    raw_inputs = doc["inputs"]
    if not isinstance(raw_inputs, dict) or not raw_inputs:
        raise err("[inputs] must be a non-empty table of name = [dim, ...]", "inputs", None)
    shapes: dict[str, tuple[int, ...]] = {}
    axes: dict[str, tuple[str, ...]] = {}
    for k, v in raw_inputs.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            raise err(f"input name {k!r} is not an identifier", "inputs", k)
        if not isinstance(v, list) or not v:
            raise err(f"input {k}: shape must be a non-empty list of dim names", "inputs", k)
        shp = []
        for d in v:
            if isinstance(d, str) and d in dim_vals:
                shp.append(dim_vals[d])
            elif isinstance(d, int) and not isinstance(d, bool) and 0 < d < MAX_EXTENT:
                shp.append(d)
            else:
                raise err(f"input {k}: unknown dim {d!r} in its shape", "inputs", k)
        shapes[k] = tuple(shp)
        axes[k] = tuple(d if isinstance(d, str) else "" for d in v)
    params = _parameters(doc.get("parameters", []), shapes, err)
    raw_init = doc.get("init", {})
    if not isinstance(raw_init, dict):
        raise err("[init] must be a table of input = \"normal(0,1)\"-style strings", "init", None)
    for k, v in raw_init.items():
        if k not in shapes:
            raise err(f"[init] names {k!r}, which is not an input", "init", k)
        try:
            parse_init(v if isinstance(v, str) else repr(v))
        except ValueError as e:
            raise err(f"init of {k}: {e}", "init", k) from None
    tol = doc.get("tolerance", {})
    if not isinstance(tol, dict) or set(tol) - {"rtol"}:
        raise err("[tolerance] takes only rtol = <float>", "tolerance", None)
    rtol = tol.get("rtol", 1e-4)
    if not isinstance(rtol, (int, float)) or isinstance(rtol, bool) or not 0 < rtol < 1 \
            or not math.isfinite(rtol):
        raise err(f"rtol = {rtol!r}: must be a number in (0, 1)", "tolerance", "rtol")

    # ---- program -------------------------------------------------------------------------
    line, col = _program_pos(text)
    loc = Located(path, line, col)
    stmts = parse_program(program, loc)
    if len(stmts) > MAX_STATEMENTS:
        raise loc.error(f"more than {MAX_STATEMENTS} statements", stmts[MAX_STATEMENTS].line, 1)
    if not stmts:
        raise err("'program' has no statements", None, "program")
    ops = _analyse(stmts, shapes, dim_vals, loc)

    outputs = doc["outputs"]
    if not isinstance(outputs, list) or not outputs or not all(isinstance(o, str) for o in outputs):
        raise err("'outputs' must be a non-empty list of tensor names", None, "outputs")
    defined = {op.out for op in ops}
    for o in outputs:
        if o not in defined:
            raise err(f"output {o!r} is never defined by the program", None, "outputs")
    if len(set(outputs)) != len(outputs):
        raise err("'outputs' lists a tensor twice", None, "outputs")
    read = {t for op in ops for t in op.inputs()}
    for k in shapes:
        if k not in read:
            lno, cno = _key_pos(text, "inputs", k)
            warnings.warn(f"{path}:{lno}:{cno}: warning: input {k!r} is never read",
                          UnusedInputWarning, stacklevel=2)

    from .space_spec import validate_space  # local: the space table knows about ops
    space = validate_space(doc.get("space", {}), ops, lambda m, key=None: err(m, "space", key))
    return Workload(
        name=name, summary=summary, dtype=dtype, dims=tuple(dim_vals.items()),
        inputs=tuple(shapes.items()),
        init=tuple((k, v) for k, v in raw_init.items()),
        outputs=tuple(outputs), ops=tuple(ops), rtol=float(rtol),
        space_json=json.dumps(space, sort_keys=True), source=path, params=params,
        axes=tuple(axes.items()))


def _parameters(raw, shapes: dict, err) -> tuple[str, ...]:
    """The ``parameters`` key: a list of distinct input names, leaving at least one input to
    pass per call (a binding that leaves nothing to pass is a mistake, not a use)."""
    if not isinstance(raw, list) or not all(isinstance(p, str) for p in raw):
        raise err("'parameters' must be a list of input names", None, "parameters")
    for p in raw:
        if p not in shapes:
            raise err(f"'parameters' names {p!r}, which is not an input (inputs: "
                      f"{', '.join(shapes)})", None, "parameters")
    if len(set(raw)) != len(raw):
        raise err("'parameters' lists an input twice", None, "parameters")
    if raw and set(raw) == set(shapes):
        raise err("'parameters' names every input: nothing would be left to pass per call",
                  None, "parameters")
    return tuple(raw)


def _program_pos(text: str) -> tuple[int, int]:
    """File line and column where the program string's first line starts."""
    lines = text.split("\n")
    for n, line in enumerate(lines, start=1):
        m = re.match(r'^\s*(?:program|"program"|\'program\')\s*=\s*("""|\'\'\'|"|\')', line)
        if m:
            rest = line[m.end():]
            if m.group(1) in ('"""', "'''") and rest in ("", "\r"):
                return n + 1, 1  # TOML trims only a newline right after the delimiter
            if m.group(1) == '"""' and rest.rstrip() == "\\":
                # a line-ending backslash trims all whitespace and newlines that follow it
                for k in range(n, len(lines)):
                    body = lines[k].lstrip()
                    if body:
                        return k + 1, len(lines[k]) - len(body) + 1
            return n, m.end() + 1
    return 1, 1


def _analyse(stmts: list[Statement], shapes: dict[str, tuple[int, ...]],
             dims: dict[str, int], loc: Located) -> list[Op]:
    inputs = set(shapes)
    shapes = dict(shapes)
    later = {s.target.tensor: s.line for s in stmts}
    ops: list[Op] = []
    for s in stmts:
        t = s.target
        if t.tensor in inputs:
            raise loc.error(f"{t.tensor!r} is an input; it cannot be assigned", s.line, t.col)
        if t.tensor in shapes:
            raise loc.error(f"tensor {t.tensor!r} defined twice", s.line, t.col)
        for n, i in enumerate(t.idx):
            if i in t.idx[:n]:
                raise loc.error(f"index {i!r} repeated on the left", s.line, t.idx_cols[n])
        bound: dict[str, tuple[int, str, int]] = {}   # index -> (extent, tensor, col)
        order: list[str] = []
        for node in walk(s.expr):
            if isinstance(node, PName):
                if node.name in shapes or node.name in later:
                    raise loc.error(f"tensor {node.name!r} used without subscripts",
                                    s.line, node.col)
                if node.name not in dims:
                    raise loc.error(f"unknown dim {node.name!r} (dims: "
                                    f"{', '.join(dims) or 'none'})", s.line, node.col)
            if not isinstance(node, PAccess):
                continue
            if node.tensor not in shapes:
                if node.tensor in later and node.tensor != t.tensor:
                    raise loc.error(f"tensor {node.tensor!r} is read before it is defined "
                                    f"(line {later[node.tensor]} of the program)", s.line, node.col)
                raise loc.error(f"unknown tensor {node.tensor!r}", s.line, node.col)
            shp = shapes[node.tensor]
            if len(node.idx) != len(shp):
                raise loc.error(f"{node.tensor!r} has {len(shp)} dimension(s) but is accessed "
                                f"with {len(node.idx)} subscript(s)", s.line, node.col)
            for n, (i, ext) in enumerate(zip(node.idx, shp)):
                if i in node.idx[:n]:
                    raise loc.error(f"index {i!r} repeated in one access (diagonals are not "
                                    f"supported)", s.line, node.idx_cols[n])
                if i in dims and i not in t.idx:
                    pass  # an index may share a dim's name; it is still an index here
                if i in bound and bound[i][0] != ext:
                    e0, t0, c0 = bound[i]
                    raise loc.error(f"index {i!r} has extent {ext} in {node.tensor!r} but {e0} "
                                    f"in {t0!r} (column {c0})", s.line, node.idx_cols[n])
                if i not in bound:
                    bound[i] = (ext, node.tensor, node.idx_cols[n])
                    order.append(i)
        for n, i in enumerate(t.idx):
            if i not in bound:
                # a where() condition bounds no index: `num[i,d] += where(j <= i, x[j,d], 0)`
                # needs a tensor of i's extent read too (a user's first causal prefix sum)
                raise loc.error(f"index {i!r} on the left appears in no access on the right, so "
                                f"its extent is unknown (a where() condition does not set it): "
                                f"read a tensor indexed by {i!r} in the statement",
                                s.line, t.idx_cols[n])
        for node in walk(s.expr):
            if isinstance(node, PWhere):
                check_indices(node, order, dims, loc, s.line)
        red = [i for i in order if i not in t.idx]
        if s.combiner == "none" and red:
            col = bound[red[0]][2]
            raise loc.error(f"index {red[0]!r} appears only on the right of '='; use '+=' or "
                            f"'max=' to reduce over it", s.line, col)
        if s.combiner != "none" and not red:
            sym = "+=" if s.combiner == "sum" else "max="
            raise loc.error(f"'{sym}' needs an index that appears only on the right",
                            s.line, t.col)
        domain = list(t.idx) + red
        canon = {i: f"d{n}" for n, i in enumerate(domain)}
        expr = rename(lower(s.expr, dims), canon)
        extents = tuple(bound[i][0] for i in domain)
        ops.append(Op(t.tensor, tuple(canon[i] for i in t.idx), tuple(canon[i] for i in red),
                      extents, s.combiner, expr, line=loc.first_line + s.line - 1))
        shapes[t.tensor] = extents[: len(t.idx)]
    return ops
