"""where(COND, A, B) in the workload language: parsed into the IR (Select, Condition,
IndexExpr), every malformed condition one located error, hashed with canonical index names,
counted by the cost model, and Condition's own arithmetic (over arrays, over boxes)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from costmodel import preset
from costmodel.model import estimate
from search_spaces import load_workload, parse_workload
from search_spaces.conditions import COMPARISONS, Condition, IndexExpr, index_expr
from search_spaces.ir import Access, Const, Select, conditions, count_flops, index_names, to_text
from search_spaces.plans import named_plan
from search_spaces.space import SearchSpace, TileBounds
from tests.search_spaces.test_language import TAIL, check, doc, parse_ok
from tests.support import DATA

# x[N=4, K=3], v[K]; the program's first line is file line 4 (see test_language)
MASKED = "y[i] += where(k <= i, x[i,k], 0) * v[k]\n"


def test_where_parses_into_a_select_with_canonical_indices():
    w = parse_ok(doc(MASKED))
    (op,) = w.ops
    assert op.parallel == ("d0",) and op.reduction == ("d1",)
    sel, acc = op.factors()
    assert isinstance(sel, Select) and acc == Access("v", ("d1",))
    assert sel.cond == Condition("<=", IndexExpr((("d1", 1),)), IndexExpr((("d0", 1),)))
    assert sel.a == Access("x", ("d0", "d1")) and sel.b == Const(0.0)
    assert to_text(sel) == "where(d1 <= d0, x[d0,d1], 0.0)"
    assert op.text() == "y[d0] += (where(d1 <= d0, x[d0,d1], 0.0) * v[d1])"
    assert [a.tensor for a in op.reads()] == ["x", "v"]


def test_every_comparison_and_index_sums_parse():
    for cmp in COMPARISONS:
        w = parse_ok(doc(f"y[i] += where(i + 1 {cmp} k - 2 + 3, x[i,k], v[k])\n"))
        c = conditions(w.ops[0].expr)[0]
        assert c.op == cmp
        assert c.lhs == IndexExpr((("d0", 1),), 1) and c.rhs == IndexExpr((("d1", 1),), 1)
    # a repeated index adds up; constants fold; a cancelled index disappears
    w = parse_ok(doc("y[i] += where(i + i - k < 2 - 5 + k - k, x[i,k], v[k])\n"))
    c = conditions(w.ops[0].expr)[0]
    assert c.lhs == IndexExpr((("d0", 2), ("d1", -1))) and c.rhs == IndexExpr((), -3)
    assert c.text() == "2*d0 - d1 < -3"


def test_where_nests_and_mixes_with_everything():
    w = parse_ok(doc("y[i] max= where(i == k, exp(x[i,k]), where(i != 0, -x[i,k] * 2, v[k]))"
                     " + max(where(k > 1, v[k], 1), 0)\n"))
    assert len(conditions(w.ops[0].expr)) == 3
    assert w.ops[0].combiner == "max"


def test_a_mask_factor_without_accesses_depends_on_its_indices():
    w = parse_ok(doc("y[i] += x[i,k] * where(k < i, 1, 0.5) * v[k]\n"))
    mask = w.ops[0].factors()[1]
    assert isinstance(mask, Select) and index_names(mask) == {"d0", "d1"}
    assert w.ops[0].is_contraction is False


# ---- errors: (program, file line, file column, words in the message) ---------------------------
WHERE_ERRORS = {
    "unknown index": ("y[i] += where(q <= i, x[i,k], 0) * v[k]\n", 4, 15,
                      "unknown index 'q'", "indices: i, k"),
    "a dim is no index": ("y[i] += where(i < N, x[i,k], 0) * v[k]\n", 4, 19,
                          "unknown index 'N'", "is a dim"),
    "unknown index on the right side": ("y[i] += where(i < k + j, x[i,k], 0)\n", 4, 23,
                                        "unknown index 'j'"),
    "tensor access in the condition": ("y[i] += where(v[k] < i, x[i,k], 0)\n", 4, 15,
                                       "tensor access v[...]", "indices only"),
    "call in the condition": ("y[i] += where(exp(i) < k, x[i,k], 0)\n", 4, 15, "call exp(...)"),
    "float in the condition": ("y[i] += where(i < 1.5, x[i,k], 0)\n", 4, 19,
                               "1.5 is not an integer"),
    "exponent form in the condition": ("y[i] += where(i < 1e3, x[i,k], 0)\n", 4, 19,
                                       "1e3 is not an integer"),
    "integer out of range": ("y[i] += where(i < 2147483648, x[i,k], 0)\n", 4, 19,
                             "out of range"),
    "missing comparison": ("y[i] += where(i, x[i,k], 0)\n", 4, 16, "must compare",
                           "found ','"),
    "missing right side": ("y[i] += where(i <, x[i,k], 0)\n", 4, 18,
                           "index name or an integer", "found ','"),
    "empty condition": ("y[i] += where(, x[i,k], 0)\n", 4, 15, "index name or an integer"),
    "chained comparison": ("y[i] += where(i < k < 2, x[i,k], 0)\n", 4, 21, "chained"),
    "product in the condition": ("y[i] += where(2 * i < k, x[i,k], 0)\n", 4, 17,
                                 "only '+' and '-'", "'*'"),
    "parenthesised condition": ("y[i] += where((i < k), x[i,k], 0)\n", 4, 15,
                                "index name or an integer", "'('"),
    "junk after the condition": ("y[i] += where(i < k x[i,k], 0)\n", 4, 21,
                                 "expected ',' after the condition"),
    "two arguments": ("y[i] += where(i < k, x[i,k])\n", 4, 9, "takes 3 arguments", "got 2"),
    "four arguments": ("y[i] += where(i < k, x[i,k], 0, 1)\n", 4, 9, "got 4"),
    "condition only": ("y[i] += where(i < k)\n", 4, 9, "got 1"),
    "unclosed": ("y[i] += where(i < k, x[i,k], 0\n", 4, 31, "expected ')'"),
    "comparison outside where()": ("y[i] += x[i,k] < v[k]\n", 4, 16,
                                   "only allowed as the condition of where(COND, A, B)"),
    "comparison as a where() branch": ("y[i] += where(i < k, x[i,k] > 0, 0)\n", 4, 29,
                                       "only allowed as the condition"),
    "index only in the condition and the left side": (
        "z[i,j] = where(j <= i, x[i,k], 0)\n", 4, 5, "'j'", "extent is unknown",
        "a where() condition does not set it", "read a tensor indexed by 'j'"),
    "a reduction index only in the condition": (
        "y[i] += where(j <= i, x[i,k], 0)\n", 4, 15, "unknown index 'j'"),
}


@pytest.mark.parametrize("case", list(WHERE_ERRORS), ids=list(WHERE_ERRORS))
def test_where_error_location(case):
    program, line, col, *needles = WHERE_ERRORS[case]
    check(doc(program), line, col, *needles)


def test_where_error_on_a_later_line_and_indented():
    check(doc("y[i] += x[i,k] * v[k]\n   z[i] = where(i >= k, y[i], 0)\n"), 5, 22,
          "unknown index 'k'", "indices: i")


def test_where_is_still_a_tensor_name_when_subscripted():
    text = doc("y[i] += where[i,k] * v[k]\n", tail=TAIL.replace('x = ["N", "K"]',
                                                          'where = ["N", "K"]'))
    w = parse_ok(text)
    assert w.ops[0].reads()[0].tensor == "where"


# ---- the hash ---------------------------------------------------------------------------------
def _hash(program: str) -> str:
    return parse_ok(doc(program)).hash


def test_hash_canonicalises_index_names_inside_conditions():
    base = _hash(MASKED)
    assert _hash("y[a] += where(b <= a, x[a,b], 0) * v[b]\n") == base
    assert _hash("y[i] += where( k<=i , x[i,k] , 0 )*v[k]   # masked\n") == base


@pytest.mark.parametrize("other", [
    "y[i] += where(k < i, x[i,k], 0) * v[k]\n",            # the comparison
    "y[i] += where(i <= k, x[i,k], 0) * v[k]\n",           # the sides
    "y[i] += where(k + 1 <= i, x[i,k], 0) * v[k]\n",       # an offset
    "y[i] += where(k <= i, 0, x[i,k]) * v[k]\n",           # the branches
    "y[i] += where(k <= i, x[i,k], 1) * v[k]\n",           # a branch's value
    "y[i] += x[i,k] * v[k]\n",                             # no condition
])
def test_hash_changes_with_the_condition(other):
    assert _hash(other) != _hash(MASKED)


# ---- the cost model: a compare and a select per evaluation --------------------------------------
def test_select_costs_a_compare_and_a_select():
    plain = parse_ok(doc("y[i] += x[i,k] * v[k]\n")).ops[0]
    masked = parse_ok(doc(MASKED)).ops[0]
    assert count_flops(masked.expr)[0] == count_flops(plain.expr)[0] + 2
    assert masked.flops_per_iteration()[0] == plain.flops_per_iteration()[0] + 2
    assert count_flops(parse_ok(doc("y[i] += where(k < i, exp(x[i,k]), log(v[k]))\n"))
                       .ops[0].expr) == (2, 2)


def test_cost_model_counts_the_select_flops():
    dims = {"S": 16, "H": 2, "D": 4, "C": 8}
    # without the normalizer o is a product of two operands plus the mask, so neither version
    # is a product the space may reorder (the masked one is not split while where() factors
    # are not reordered; the unmasked one would be): the same plan shape on both sides
    text = (DATA / "causal_attention.toml").read_text().replace(" / l[h,i]", "")
    w = parse_workload(text, "masked.toml", dims)
    for old, new in (("where(j <= i, s[h,i,j], -1e30)", "s[h,i,j]"),
                     ("where(j > i, 0, exp(t[h,i,j] - m[h,i]))", "exp(t[h,i,j] - m[h,i])"),
                     (" * where(i - j > 5, 0.5, 1)", "")):
        assert old in text
        text = text.replace(old, new)
    unmasked = parse_workload(text, "unmasked.toml", dims)
    # t: a compare and a select instead of a copy (the -1e30 is a negation too); p: one select
    # more; o: the mask factor (a select and a compare) and its multiplication
    S, H = 16, 2
    extra = S * S * H * (2 + 1) + S * S * H * 2 + S * H * 4 * S * (2 + 1)
    assert w.flops() - unmasked.flops() == extra
    dev = preset("cpu")
    cand = named_plan(SearchSpace(w, TileBounds(1, 1024)), "unfused")
    ucand = named_plan(SearchSpace(unmasked, TileBounds(1, 1024)), "unfused")
    assert estimate(w, cand, dev).flops - estimate(unmasked, ucand, dev).flops == extra


# ---- Condition ---------------------------------------------------------------------------------
def test_condition_over_arrays_matches_pointwise():
    c = Condition("<", index_expr([("i", 1), ("j", -1)], 2), index_expr([("k", 2)]))
    i, j, k = (np.arange(n).reshape(s) for n, s in ((4, (4, 1, 1)), (5, (1, 5, 1)),
                                                       (3, (1, 1, 3))))
    mask = c.over({"i": i, "j": j, "k": k}.__getitem__)
    assert mask.shape == (4, 5, 3)
    for a, b, d in itertools.product(range(4), range(5), range(3)):
        assert mask[a, b, d] == c.holds({"i": a, "j": b, "k": d}) == (a - b + 2 < 2 * d)


def test_condition_on_a_box_is_exact_for_orderings_and_safe_for_equalities():
    rng = np.random.default_rng(0)
    seen = {True: 0, False: 0, None: 0}
    for _ in range(1500):
        lhs = index_expr([("i", int(rng.choice([1, -1, 2]))), ("j", int(rng.choice([1, -1, 0])))],
                         int(rng.integers(-3, 4)))
        rhs = index_expr([("j", int(rng.choice([1, -1, 0])))], int(rng.integers(-3, 4)))
        c = Condition(str(rng.choice(COMPARISONS)), lhs, rhs)
        box = {n: tuple(sorted(int(x) for x in rng.choice(range(-4, 8), 2, replace=False)))
               for n in "ij"}
        vals = {c.holds({"i": a, "j": b}) for a in range(box["i"][0], box["i"][1] + 1)
                for b in range(box["j"][0], box["j"][1] + 1)}
        got = c.on_box(box)
        seen[got] += 1
        if got is not None:
            assert vals == {got}, (c, box)
        elif c.op not in ("==", "!="):
            assert vals == {True, False}, (c, box)
    assert min(seen.values()) > 100
    # a causal mask's blocks: below the diagonal all kept, above all masked, on it mixed
    causal = Condition("<=", IndexExpr((("j", 1),)), IndexExpr((("i", 1),)))
    assert causal.on_box({"i": (8, 15), "j": (0, 7)}) is True
    assert causal.on_box({"i": (0, 7), "j": (8, 15)}) is False
    assert causal.on_box({"i": (0, 7), "j": (0, 7)}) is None


def test_causal_test_workload_loads():
    w = load_workload(str(DATA / "causal_attention.toml"))
    assert sum(len(conditions(op.expr)) for op in w.ops) == 3
