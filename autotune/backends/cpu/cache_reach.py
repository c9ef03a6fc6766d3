"""How much of the last-level cache this machine's reads find: the largest working set that
every core's reads stream faster than memory, measured, in place of the size Linux reports.

Why: a virtual machine reports its host's cache (the 2-core Xeon of bench/results/xeon-f3a5458:
480 MiB), most of which other tenants hold.  Read by the generated parallel loop
(``probe_spread_read``, one region) it gave 104-141 GB/s up to 4 MiB (the cores' L2), 47-57
from 8 to 64 MiB, and 34-37 from 128 MiB on, where a copy ran 27-30: the cache reaches 64 MiB,
and the model priced tensors of up to 240 MB as read once from the cache
(``costmodel.model``: half the cache)."""
from __future__ import annotations

import numpy as np

from autotune.backends.buffers import aligned_full
from autotune.backends.cpu import probes

FAST = 1.2            # a working set read this much faster than the largest is in the cache
SMALLEST = 4 << 20    # the first working set tried (bytes)
LARGEST = 1 << 30     # and the most the probe allocates


def reach_sizes(reported: int, limit: int) -> list[int]:
    """Working sets (bytes) from :data:`SMALLEST`, doubling up to twice the reported cache (the
    last one past it, read from memory), at most ``limit`` and :data:`LARGEST`; none where fewer
    than two fit."""
    top = min(2 * reported, limit, LARGEST)
    sizes, s = [], SMALLEST
    while s <= top:
        sizes.append(s)
        s *= 2
    return sizes if len(sizes) >= 2 else []


def read_bandwidths(lib, sizes: list[int], repeats: int) -> dict[int, float]:
    """bytes/s of the parallel one-region read over the first ``size`` bytes of one buffer,
    for each size (each read after a warm-up read of the same set, best of the runs)."""
    buf = aligned_full(max(sizes) // 4, 1.0, np.float32)
    base, out = buf.ctypes.data, {}
    for size in sizes:
        n = size // 4
        t = probes.best_time(lambda r, n=n: lib.probe_spread_read(base, n, 1, probes.RUN),
                             repeats)
        out[size] = probes.spread_read_bytes(n, 1) / t
    return out


def cache_reach(bandwidths: dict[int, float], reported: int) -> int:
    """The cache's reach: the largest working set read at least :data:`FAST` times as fast as
    the largest one, and never more than ``reported``; ``reported`` itself where none is (the
    cache reads no faster than memory, or one size alone was measured)."""
    if len(bandwidths) < 2:
        return reported
    memory = bandwidths[max(bandwidths)]
    fast = [s for s, bw in bandwidths.items() if s < max(bandwidths) and bw >= FAST * memory]
    return min(reported, max(fast)) if fast else reported
