"""C spellings for the inlined float32 math (fast_exp, fast_tanh): float32 literals and a
polynomial in Horner form, so that the printed constants are the fitted ones to the last bit."""
from __future__ import annotations


def c_float(c: float) -> str:
    """A float32 literal of C (``1.0f``, never ``1f``), with 9 significant digits (exact)."""
    text = f"{c:.9g}"
    return text + ("f" if any(ch in text for ch in ".e") else ".0f")


def c_horner(coeffs, var: str) -> str:
    """The polynomial with ``coeffs`` (lowest degree first) in ``var``, in Horner form."""
    out = c_float(coeffs[-1])
    for c in coeffs[-2::-1]:
        out = f"({out} * {var} + {c_float(c)})"
    return out
