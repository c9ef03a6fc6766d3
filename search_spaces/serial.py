"""Groups too small to share between threads: the CPU code generators run them on the calling
thread (an OpenMP ``if`` clause), and the cost model prices them that way.  One rule for both,
here, so that what runs and what is predicted agree.

Why: waking the other threads of a parallel region costs more than a few microseconds of work
saves.  ``autotune calibrate`` on a 2-core AVX-512 host read a region's start at 0.77 us plus
1.30 us per thread beyond the first; bench/unseen/tiny.toml (a 1 x 3 x 2 product with a
sigmoid gate, one generated-kernel group) ran 7.0 us a call, 4.9 us of it in its group, where
XLA ran the block in 6.5 us.  The bounds keep a group serial only while one core finishes it in
about a microsecond: 32 KiB of tensors (every tensor the group touches, whole) and 2^18 flops.
"""
from __future__ import annotations

import math

from .footprint import item_bytes
from .ir import accesses
from .workload import Workload

SERIAL_BYTES = 32 * 1024
SERIAL_FLOPS = 1 << 18


def runs_serial(nbytes: float, flops: float) -> bool:
    """Whether work of ``nbytes`` (every tensor touched, whole) and ``flops`` runs on one
    thread."""
    return nbytes <= SERIAL_BYTES and flops <= SERIAL_FLOPS


def loop_group_serial(w: Workload, members) -> bool:
    """Whether the loop group of ``members`` (ops of ``w``) runs on one thread: every tensor
    its ops read or write, whole, and their flops (each op's body over its whole domain)."""
    tensors = set(members)
    for m in members:
        tensors.update(a.tensor for a in accesses(w.op(m).expr))
    nbytes = sum(math.prod(w.shapes[t]) for t in tensors) * item_bytes(w)
    flops = sum(w.op(m).iterations * max(1, w.op(m).flops_per_iteration()[0]) for m in members)
    return runs_serial(nbytes, flops)


def kernel_serial(b: int, m: int, n: int, k: int, item: int) -> bool:
    """Whether a ``b`` x (``m`` x ``n`` x ``k``) product of the generated kernel runs on one
    thread (A, B and C counted once per batch item; the kernel's C entry point computes the
    same from its arguments: :func:`c_condition`)."""
    return runs_serial(float(item) * b * (m * k + k * n + m * n), 2.0 * b * m * n * k)


def c_condition(item: str, b: str, m: str, n: str, k: str) -> str:
    """:func:`kernel_serial` as a C expression over the named C variables (``item`` the
    element's size)."""
    return (f"((double){item} * {b} * ((double){m} * {k} + (double){k} * {n} + (double){m} * {n})"
            f" <= {SERIAL_BYTES}.0 && 2.0 * {b} * {m} * {n} * {k} <= {SERIAL_FLOPS}.0)")
