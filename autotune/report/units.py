"""Times as people read them, the same in every table, log line and chart."""
from __future__ import annotations


def fmt_s(t: float | None, ms_digits: int = 2) -> str:
    """Seconds with a readable unit (``1.234 s``, ``12.34 ms``, ``56.7 us``; ``-`` for None).

    ``ms_digits``: decimals of a time in milliseconds (explain's predictions show three).
    """
    if t is None:
        return "-"
    if t >= 1:
        return f"{t:.3f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.{ms_digits}f} ms"
    return f"{t * 1e6:.1f} us"
