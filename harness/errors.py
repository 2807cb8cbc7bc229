"""One-line errors for bad user input (scenario files, result files): never a traceback.

Exit statuses of every command (`vlabench --help` lists them; docs/reliability.md): 0 success (a gate: pass),
1 a failed check (a gate: regression), 2 unusable input (`InputError`, `SchemaError`, an unknown family, a
missing optional package or device: one line naming the file, key or flag), 3 inconclusive (gate-like commands
only), 4 an internal failure (a bug, a CUDA or NCCL error): one line naming the log file that holds the traceback.

An internal failure is written to a log under $VLABENCH_LOG_DIR, else <temp dir>/vlabench-logs (the traceback goes
to stderr when no log can be written). Output piped into a reader that stops early (`vlabench gate ... | head -1`)
is dropped once the pipe closes: no BrokenPipeError traceback, and the command's own exit status is kept.
"""

from __future__ import annotations

import datetime
import os
import shlex
import sys
import tempfile
import traceback
from pathlib import Path

from models.schema import describe

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERNAL",
    "EXIT_OK",
    "EXIT_USAGE",
    "ClosedPipeSafe",
    "InputError",
    "UsageError",
    "describe",
    "fail",
    "internal_failure",
    "log_dir",
]

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_INTERNAL = 4  # never 1 (a gate's regression), 2 (the user's input) or 3 (inconclusive)


class InputError(ValueError):
    """`<file>: <key path>: expected <what>, got <what>` on one line."""

    def __init__(self, file: str, key: str | None, expected: str, got: str):
        self.file, self.key, self.expected, self.got = str(file), key, expected, got
        where = f"{self.file}: {key}" if key else self.file
        super().__init__(" ".join(f"{where}: expected {expected}, got {got}".split()))


class UsageError(InputError):
    """The user's input refused with a message already worded (e.g. a target the scenario does not list)."""

    def __init__(self, message: str):
        self.file, self.key, self.expected, self.got = None, None, None, None
        ValueError.__init__(self, " ".join(str(message).split()))


def fail(msg: str) -> int:
    """`vlabench: error: <msg>` on stderr; the usage exit status for a command to return."""
    print(f"vlabench: error: {msg}", file=sys.stderr)
    return EXIT_USAGE


def log_dir() -> Path:
    return Path(os.environ.get("VLABENCH_LOG_DIR") or Path(tempfile.gettempdir()) / "vlabench-logs")


def _write_log(exc: BaseException, argv: list[str]) -> Path | None:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        folder = log_dir()
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"vlabench-{stamp}-{os.getpid()}.log"
        text = "".join(traceback.format_exception(exc))
        path.write_text(f"vlabench {shlex.join(argv)}\n\n{text}", encoding="utf-8")
    except OSError:
        return None
    return path


def internal_failure(exc: BaseException, argv: list[str]) -> int:
    """One line naming the failure and the log file with its traceback; the internal-failure exit status."""
    what = " ".join(f"{type(exc).__name__}: {exc}".split())
    if len(what) > 300:
        what = what[:297] + "..."
    path = _write_log(exc, argv)
    if path is None:
        traceback.print_exception(exc, file=sys.stderr)
        where = "traceback above (no log directory could be written)"
    else:
        where = f"traceback in {path}"
    print(f"vlabench: internal error (not your input): {what} ({where})", file=sys.stderr)
    return EXIT_INTERNAL


class ClosedPipeSafe:
    """sys.stdout that sends its output to /dev/null once the reader has closed the pipe."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())  # what is still buffered goes nowhere, quietly
        finally:
            os.close(devnull)

    def __getattr__(self, name):
        return getattr(self._stream, name)
