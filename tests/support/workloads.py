"""A small workload from its program text, for tests that build one inline."""
from __future__ import annotations

import json

from search_spaces import parse_workload


def workload(program: str, dims: dict[str, int], inputs: dict[str, list[str]], outputs):
    """The workload "small" (small.toml) with ``program``, its ``dims``, ``inputs`` (name ->
    dim names) and ``outputs``."""
    text = (f'name = "small"\noutputs = {json.dumps(list(outputs))}\nprogram = """\n{program}"""\n'
            "[dims]\n" + "".join(f"{k} = {v}\n" for k, v in dims.items())
            + "[inputs]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in inputs.items()))
    return parse_workload(text, "small.toml")
