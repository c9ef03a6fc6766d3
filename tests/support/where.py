"""Workloads with where(COND, A, B) shared by the reference, peer and backend tests: a program
with every form of condition (WHERE_PROGRAM) and the causal-attention test workload
(tests/data/causal_attention.toml, not a built-in)."""
from __future__ import annotations

import warnings

from search_spaces import Workload, load_workload, parse_workload
from tests.support import DATA

CAUSAL = DATA / "causal_attention.toml"
CAUSAL_SMALL = {"S": 13, "H": 2, "D": 4, "C": 8}

# A[I,K], B[K,J], v[K] with I=5, J=4, K=6: each statement a different place for a condition;
# the last one reads masked intermediates through another mask (fusion candidates)
WHERE_PROGRAM = """
a[i,k]   = where(k <= i, A[i,k], -A[i,k])
b[i]   max= where(k > i + 1, A[i,k], -100)
c[i,j]  += A[i,k] * where(k - j < 2, B[k,j], 0) * v[k]
d[i,j]  += A[i,k] * B[k,j] * where(i == k, 2, 1)
e[i,k]   = where(i != k, where(i >= 2, exp(A[i,k]), v[k]), 0.5)
f[i]    += where(1 < 2, v[k], A[i,k]) * where(3 <= 1, 1, A[i,k])
g[i,k]   = A[i,k] * where(i + i - k >= 0 - 1, 1, 0)
r[i]    += where(k < i, a[i,k], e[i,k]) * b[i] * g[i,k]
"""
WHERE_OUTPUTS = ["a", "b", "c", "d", "e", "f", "g", "r"]


def where_workload(dtype: str = "float32") -> Workload:
    """WHERE_PROGRAM as a workload of ``dtype``."""
    text = (f'name = "where_forms"\ndtype = "{dtype}"\n'
            f'outputs = {WHERE_OUTPUTS!r}\n'.replace("'", '"')
            + f'program = """{WHERE_PROGRAM}"""\n'
            + '[dims]\nI = 5\nJ = 4\nK = 6\n[inputs]\nA = ["I", "K"]\nB = ["K", "J"]\n'
              'v = ["K"]\n')
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return parse_workload(text, "where_forms.toml")


def causal(dims: dict[str, int] | None = None) -> Workload:
    """The causal-attention test workload, at small dims unless ``dims`` are given."""
    return load_workload(str(CAUSAL), CAUSAL_SMALL if dims is None else dims)
