"""The where() mask parts of a chain group (autotune.backends.chain_loops): the walk that
starts at the first block no mask covers, and the skip of a covered block (and the trim of the
covered chunks at a block's ends) once the running max is past the masks' constants
(search_spaces.chain_mask)."""
from __future__ import annotations

import math

from search_spaces.chain_mask import SKIP_MARGIN, c_never, mask_value, trim_quantum


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
        never = self.covered("jb", "(je - 1)")
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
        """Skips the block (for a step: for all its rows) where a mask covers it, and trims
        the chunks a mask covers off its ends (``ja``, ``jz``: the range the block's loops
        run), once the running max is past the masks' constants.  Why trim: a causal mask's
        diagonal block holds on average half a block of masked scores a row; causal_attention
        S=2048's chain in blocks of 256 ran 14.0 ms trimmed against 15.4 (one process, 7
        interleaved rounds, 2-core Xeon: bench/results/xeon-all-b9b8ae2), and so overtook
        blocks of 128 (14.5 ms, which the trim left as they were)."""
        T, I = self.ctype, self.itype
        top = mask_value(self.masks)
        value = self.neg_inf if math.isinf(top) else f"(({T}){top!r})"
        past = f"{self.run('m_run')} - {value} > (({T}){SKIP_MARGIN!r})"
        q = trim_quantum(self.block)
        if self.R == 1:
            out = [f"{ind}{I} ja = jb, jz = je;", f"{ind}if ({past}) {{",
                   f"{ind}  if ({self.covered('jb', '(je - 1)')}) continue;"]
            return out + self._trim(ind + "  ", self.covered, q) + [f"{ind}}}"]
        # a step's rows at once: one test of the mask over the step's box (the per-row tests
        # took 6 % of a causal chain on one core), then each row's running max
        first = f"c_{self.rdim}_0"
        hi = self.cbounds[self.rdim][1]
        last = f"({first} + {self.R - 1} < {hi} ? {first} + {self.R - 1} : {hi} - 1)"
        box = lambda lo, h: self.covered(lo, h, {self.rdim: (first, "_last")})
        ends = [box("jb", "(je - 1)")]
        if q < self.block:
            ends += [box(f"(je - {q})", "(je - 1)"), box("jb", f"(jb + {q - 1})")]
        return ([f"{ind}{I} ja = jb, jz = je;",
                 f"{ind}{{ const {I} _last = {last};",
                 f"{ind}  if ({' || '.join(ends)}) {{ int _all = 1;"]
                + self.per_row(ind + "    ", lambda i: [f"{i}if (!({past})) _all = 0;"])
                + [f"{ind}    if (_all) {{", f"{ind}      if ({ends[0]}) continue;"]
                + self._trim(ind + "      ", box, q)
                + [f"{ind}    }} }} }}"])

    def covered(self, lo: str, hi: str, rows: dict | None = None) -> str:
        """A C test that some mask covers the walk's ``[lo, hi]`` for the current row, or
        (``rows``: common name -> (first, last)) for every row of a step's box."""
        return " || ".join(c_never(m, lambda c: f"c_{c}", lo, hi, self.n, rows)
                           for m in self.masks)

    def _trim(self, ind: str, box, q: int) -> list[str]:
        """Narrows [ja, jz) by the whole chunks of ``q`` that ``box`` (a mask test over a range
        of the walk) covers at either end; one chunk is always left."""
        if q >= self.block:
            return []
        return [f"{ind}while (jz - {q} > ja && ({box(f'(jz - {q})', '(jz - 1)')})) jz -= {q};",
                f"{ind}while (ja + {q} < jz && ({box('ja', f'(ja + {q - 1})')})) ja += {q};"]
