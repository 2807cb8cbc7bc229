"""The one error of the data layer: a dataset (or an episode handed to the writer) that cannot be used."""

from __future__ import annotations

from ..errors import InputError


class DatasetError(InputError):
    """`<file>: <key>: expected <what>, got <what>` on one line, naming the dataset file at fault.

    A DataLoader worker's exception is rebuilt in the main process as `DatasetError(text)`, text being
    "Caught DatasetError in DataLoader worker ... Original Traceback ...": that form keeps the original
    one-line message, so the main process still reports one clear line."""

    def __init__(self, file, key: str | None = None, expected: str | None = None, got: str | None = None):
        if expected is None and got is None and key is None:
            lines = [line for line in str(file).splitlines() if f"{DatasetError.__name__}: " in line]
            text = lines[-1].split(f"{DatasetError.__name__}: ", 1)[1] if lines else str(file)
            ValueError.__init__(self, text)
            self.file, self.key, self.expected, self.got = text, None, None, None
            return
        super().__init__(file, key, expected, got)
