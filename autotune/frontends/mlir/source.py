"""The MLIR file being imported: where its ops are, and the one-line errors that name them."""
from __future__ import annotations

import re
from dataclasses import dataclass

from search_spaces.errors import WorkloadError

from autotune.frontends.mlir.attributes import one_line

# dialects of programs not yet lowered to linalg: their ops get a hint on how to lower them
_FOREIGN_DIALECTS = ("stablehlo", "mhlo", "chlo", "tosa", "torch", "tf", "tfl")


class MlirImportError(WorkloadError):
    """MLIR that cannot be imported: one line, ``file:line:col: error: ...``."""


def line_col(loc) -> tuple[int, int]:
    """The line and column a (printed) MLIR location names; (1, 1) if it names none."""
    m = re.search(r":(\d+):(\d+)", str(loc))
    return (int(m.group(1)), int(m.group(2))) if m else (1, 1)


@dataclass(frozen=True)
class MlirSource:
    """The file being imported: its name (for messages) and its text (to find ops in).

    Every stage of the import makes its errors here, so that all of them read
    ``path:line:col: error: ...``."""
    path: str
    text: str

    def error(self, msg: str, line: int = 1, col: int = 1) -> MlirImportError:
        """An error at ``line:col`` of this file."""
        return MlirImportError(msg, self.path, line, col)

    def where(self, op) -> tuple[int, int]:
        """The op's line and column in this file; an op whose location the passes lost (one
        inlined from a callee) is found by its name in the text."""
        m = re.search(r":(\d+):(\d+)", str(op.location))
        if m:
            return int(m.group(1)), int(m.group(2))
        name = op.operation.name
        for n, text in enumerate(self.text.split("\n"), start=1):
            k = text.find(name)
            if k >= 0 and not text.lstrip().startswith("//"):
                return n, k + 1
        return 1, 1

    def op_error(self, op, msg: str) -> MlirImportError:
        """An error at the op's place (:meth:`where`)."""
        return self.error(msg, *self.where(op))

    def unsupported(self, op) -> MlirImportError:
        """``unsupported op 'name'``, with a hint to lower it first for a foreign dialect."""
        name = op.operation.name
        hint = ""
        if name.split(".")[0] in _FOREIGN_DIALECTS:
            hint = (" (lower the program to linalg on tensors first, e.g. with "
                    "`iree-compile --compile-to=input FILE`)")
        return self.op_error(op, f"unsupported op '{name}'{hint}")

    def diagnostic_error(self, what: str, e) -> MlirImportError:
        """``what: message`` of an MLIRError, at the place of its first diagnostic."""
        diags = getattr(e, "error_diagnostics", None) or []
        if diags:
            d = diags[0]
            line, col = line_col(d.location)
            return self.error(f"{what}: {one_line(d.message)}", line, col)
        return self.error(f"{what}: {one_line(str(e))}")


def strip_locations(text: str) -> str:
    """``text`` without its ``loc(...)`` annotations and ``#loc`` aliases, lines kept in place.

    IR printed with debug info (as iree-compile prints it) carries the locations of the program
    it came from; without them the parser gives every op its line in this file, which is what
    an error message should name."""
    if "loc" not in text:
        return text
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        ch = text[i]
        if ch == '"':                       # a string literal: copied as is
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i, line_start = j + 1, False
            continue
        if line_start and text.startswith("#loc", i):   # an alias definition: a whole line
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
            continue
        if text.startswith("loc(", i) and (i == 0 or not (text[i - 1].isalnum()
                                                         or text[i - 1] in "_.$")):
            depth, j = 0, i + 3
            while j < n:
                c = text[j]
                if c == '"':
                    j += 1
                    while j < n and text[j] != '"':
                        j += 2 if text[j] == "\\" else 1
                elif c == "(":
                    depth += 1
                elif c == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            while out and out[-1] in (" ", "\t"):
                out.pop()
            out.append("\n" * text.count("\n", i, j + 1))
            i = j + 1
            continue
        out.append(ch)
        line_start = ch == "\n" or (line_start and ch in " \t")
        i += 1
    return "".join(out)
