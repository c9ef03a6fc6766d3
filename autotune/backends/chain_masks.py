"""The where() mask parts of a chain group (autotune.backends.chain_loops): the walk that
starts at the first block no mask covers, and the skip of a covered block once the running max
is past the masks' constants (search_spaces.chain_mask)."""
from __future__ import annotations

import math

from search_spaces.chain_mask import SKIP_MARGIN, c_never, mask_value


class ChainMasks:
    """Mixin of :class:`~autotune.backends.chain_loops.ChainLoops`: it uses that class's
    steps, rows, running values and the emitter's literals."""
    def masked_walk(self, ind: str) -> tuple[list[str], str]:
        """The block loop's head where where() masks cover blocks, and the new indent.

        A block a mask covers adds exp(c - m) == 0 to every sum once the running max is
        SKIP_MARGIN above the masks' constants c: skipping it is exact.  The walk starts at the
        first block no mask covers (for any row of a group of steps) and wraps around, so that
        the covered blocks before it (a band's, a window's) come after a real max too; a step
        skips a block only where every row of it may."""
        ch, I, R = self.chain, self.itype, self.R
        B = self.n(self.block)
        never = " || ".join(c_never(m, lambda c: f"c_{c}", "jb", "(je - 1)", self.n)
                            for m in self.masks)
        nb = self.n(-(-ch.extent // self.block))
        span = f"const {I} jb = b0 * {B}; {self.block_end()}"
        out = [f"{ind}{I} b0 = 0;"]
        if R == 1:
            out.append(f"{ind}for (; b0 + 1 < {nb}; ++b0) {{ {span} if (!({never})) break; }}")
        else:
            out += [f"{ind}for (; b0 + 1 < {nb}; ++b0) {{ {span} int _any = 0;"]
            out += self.steps(ind + "  ", lambda i: self.per_row(
                i, lambda i2: [f"{i2}_any |= ({never});"]))
            out.append(f"{ind}  if (!_any) break; }}")
        out.append(f"{ind}for ({I} bk = 0; bk < {nb}; ++bk) {{")
        ind += "  "
        out.append(f"{ind}const {I} jb = ((bk + b0) % {nb}) * {B};")
        out.append(f"{ind}{self.block_end()}")
        return out, ind

    def skip_check(self, ind: str) -> list[str]:
        """Skips the block (for a step: for all its rows) where a mask covers it and the
        running max is past the masks' constants."""
        T = self.ctype
        top = mask_value(self.masks)
        value = self.neg_inf if math.isinf(top) else f"(({T}){top!r})"
        past = f"{self.run('m_run')} - {value} > (({T}){SKIP_MARGIN!r})"
        if self.R == 1:
            never = " || ".join(c_never(m, lambda c: f"c_{c}", "jb", "(je - 1)", self.n)
                                for m in self.masks)
            return [f"{ind}if ({past} && ({never})) continue;"]
        # a step's rows at once: one test of the mask over the step's box (the per-row tests
        # took 6 % of a causal chain on one core), then each row's running max
        I, first = self.itype, f"c_{self.rdim}_0"
        hi = self.cbounds[self.rdim][1]
        last = f"({first} + {self.R - 1} < {hi} ? {first} + {self.R - 1} : {hi} - 1)"
        box = " || ".join(c_never(m, lambda c: f"c_{c}", "jb", "(je - 1)", self.n,
                                  {self.rdim: (first, "_last")}) for m in self.masks)
        return ([f"{ind}{{ const {I} _last = {last};",
                 f"{ind}  if ({box}) {{ int _all = 1;"]
                + self.per_row(ind + "    ", lambda i: [f"{i}if (!({past})) _all = 0;"])
                + [f"{ind}    if (_all) continue; }} }}"])
