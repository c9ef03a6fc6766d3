"""C + OpenMP source for the loop groups of a candidate (the CPU backend's kernels).

Each loop group becomes one function ``void group_K(void **args)``: an OpenMP-parallel loop over
the anchor's tiles; inside a tile every member is evaluated over its footprint into a per-thread
buffer (members read each other's buffers, never memory written by another tile), and the anchor
writes its tile of the output in the candidate's layout.
"""
from __future__ import annotations

from dataclasses import dataclass

from search_spaces.candidate import IMPL_LOOP, Candidate
from search_spaces.footprint import footprint_shape, footprints, plan_group, strides, tile_sizes
from search_spaces.ir import Access, Binary, Const, Expr, Pow, Unary
from search_spaces.partition import Group, groups, materialized
from search_spaces.workload import Workload

C_TYPES = {"float32": ("float", "f"), "float64": ("double", "")}


@dataclass(frozen=True)
class GroupKernel:
    """One generated function: its name and the tensors its ``args`` array holds, in order."""
    index: int
    name: str
    anchor: str
    args: tuple[str, ...]       # global tensors: reads first, then written ones
    writes: tuple[str, ...]


def _fn(name: str, args: list[str], suf: str) -> str:
    a = args
    table = {
        "exp": f"exp{suf}({a[0]})", "log": f"log{suf}({a[0]})", "sqrt": f"sqrt{suf}({a[0]})",
        "rsqrt": f"(1/sqrt{suf}({a[0]}))", "sigmoid": f"(1/(1+exp{suf}(-({a[0]}))))",
        "tanh": f"tanh{suf}({a[0]})", "relu": f"fmax{suf}({a[0]}, 0)",
        "abs": f"fabs{suf}({a[0]})",
    }
    if name in table:
        return table[name]
    return f"fmax{suf}({a[0]}, {a[1]})" if name == "max" else f"fmin{suf}({a[0]}, {a[1]})"


class _Emitter:
    def __init__(self, w: Workload, cand: Candidate, g: Group, ctype: str, suf: str):
        self.w, self.cand, self.g, self.ctype, self.suf = w, cand, g, ctype, suf
        self.anchor = w.op(g.anchor)
        self.sched = cand.schedule(g.anchor)
        self.tiles = self.sched.tiles
        self.eff = tile_sizes(self.anchor, self.tiles)
        self.fps = footprints(w, g, self.tiles)
        self.layout_of = lambda t: cand.layout(t, len(w.shapes[t]))
        self.plans = plan_group(w, g, self.tiles, self.layout_of)
        self.members = set(g.members)
        self.lines: list[str] = []

    # local buffers: row-major over the member's footprint shape
    def buf_shape(self, name: str) -> tuple[int, ...]:
        return footprint_shape(self.w.op(name), self.fps[name], self.anchor, self.tiles)

    def index_expr(self, tensor: str, idx: tuple[str, ...], var: dict[str, str]) -> str:
        """C offset of ``tensor[idx]`` where ``var`` maps the op's domain names to C variables."""
        if tensor in self.members and tensor != self.g.anchor:
            fp = self.fps[tensor]
            st = strides(self.buf_shape(tensor), tuple(range(len(fp))))
            terms = []
            for m, i in enumerate(idx):
                base = f" - b{fp[m][1]}" if fp[m][0] == "tile" else ""
                terms.append(f"({var[i]}{base})*{st[m]}L")
            return " + ".join(terms) or "0"
        st = strides(self.w.shapes[tensor], self.layout_of(tensor))
        return " + ".join(f"{var[i]}*{s}L" for i, s in zip(idx, st)) or "0"

    def ref(self, tensor: str) -> str:
        if tensor in self.members and tensor != self.g.anchor:
            return f"L_{tensor}"
        return f"G_{tensor}"

    def expr(self, e: Expr, var) -> str:
        if isinstance(e, Const):
            return f"(({self.ctype}){e.value!r})"
        if isinstance(e, Access):
            return f"{self.ref(e.tensor)}[{self.index_expr(e.tensor, e.idx, var)}]"
        if isinstance(e, Unary):
            return f"(-{self.expr(e.x, var)})"
        if isinstance(e, Binary):
            return f"({self.expr(e.a, var)} {e.op} {self.expr(e.b, var)})"
        if isinstance(e, Pow):
            base = self.expr(e.base, var)
            if e.exponent == 0:
                return f"(({self.ctype})1)"
            prod = " * ".join(["_p"] * abs(e.exponent))
            body = f"({{ {self.ctype} _p = {base}; {prod}; }})"
            return f"(1/{body})" if e.exponent < 0 else body
        return _fn(e.fn, [self.expr(a, var) for a in e.args], self.suf)

    def ranges(self, opname: str) -> dict[str, tuple[str, str]]:
        op = self.w.op(opname)
        fp = self.fps[opname]
        out = {}
        for m, i in enumerate(op.parallel):
            out[i] = (f"b{fp[m][1]}", f"e{fp[m][1]}") if fp[m][0] == "tile" else \
                ("0", f"{op.out_shape[m]}L")
        for r in op.reduction:
            out[r] = ("0", f"{op.extent(r)}L")
        return out

    def member(self, mp) -> None:
        op = self.w.op(mp.op)
        rng = self.ranges(mp.op)
        var = {i: f"v_{i}" for i in op.domain}
        is_anchor = mp.op == self.g.anchor
        target = f"{self.ref(mp.op) if not is_anchor else 'G_' + mp.op}"
        off = self.index_expr(mp.op, op.parallel, var)
        add = self.lines.append
        add(f"    /* {op.text()} */")
        init = {"sum": "0", "max": "-INFINITY"}.get(op.combiner)
        order = list(mp.order)
        inner = order[-1]
        red_inner = inner in op.reduction
        if init is not None and not red_inner:
            self._nest([i for i in op.parallel], rng, var, f"{target}[{off}] = {init};", simd=True)
        body_expr = self.expr(op.expr, var)
        if op.combiner == "none":
            self._nest(order, rng, var, f"{target}[{off}] = {body_expr};", simd=True)
        elif red_inner:
            comb = "acc += _v;" if op.combiner == "sum" else "acc = _v > acc ? _v : acc;"
            red = "+" if op.combiner == "sum" else "max"
            outer = order[:-1]
            lo, hi = rng[inner]
            first = [i for i in op.reduction if i not in outer]
            # reductions outside the innermost loop accumulate into the target across passes
            acc_init = f"{target}[{off}]" if len(first) < len(op.reduction) else init
            inner_code = (f"{{ {self.ctype} acc = {acc_init};\n"
                          f"      #pragma omp simd reduction({red}:acc)\n"
                          f"      for (long {var[inner]} = {lo}; {var[inner]} < {hi}; {var[inner]}++)"
                          f" {{ {self.ctype} _v = {body_expr}; {comb} }}\n"
                          f"      {target}[{off}] = acc; }}")
            if len(first) < len(op.reduction):
                self._nest([i for i in op.parallel], rng, var, f"{target}[{off}] = {init};",
                           simd=True)
            self._nest(outer, rng, var, inner_code, simd=False)
        else:
            upd = (f"{target}[{off}] += {body_expr};" if op.combiner == "sum" else
                   f"{{ {self.ctype} _v = {body_expr}; if (_v > {target}[{off}]) "
                   f"{target}[{off}] = _v; }}")
            self._nest(order, rng, var, upd, simd=True)
        if not is_anchor and mp.op in self.mats:
            gvar = {i: f"v_{i}" for i in op.parallel}
            self._nest(list(op.parallel), rng, gvar,
                       f"G_{mp.op}[{self.index_expr_global(mp.op, op.parallel, gvar)}] = "
                       f"L_{mp.op}[{off}];", simd=True)

    def index_expr_global(self, tensor, idx, var) -> str:
        st = strides(self.w.shapes[tensor], self.layout_of(tensor))
        return " + ".join(f"{var[i]}*{s}L" for i, s in zip(idx, st)) or "0"

    def _nest(self, order, rng, var, body: str, simd: bool) -> None:
        ind = "    "
        code = []
        for n, i in enumerate(order):
            lo, hi = rng[i]
            if simd and n == len(order) - 1:
                code.append(f"{ind}#pragma omp simd")
            code.append(f"{ind}for (long {var[i]} = {lo}; {var[i]} < {hi}; {var[i]}++)")
            ind += "  "
        code.append(f"{ind}{body}")
        self.lines.extend(code)

    def emit(self, index: int, mats: set[str]) -> tuple[str, GroupKernel]:
        self.mats = mats
        w, g = self.w, self.g
        reads = []
        for mp in self.plans:
            for acc in w.op(mp.op).reads():
                if acc.tensor not in self.members and acc.tensor not in reads:
                    reads.append(acc.tensor)
        writes = [m for m in g.members if m in mats or m == g.anchor]
        args = tuple(reads + writes)
        name = f"group_{index}"
        ct = self.ctype
        head = [f"void {name}(void **args) {{"]
        for k, t in enumerate(args):
            const = "const " if t in reads else ""
            head.append(f"  {const}{ct} *restrict G_{t} = ({const}{ct} *)args[{k}];")
        nd = len(self.anchor.parallel)
        ntile = [-(-e // t) for e, t in zip(self.anchor.out_shape, self.eff)]
        head.append("  #pragma omp parallel")
        head.append("  {")
        locals_ = [m for m in g.members if m != g.anchor]
        for m in locals_:
            size = 1
            for s in self.buf_shape(m):
                size *= s
            head.append(f"  {ct} *restrict L_{m} = ({ct} *)malloc(sizeof({ct}) * {size}L);")
        collapse = f" collapse({nd})" if nd > 1 else ""
        head.append(f"  #pragma omp for schedule(dynamic, 1){collapse}" if nd else "")
        loops = "".join(f"  for (long t{k} = 0; t{k} < {ntile[k]}L; t{k}++)\n" for k in range(nd))
        head.append(loops + "  {")
        for k in range(nd):
            head.append(f"    const long b{k} = t{k} * {self.eff[k]}L; "
                        f"const long e{k} = b{k} + {self.eff[k]}L < {self.anchor.out_shape[k]}L ? "
                        f"b{k} + {self.eff[k]}L : {self.anchor.out_shape[k]}L;")
        self.lines = []
        for mp in self.plans:
            self.member(mp)
        tail = ["  }"] + [f"  free(L_{m});" for m in locals_] + ["  }", "}"]
        src = "\n".join(head + self.lines + tail)
        return src, GroupKernel(index, name, g.anchor, args, tuple(writes))


PRELUDE = """#include <math.h>
#include <stdlib.h>
/* generated by autotune: one function per fused group */
#if defined(__x86_64__) && defined(__GLIBC__) && defined(AUTOTUNE_LIBMVEC)
/* glibc declares its vector exp/log (libmvec) only under __FAST_MATH__, which
   -fno-finite-math-only turns off; declare them so sigmoid and softmax loops vectorise. */
__attribute__((simd("notinbranch"))) float expf(float);
__attribute__((simd("notinbranch"))) float logf(float);
__attribute__((simd("notinbranch"))) double exp(double);
__attribute__((simd("notinbranch"))) double log(double);
#endif
"""


def generate_units(w: Workload, cand: Candidate) -> list[tuple[str, GroupKernel]]:
    """One self-contained C source per loop group (compiled and cached separately, so that
    candidates differing in one group recompile only that group)."""
    ctype, suf = C_TYPES[w.dtype]
    mats = materialized(w, cand.fused_pairs)
    out = []
    for k, g in enumerate(groups(w, cand.fused_pairs)):
        if cand.schedule(g.anchor).impl != IMPL_LOOP:
            continue
        src, kern = _Emitter(w, cand, g, ctype, suf).emit(k, mats)
        out.append((PRELUDE + "\n" + src + "\n", kern))
    return out


def generate(w: Workload, cand: Candidate) -> tuple[str, list[GroupKernel]]:
    """C source for every loop group of ``cand`` and the argument lists of its functions."""
    units = generate_units(w, cand)
    body = "\n\n".join(src.removeprefix(PRELUDE) for src, _ in units)
    return PRELUDE + body, [k for _, k in units]
