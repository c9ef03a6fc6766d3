"""Workloads with online-softmax chains written only for the tests (none is a built-in): a
log-sum-exp, attention with a pair bias of another shape normalised after the weighted sum
(``o / l``), a masked variant, and near misses whose algebra breaks the rescale."""
from __future__ import annotations

import warnings

from pathlib import Path

from search_spaces import Workload, load_workload, parse_workload

# a row-wise log-sum-exp: max, exp of the difference, sum, then an epilogue reading m and l
LSE = """
m[i]     max= x[i,j]
p[i,j]    = exp(x[i,j] - m[i])
l[i]     += p[i,j]
lse[i]    = m[i] + log(l[i])
"""

# scores from a contraction plus a bias b[h,j] (no i), the weighted sum of unnormalised weights
# with an extra per-key factor, normalised by the epilogue (o * (1 / l) + the skip input)
BIASED = """
s[i,h,j]  += q[i,h,c] * k[j,h,c]
t[h,i,j]   = s[i,h,j] * 0.5 + b[h,j]
mx[h,i]  max= t[h,i,j]
e[i,j,h]   = exp(t[h,i,j] - mx[h,i])
z[h,i]    += e[i,j,h] * g[j]
u[h,d,i]  += v[j,h,d] * e[i,j,h]
y[i,h,d]   = u[h,d,i] * (1 / z[h,i]) + q[i,h,d]
"""

# normalised after the weighted sum (the form of the issue); BROKEN swaps one line of it for
# one that breaks the algebra the walk needs
PLAIN = """
m[i]     max= x[i,j]
p[i,j]    = exp(x[i,j] - m[i])
l[i]     += p[i,j]
o[i,d]   += p[i,j] * v[j,d]
r[i,d]    = o[i,d] / l[i]
"""
# normalised inside the weighted sum, as users write it: factors of the final sum (and max)
# at the rows are the same for every j, so the walk sums p * v and applies them after it
INLINE = """
m[i]     max= x[i,j]
p[i,j]    = exp(x[i,j] - m[i])
l[i]     += p[i,j]
o[i,d]   += p[i,j] * v[j,d] * g[d] / sqrt(l[i] * exp(m[i] - m[i]))
"""
# a local window: two nested where() masks, each a half of the band, the weights normalised
# inside the weighted sum
BAND = """
s[h,i,j]  += q[h,i,c] * k[h,j,c]
t[h,i,j]   = where(j - i <= 5, where(i - j <= 5, s[h,i,j], -1e9), -1e9)
m[h,i]   max= t[h,i,j]
e[h,i,j]   = exp(t[h,i,j] - m[h,i])
l[h,i]    += e[h,i,j]
o[h,i,c]  += e[h,i,j] * v[h,j,c] / l[h,i]
"""
# cross-attention: T query rows against S keys stored [h][c][j] (contiguous along the walk),
# a window mask on the scores; the query rows are shared by every key, so a CPU tile steps
# several of them at once (T not a multiple of the step: the last step repeats a row)
CROSS = """
s[h,i,j]  += q[h,i,c] * k[h,c,j] * 0.25
t[h,i,j]   = where(j <= i + 20, s[h,i,j], -1e9)
m[h,i]   max= t[h,i,j]
e[h,i,j]   = exp(t[h,i,j] - m[h,i])
l[h,i]    += e[h,i,j]
o[h,i,d]  += e[h,i,j] * v[h,j,d] / l[h,i]
"""
# grouped-query attention: each key/value head g serves R query heads; keys and values stored
# [j][g][d] as models pass them (the keys strided along the walk: a CPU chain reads a copy with
# the walk innermost, search_spaces.chain_walk.repacked; the values are read along d)
GQA = """
s[g,r,i,j] += q[i,g,r,d] * k[j,g,d] * 0.125
m[g,r,i] max= s[g,r,i,j]
e[g,r,i,j] = exp(s[g,r,i,j] - m[g,r,i])
l[g,r,i]  += e[g,r,i,j]
o[i,g,r,d] += e[g,r,i,j] * v[j,g,d] / l[g,r,i]
"""
# self-attention of one input: x gives the keys and the values, so no copy of it serves both
SELF = """
s[i,j]  += x[i,c] * x[j,c]
m[i]   max= s[i,j]
e[i,j]   = exp(s[i,j] - m[i])
l[i]    += e[i,j]
o[i,c]  += e[i,j] * x[j,c] / l[i]
"""
# plain chains (search_spaces.chain: no max, no sum): a Gaussian kernel between rows of x and z
# from their Gram matrix and norms, times coefficients (the norm of z walked with the scores'
# block); and an MLP whose SiLU hidden layer is walked, with a residual epilogue
KERNEL_SUM = """
nx[i]   += x[i,d] * x[i,d]
nz[j]   += z[j,d] * z[j,d]
g[i,j]  += x[i,d] * z[j,d]
k[i,j]   = exp((2.0 * g[i,j] - nx[i] - nz[j]) * 0.1)
y[i,c]  += k[i,j] * a[j,c]
"""
MLP = """
h[t,f]  += x[t,c] * w1[c,f]
s[t,f]   = h[t,f] * sigmoid(h[t,f])
y[t,c]  += s[t,f] * w2[f,c]
out[t,c] = y[t,c] * 0.5 + x[t,c]
"""
BROKEN = {
    # the exponential times the score: not exp(X - m)
    "times_score": ("p[i,j]    = exp(x[i,j] - m[i])", "p[i,j] = exp(x[i,j] - m[i]) * x[i,j]"),
    # the exponential of another expression than the max's
    "other_score": ("p[i,j]    = exp(x[i,j] - m[i])", "p[i,j] = exp(2 * x[i,j] - m[i])"),
    # the max over another index than the sums'
    "other_index": ("m[i]     max= x[i,j]\np[i,j]    = exp(x[i,j] - m[i])",
                    "m[j] max= x[i,j]\np[i,j] = exp(x[i,j] - m[j])"),
    # a sum that is not linear in the exponentials
    "squared": ("l[i]     += p[i,j]", "l[i] += p[i,j] * p[i,j]"),
    # a weighted sum that reads the sum at the walked index: not constant over the walk
    # (N = J in broken()); read at the rows it is (INLINE)
    "sum_at_walked": ("o[i,d]   += p[i,j] * v[j,d]", "o[i,d] += p[i,j] * v[j,d] / l[j]"),
    # a factor of the final sum that also varies with j
    "sum_with_walked": ("o[i,d]   += p[i,j] * v[j,d]",
                        "o[i,d] += p[i,j] * v[j,d] / (l[i] + x[i,j])"),
    # the exponentials read by an op outside the chain
    "escaping": ("r[i,d]    = o[i,d] / l[i]", "r[i,d] = o[i,d] / l[i] + p[i,d]"),
}


def chain_workload(program: str, outputs: list[str], dims: dict[str, int],
                   inputs: dict[str, list[str]], name: str = "chain_test",
                   dtype: str = "float64", folder: Path | None = None) -> Workload:
    """The workload, parsed from text (or, given ``folder``, loaded from a file written there:
    a search's measuring worker reloads the workload from its path)."""
    text = (f'name = "{name}"\ndtype = "{dtype}"\n'
            f'outputs = {outputs!r}\n'.replace("'", '"')
            + f'program = """{program}"""\n[dims]\n'
            + "".join(f"{k} = {v}\n" for k, v in dims.items()) + "[inputs]\n"
            + "".join(f'{k} = {v!r}\n'.replace("'", '"') for k, v in inputs.items()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        if folder is None:
            return parse_workload(text, f"{name}.toml")
        path = folder / f"{name}.toml"
        path.write_text(text)
        return load_workload(str(path))


def lse(n: int = 5, j: int = 37) -> Workload:
    return chain_workload(LSE, ["lse"], {"N": n, "J": j}, {"x": ["N", "J"]}, "lse")


def biased(s: int = 21, h: int = 2, c: int = 3, d: int = 3,
           folder: Path | None = None) -> Workload:
    return chain_workload(BIASED, ["y"], {"S": s, "H": h, "C": c, "D": d},
                          {"q": ["S", "H", "C"], "k": ["S", "H", "C"], "b": ["H", "S"],
                           "g": ["S"], "v": ["S", "H", "D"]}, "biased", folder=folder)


def plain(n: int = 4, j: int = 6, d: int = 3, program: str = PLAIN) -> Workload:
    return chain_workload(program, ["r"], {"N": n, "J": j, "D": d},
                          {"x": ["N", "J"], "v": ["J", "D"]}, "plain")


def inline(n: int = 4, j: int = 6, d: int = 3) -> Workload:
    return chain_workload(INLINE, ["o"], {"N": n, "J": j, "D": d},
                          {"x": ["N", "J"], "v": ["J", "D"], "g": ["D"]}, "inline")


def band(h: int = 2, s: int = 37, c: int = 4) -> Workload:
    return chain_workload(BAND, ["o"], {"H": h, "S": s, "C": c},
                          {"q": ["H", "S", "C"], "k": ["H", "S", "C"], "v": ["H", "S", "C"]},
                          "band")


def broken(key: str) -> Workload:
    old, new = BROKEN[key]
    assert old in PLAIN
    return plain(4, 4, 4, PLAIN.replace(old, new))


def cross(h: int = 2, t: int = 13, s: int = 64, c: int = 8, d: int = 16,
          dtype: str = "float64") -> Workload:
    return chain_workload(CROSS, ["o"], {"H": h, "T": t, "S": s, "C": c, "D": d},
                          {"q": ["H", "T", "C"], "k": ["H", "C", "S"], "v": ["H", "S", "D"]},
                          "cross", dtype=dtype)


def gqa(g: int = 2, r: int = 3, s: int = 37, d: int = 16, dtype: str = "float64") -> Workload:
    return chain_workload(GQA, ["o"], {"G": g, "R": r, "S": s, "D": d},
                          {"q": ["S", "G", "R", "D"], "k": ["S", "G", "D"], "v": ["S", "G", "D"]},
                          "gqa", dtype=dtype)


def self_attention(s: int = 37, c: int = 16) -> Workload:
    return chain_workload(SELF, ["o"], {"S": s, "C": c}, {"x": ["S", "C"]}, "self_attention")


def kernel_sum(n: int = 13, m: int = 37, d: int = 5, c: int = 3, program: str = KERNEL_SUM,
               dtype: str = "float64") -> Workload:
    return chain_workload(program, ["y"], {"N": n, "M": m, "D": d, "C": c},
                          {"x": ["N", "D"], "z": ["M", "D"], "a": ["M", "C"]}, "kernel_sum",
                          dtype=dtype)


def mlp(t: int = 11, c: int = 6, f: int = 35, dtype: str = "float64") -> Workload:
    return chain_workload(MLP, ["out"], {"T": t, "C": c, "F": f},
                          {"x": ["T", "C"], "w1": ["C", "F"], "w2": ["F", "C"]}, "mlp",
                          dtype=dtype)


def chained_candidate(space, block: int):
    """The candidate of ``space`` (a SearchSpace) with every chain on, walked in blocks of
    ``block``, and the last option of every other choice."""
    return space.build(lambda n, opts: 1 if n.startswith("chain:") else block
                       if n.startswith("chain_block:") else opts[-1])
