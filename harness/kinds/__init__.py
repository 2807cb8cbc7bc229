"""Result kinds: each kind of result file (a ladder, an evaluation, a training run, ...) is one module of this
package that declares how to recognise its files, their load-time checks, the table `vlabench show` prints and,
where it has them, its gate comparison and its place in `vlabench compare`. docs/extending.md says how to add one.

A kind module defines a `ResultKind` subclass and registers it with `@register`. The kind modules here are found
and imported on the first lookup (any module of this package whose name does not start with '_'); a kind from
elsewhere (a test, a plugin) registers its class the same way. This module is the only place, with the kind
modules, that reads a file's `kind` key or tells kinds apart by the keys they hold: everyone else asks
`kind_of(result)` and uses what the kind declares.

The registry's shape: `ResultKind` (one instance per kind, by name), `Result` (a loaded file: its kind, its path
and its raw dict), `register`/`unregister`, `get(name)`, `kinds()`, `kind_of(data)` (exactly one kind, else
`UnknownKind`), `find(data)` (that kind or None), `is_kind(data, name)`, `require(...)` (a one-line refusal of a
file of another kind), `stated(data)` (the `kind` value as written) and `describe(data, ...)`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..errors import InputError
from ._blocks import shared_checks

__all__ = [
    "Result",
    "ResultKind",
    "UnknownKind",
    "describe",
    "find",
    "get",
    "is_kind",
    "kind_of",
    "kinds",
    "register",
    "require",
    "stated",
    "unregister",
]


class ResultKind:
    """One kind of result file. Subclasses set `name` (and `key`, the value of the file's `kind` key; None for
    files without one) and override what differs from these defaults."""

    name: ClassVar[str]
    key: ClassVar[str | None] = None
    in_compare_columns: ClassVar[bool] = False  # a speed ladder: a column of `compare`, gate-power, floor shares
    in_training_tables: ClassVar[bool] = False  # a train-ladder: a column of `compare`'s training tables
    provides_floor: ClassVar[bool] = False  # its floor block is the floor of ladders shown beside it
    # A gate of its own (train-ladders): gate(current, baseline, limits, rungs, current_name, baseline_name)
    gate: ClassVar[Callable[..., Any] | None] = None
    # The schema its files are parsed with on load (a dataclass of models/schema.py); None: the ResultFile schema
    # every run's result shares (harness/results.py). A kind with a schema of its own (a profile) is no ResultFile:
    # only `vlabench show` loads it (load_result(..., any_kind=True)); the commands that compute with rungs refuse it.
    schema: ClassVar[type | None] = None

    def recognise(self, data: dict) -> bool:
        """Whether a loaded dict is a file of this kind: by default, its `kind` key is this kind's `key`."""
        return data.get("kind") == self.key

    def check(self, data: dict) -> None:
        """The load-time checks of a file its schema accepted (harness/results.py load_result): for a ResultFile,
        those every kind shares (harness/kinds/_blocks.py: rung names, success counts, blocks of any kind, the figures
        of harness/stats/result_checks.py); a kind with a schema of its own overrides this. Raises SchemaError or
        Mismatch."""
        shared_checks(data)

    def table(self, data: dict, fmt: str = "simple", tasks: bool = True) -> str:
        """The table `vlabench show` prints."""
        raise NotImplementedError(f"a {self.name} result has no table")

    def trained_runs(self, data: dict) -> list[tuple[str, dict]] | None:
        """(label, train block) of each trained run, for the loss curves of a report; None: not a training."""
        return None

    def count(self, data: dict) -> str:
        """What an existing file holds, after `... of SCENARIO on TARGET` (e.g. ` with 7 rungs`)."""
        return _rung_count(data)

    def summary(self, data: dict, name: str, target: str) -> str:
        what = f"{self.key} result" if self.key else "result"
        return f"{what} of {name} on {target}{self.count(data)}"


@dataclass(frozen=True)
class Result:
    """A loaded result file: its kind, where it was read and the dict as the file holds it."""

    kind: ResultKind
    path: str | None
    data: dict

    @classmethod
    def of(cls, data: dict, path: str | None = None) -> Result:
        return cls(kind_of(data), path, data)

    @property
    def scenario(self) -> str:
        return self.data["scenario"]["name"]

    @property
    def target(self) -> str:
        return self.data["target"]["name"]

    @property
    def rungs(self) -> list[dict]:
        return self.data.get("rungs") or []

    def table(self, fmt: str = "simple", tasks: bool = True) -> str:
        return self.kind.table(self.data, fmt, tasks)


class UnknownKind(ValueError):
    """A dict recognised as no registered kind, or as several: `expected` and `got` as in a SchemaError."""

    def __init__(self, expected: str, got: str):
        self.key, self.expected, self.got = "kind", expected, got
        super().__init__(f"kind: expected {expected}, got {got}")


_REGISTRY: dict[str, ResultKind] = {}
_discovered = False


def register(cls: type[ResultKind]) -> type[ResultKind]:
    """Register a kind (a class decorator); a second kind of one name is refused."""
    if cls.name in _REGISTRY:
        raise ValueError(f"result kind {cls.name!r} is registered already")
    _REGISTRY[cls.name] = cls()
    return cls


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def _discover() -> None:
    """Import every kind module of this package once (each registers its kind)."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")


def kinds() -> list[ResultKind]:
    _discover()
    return list(_REGISTRY.values())


def get(name: str) -> ResultKind:
    _discover()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownKind("a registered result kind (" + ", ".join(_REGISTRY) + ")", repr(name)) from None


def find(data: dict) -> ResultKind | None:
    """The one kind that recognises `data`, or None (none, or several)."""
    found = [k for k in kinds() if k.recognise(data)]
    return found[0] if len(found) == 1 else None


def kind_of(data: dict) -> ResultKind:
    """The one kind that recognises `data`; raises UnknownKind for none or several."""
    found = [k for k in kinds() if k.recognise(data)]
    if len(found) == 1:
        return found[0]
    if found:
        return _several(found)
    keys = sorted({repr(k.key) for k in _REGISTRY.values()})
    raise UnknownKind("a kind of result file (" + ", ".join(keys) + ")", repr(data.get("kind")))


def _several(found: list[ResultKind]) -> ResultKind:
    raise UnknownKind("a file of one result kind", "a file of several: " + ", ".join(k.name for k in found))


def is_kind(data: dict, name: str) -> bool:
    """Whether `data` is a file of the kind `name` (False for a dict of no kind or several)."""
    return find(data) is get(name)


def stated(data: dict):
    """The file's `kind` value as written (None for a ladder), for messages."""
    return data.get("kind")


def require(data: dict, name: str, file: str, expected: str, shown: Callable[[Any], str] = repr) -> None:
    """A one-line InputError (key `kind`, the stated kind shown by `shown`) unless `data` is of kind `name`."""
    if not is_kind(data, name):
        raise InputError(file, "kind", expected, shown(stated(data)))


def describe(data: dict, name: str, target: str) -> str:
    """What an existing file of scenario `name` on `target` holds (harness/outputs.py describe_existing)."""
    kind = find(data)
    if kind is not None:
        return kind.summary(data, name, target)
    what = f"{data.get('kind')} result" if data.get("kind") else "result"
    return f"{what} of {name} on {target}{_rung_count(data)}"


def _rung_count(data: dict) -> str:
    rungs = data.get("rungs")
    return f" with {len(rungs)} rung{'s' if len(rungs) != 1 else ''}" if isinstance(rungs, list) else ""
