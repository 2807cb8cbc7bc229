"""One-line errors for bad user input (scenario files, result files): never a traceback."""
from __future__ import annotations

from typing import Any

_YAML_TYPE_NAMES = {bool: "boolean", int: "integer", float: "number", str: "string",
                    list: "list", dict: "mapping", type(None): "null"}


def describe(value: Any, limit: int = 60) -> str:
    """A short, single-line description of a value for "got ..." messages, e.g. "boolean True"."""
    kind = _YAML_TYPE_NAMES.get(type(value), type(value).__name__)
    if value is None:
        return kind
    if isinstance(value, bool):
        return f"{kind} {str(value).lower()}"  # spelled as the user wrote it in YAML or JSON
    text = " ".join(repr(value).split())  # collapse newlines so the message stays on one line
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{kind} {text}"


class InputError(ValueError):
    """`<file>: <key path>: expected <what>, got <what>` on one line."""

    def __init__(self, file: str, key: str | None, expected: str, got: str):
        self.file, self.key, self.expected, self.got = str(file), key, expected, got
        where = f"{self.file}: {key}" if key else self.file
        super().__init__(" ".join(f"{where}: expected {expected}, got {got}".split()))
