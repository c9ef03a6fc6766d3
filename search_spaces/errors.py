"""Errors raised for malformed workloads: always one line naming file:line:column."""
from __future__ import annotations


class WorkloadError(ValueError):
    """A malformed workload or search-space table.

    ``str(err)`` is the one-line message the CLI prints: ``file:line:col: error: what``.
    """

    def __init__(self, message: str, path: str = "<workload>", line: int = 1, col: int = 1):
        self.message = message.replace("\n", " ")
        self.path = path
        self.line = line
        self.col = col
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: error: {self.message}"


class Located:
    """Maps offsets inside the TOML `program` string back to file lines and columns."""

    def __init__(self, path: str, first_line: int = 1, first_col: int = 1):
        self.path = path
        self.first_line = first_line
        self.first_col = first_col

    def error(self, message: str, line: int, col: int) -> WorkloadError:
        """line/col are 1-based inside the program text."""
        file_line = self.first_line + line - 1
        file_col = col + (self.first_col - 1 if line == 1 else 0)
        return WorkloadError(message, self.path, file_line, file_col)
