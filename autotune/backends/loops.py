"""What the C and CUDA generators share: one loop group's geometry, its index arithmetic and the
translation of IR expressions into C-family source.

A loop group is evaluated tile by tile of its anchor; inside a tile every member is computed over
its footprint (``search_spaces.footprint``).  Members other than the anchor live in a local,
row-major buffer over their footprint (``L_<name>``); every other tensor is global memory in the
candidate's layout (``G_<name>``).  :class:`LoopEmitter` holds that geometry and prints offsets,
loop nests, tile bounds and expressions; a language subclass gives the few pieces that differ
(integer literals, powers, a handful of math functions, the loop step) and the code around them
(an OpenMP parallel loop over tiles, or one CUDA thread block per tile).
"""
from __future__ import annotations

from search_spaces.candidate import Candidate
from search_spaces.footprint import footprint_shape, footprints, plan_group, strides, tile_sizes
from search_spaces.conditions import Condition, IndexExpr
from search_spaces.ir import Access, Binary, Const, Expr, Pow, Select, Unary
from search_spaces.partition import Group
from search_spaces.workload import Workload

# element type and the suffix of its <math.h> functions (expf / exp)
SCALAR_TYPES = {"float32": ("float", "f"), "float64": ("double", "")}

# math functions both languages spell alike; ``{s}`` is the type's suffix, ``{0}``/``{1}`` the
# arguments (subclasses add the ones they spell differently: rsqrt, sigmoid, relu)
COMMON_FUNCTIONS = {
    "exp": "exp{s}({0})", "log": "log{s}({0})", "sqrt": "sqrt{s}({0})",
    "tanh": "tanh{s}({0})", "abs": "fabs{s}({0})",
    "max": "fmax{s}({0}, {1})", "min": "fmin{s}({0}, {1})",
}


class LoopEmitter:
    """One loop group of a candidate, printed as C-family source by a language subclass.

    Subclasses set ``itype`` (the integer type of indices) and ``FUNCTIONS`` (their spellings of
    the functions missing from :data:`COMMON_FUNCTIONS`), and define :meth:`n` and
    :meth:`power`; :meth:`local_index` and :meth:`step` have defaults they may override.
    """
    itype = "long"
    FUNCTIONS: dict[str, str] = {}

    def __init__(self, w: Workload, cand: Candidate, g: Group, mats: set[str]):
        self.w, self.cand, self.g, self.mats = w, cand, g, mats    # mats: materialized tensors
        self.ctype, self.suf = SCALAR_TYPES[w.dtype]
        self.anchor = w.op(g.anchor)
        self.tiles = cand.schedule(g.anchor).tiles
        self.eff = tile_sizes(self.anchor, self.tiles)        # effective tile per anchor dim
        self.ntile = [-(-e // t) for e, t in zip(self.anchor.out_shape, self.eff)]
        self.fps = footprints(w, g, self.tiles)
        self.layout_of = lambda t: cand.layout(t, len(w.shapes[t]))
        self.plans = plan_group(w, g, self.tiles, self.layout_of)
        self.members = set(g.members)
        self.functions = {**COMMON_FUNCTIONS, **self.FUNCTIONS}

    # ---- hooks ---------------------------------------------------------------------------
    def n(self, x: int) -> str:
        """An integer literal of type ``itype``."""
        raise NotImplementedError

    def power(self, base: str, exponent: int) -> str:
        """``base ** exponent`` for a nonzero integer exponent."""
        raise NotImplementedError

    def local_index(self, v: str, start: str | None) -> str:
        """Position of index variable ``v`` inside a local buffer whose dim starts at the tile
        bound ``start`` (None: the dim is held whole)."""
        return f"({v} - {start})" if start is not None else v

    def step(self, v: str) -> str:
        """The increment of a loop over ``v``."""
        return f"{v}++"

    # ---- the group's tensors ---------------------------------------------------------------
    def arguments(self) -> tuple[list[str], list[str]]:
        """(global tensors the group reads, those it writes): its kernel's arguments, in order."""
        reads: list[str] = []
        for mp in self.plans:
            for acc in self.w.op(mp.op).reads():
                if acc.tensor not in self.members and acc.tensor not in reads:
                    reads.append(acc.tensor)
        writes = [m for m in self.g.members if m in self.mats or m == self.g.anchor]
        return reads, writes

    def buf_shape(self, name: str) -> tuple[int, ...]:
        """The shape of member ``name``'s local buffer (its footprint), row-major."""
        return footprint_shape(self.w.op(name), self.fps[name], self.anchor, self.tiles)

    def local(self, tensor: str) -> bool:
        return tensor in self.members and tensor != self.g.anchor

    def ref(self, tensor: str) -> str:
        return f"L_{tensor}" if self.local(tensor) else f"G_{tensor}"

    # ---- indexing --------------------------------------------------------------------------
    def offset(self, tensor: str, idx: tuple[str, ...], var: dict[str, str]) -> str:
        """The element offset of ``tensor[idx]`` in the buffer :meth:`ref` names, where ``var``
        maps the op's domain names to source variables."""
        if not self.local(tensor):
            return self.global_offset(tensor, idx, var)
        return self.tile_offset(tensor, idx, var)

    def stride(self, tensor: str, dim: int) -> int:
        """The element stride of ``tensor``'s dim ``dim`` in the buffer :meth:`ref` names (the
        stride :meth:`offset` multiplies that dim's index by)."""
        if not self.local(tensor):
            return strides(self.w.shapes[tensor], self.layout_of(tensor))[dim]
        return self.buf_strides(tensor)[dim]

    def buf_strides(self, tensor: str) -> tuple[int, ...]:
        """Element strides of ``tensor``'s tile buffer: row-major over :meth:`buf_shape`."""
        shape = self.buf_shape(tensor)
        return strides(shape, tuple(range(len(shape))))

    def tile_offset(self, tensor: str, idx: tuple[str, ...], var: dict[str, str]) -> str:
        """The element offset of ``tensor[idx]`` in a buffer shaped as its footprint in a
        tile (:meth:`buf_shape`, row-major), whether or not the tensor is local."""
        fp = self.fps[tensor]
        st = self.buf_strides(tensor)
        terms = [f"{self.local_index(var[i], f'b{fp[m][1]}' if fp[m][0] == 'tile' else None)}"
                 f"*{self.n(st[m])}" for m, i in enumerate(idx)]
        return " + ".join(terms) or "0"

    def global_offset(self, tensor: str, idx: tuple[str, ...], var: dict[str, str]) -> str:
        """The element offset of ``tensor[idx]`` in global memory, in the candidate's layout."""
        st = strides(self.w.shapes[tensor], self.layout_of(tensor))
        return " + ".join(f"{var[i]}*{self.n(s)}" for i, s in zip(idx, st)) or "0"

    def bounds(self, opname: str) -> dict[str, tuple[str, str]]:
        """Per domain index of ``opname``, the half-open range its footprint covers in a tile:
        the tile's bounds ``b<k>``/``e<k>`` on tiled dims, else the whole extent."""
        op = self.w.op(opname)
        fp = self.fps[opname]
        out = {}
        for m, i in enumerate(op.parallel):
            out[i] = (f"b{fp[m][1]}", f"e{fp[m][1]}") if fp[m][0] == "tile" else \
                ("0", self.n(op.out_shape[m]))
        for r in op.reduction:
            out[r] = ("0", self.n(op.extent(r)))
        return out

    end_qualifier = ""      # before a tile end's declaration (a generator may not read it)

    def tile_bounds(self, k: int, indent: str) -> str:
        """Declares ``b<k>``, ``e<k>``: the anchor tile ``t<k>``'s range along dim ``k``."""
        I, eff, ext = self.itype, self.n(self.eff[k]), self.n(self.anchor.out_shape[k])
        return (f"{indent}const {I} b{k} = t{k} * {eff}; {self.end_qualifier}"
                f"const {I} e{k} = b{k} + {eff} < {ext} ? b{k} + {eff} : {ext};")

    # ---- loops and expressions ---------------------------------------------------------------
    def loop_head(self, v: str, lo: str, hi: str) -> str:
        return f"for ({self.itype} {v} = {lo}; {v} < {hi}; {self.step(v)})"

    def nest(self, order, bounds: dict[str, tuple[str, str]], var: dict[str, str], indent: str,
             body: str, pragma: str | None = None) -> list[str]:
        """A loop nest over ``order`` (outermost first) around ``body``, each level two spaces
        deeper; ``pragma`` goes right before the innermost loop."""
        code = []
        for n, i in enumerate(order):
            if pragma and n == len(order) - 1:
                code.append(f"{indent}{pragma}")
            code.append(f"{indent}{self.loop_head(var[i], *bounds[i])}")
            indent += "  "
        code.append(f"{indent}{body}")
        return code

    def expr(self, e: Expr, var: dict[str, str]) -> str:
        """``e`` as a source expression (fully parenthesised), accesses through :meth:`offset`."""
        if isinstance(e, Const):
            return f"(({self.ctype}){e.value!r})"
        if isinstance(e, Access):
            return f"{self.ref(e.tensor)}[{self.offset(e.tensor, e.idx, var)}]"
        if isinstance(e, Unary):
            return f"(-{self.expr(e.x, var)})"
        if isinstance(e, Binary):
            return f"({self.expr(e.a, var)} {e.op} {self.expr(e.b, var)})"
        if isinstance(e, Pow):
            if e.exponent == 0:
                return f"(({self.ctype})1)"
            return self.power(self.expr(e.base, var), e.exponent)
        if isinstance(e, Select):
            return self.select(self.condition(e.cond, var), self.expr(e.a, var),
                               self.expr(e.b, var))
        return self.functions[e.fn].format(*[self.expr(a, var) for a in e.args], s=self.suf)

    def select(self, cond: str, a: str, b: str) -> str:
        """``where(cond, a, b)`` in the language (a C-family ternary here)."""
        return f"({cond} ? {a} : {b})"

    def condition(self, c: Condition, var: dict[str, str]) -> str:
        """A where() condition on the index variables.  Every loop, tiled or not, runs its
        variable over absolute index values (a tile's loop from its bound ``b<k>``; local
        buffers subtract the bound in :meth:`offset`), so the condition reads them as is.
        (A seam for later: a tile whose whole range makes ``c`` constant could skip the
        branch it never takes; nothing here does that yet.)"""
        return f"({self.index_value(c.lhs, var)} {c.op} {self.index_value(c.rhs, var)})"

    def index_value(self, x: IndexExpr, var: dict[str, str]) -> str:
        terms = [var[i] if c == 1 else f"{self.n(c)}*{var[i]}" for i, c in x.terms]
        text = " + ".join(terms)
        if x.offset or not terms:
            text = f"{text} + {self.n(x.offset)}" if terms else self.n(x.offset)
        return f"({text})"
