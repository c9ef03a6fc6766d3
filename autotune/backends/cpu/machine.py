"""What this machine allows the generated contraction kernel (read from /proc and /sys once).

Kept apart from the kernel's compile-and-call module so that building a search space does not
import the executor (which compiles C and sets OpenMP's wait policy).
"""
from __future__ import annotations

import functools
import re
from pathlib import Path

from search_spaces.kernel import KernelBounds

from autotune.threads import cores


def _cache_size(text: str) -> int:
    mult = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}.get(text[-1:].upper(), 1)
    return int(text.rstrip("KMGkmg")) * mult


@functools.lru_cache(maxsize=1)
def machine_bounds() -> KernelBounds:
    """What this machine allows the kernel: vector widths from the CPU's flags in
    /proc/cpuinfo (AVX-512: 64 bytes and 32 vector registers; AVX2 with FMA: 32 bytes; else
    16), cache sizes from /sys/devices/system/cpu/cpu0/cache, cores from the affinity mask.
    Falls back to :class:`KernelBounds`'s defaults for what it cannot read."""
    d = KernelBounds()
    flags: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    if "avx512f" in flags:
        widths, regs = (64, 32, 16), 32
    elif {"avx2", "fma"} <= flags:
        widths, regs = (32, 16), 16
    elif flags:
        widths, regs = (16,), 16
    else:
        widths, regs = d.vec_bytes, d.registers
    sizes = {}
    for idx in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = int((idx / "level").read_text())
            kind = (idx / "type").read_text().strip()
            size = _cache_size((idx / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and re.fullmatch(r"[123]", str(level)):
            sizes[level] = size
    return KernelBounds(widths, regs, sizes.get(1, d.l1_bytes), sizes.get(2, d.l2_bytes),
                        sizes.get(3, d.l3_bytes), cores())
