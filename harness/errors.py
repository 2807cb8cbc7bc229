"""One-line errors for bad user input (scenario files, result files): never a traceback."""

from __future__ import annotations

import sys

from models.schema import describe

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "InputError", "describe", "fail"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class InputError(ValueError):
    """`<file>: <key path>: expected <what>, got <what>` on one line."""

    def __init__(self, file: str, key: str | None, expected: str, got: str):
        self.file, self.key, self.expected, self.got = str(file), key, expected, got
        where = f"{self.file}: {key}" if key else self.file
        super().__init__(" ".join(f"{where}: expected {expected}, got {got}".split()))


def fail(msg: str) -> int:
    """`vlabench: error: <msg>` on stderr; the usage exit status for a command to return."""
    print(f"vlabench: error: {msg}", file=sys.stderr)
    return EXIT_USAGE
