"""fmt_s: the one way times are printed (explain, bench tables, plots, gpu_trimul)."""
from __future__ import annotations

import pytest

from autotune.environment import dist_version
from autotune.report.units import fmt_s


@pytest.mark.parametrize("t, text", [
    (None, "-"), (2.5, "2.500 s"), (1.0, "1.000 s"), (0.01234, "12.34 ms"), (1e-3, "1.00 ms"),
    (5.6e-5, "56.0 us"), (0.0, "0.0 us")])
def test_fmt_s_picks_the_unit(t, text):
    assert fmt_s(t) == text


def test_fmt_s_milliseconds_to_three_digits():
    assert fmt_s(0.0123456, 3) == "12.346 ms"
    assert fmt_s(2.5, 3) == "2.500 s" and fmt_s(5.6e-5, 3) == "56.0 us"


def test_dist_version():
    import numpy
    assert dist_version("numpy") == numpy.__version__
    assert dist_version("no-such-distribution-here") is None
