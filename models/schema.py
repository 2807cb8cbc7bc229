"""One typed loader for every configuration vlabench reads: scenarios, model options, evaluation blocks,
published figures and result files. A mapping parsed from YAML or JSON becomes a frozen dataclass, checked
against the dataclass's type hints; every error is one line naming the key path, what was expected and what
was found (`ladder[1].options.attention: expected one of eager, sdpa, flex, fused, got string 'flash'`).

Types understood: bool, int, float (a YAML 1.1 string such as `1e-5` counts as a number), str (non-empty),
Literal[...], None, unions (`int | Literal["auto"]`), tuple[X, ...] and list[X] (read from lists, kept as
tuples), dict[str, X], nested dataclasses and Any. `Annotated` adds checks: `Bounds` for numbers and
lengths, `Match` for strings, `Expect` to word the expectation.

It lives in models/ because model families declare their options with it and models/ never imports the
harness; the harness reads its own files with the same loader.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import reprlib
import types
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

_TYPE_NAMES = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    list: "list",
    tuple: "list",
    dict: "mapping",
    type(None): "null",
}


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 3, 8, 8, 8
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 80, 80, 40


def describe(value: Any, limit: int = 60) -> str:
    """A short, single-line description of a value for "got ..." messages, e.g. "boolean true"."""
    kind = _TYPE_NAMES.get(type(value), type(value).__name__)
    if value is None:
        return kind
    if isinstance(value, bool):
        return f"{kind} {str(value).lower()}"  # spelled as the user wrote it in YAML or JSON
    if isinstance(value, tuple):
        value = list(value)
    # reprlib: a bounded repr, never the whole of a huge or deeply shared value (a YAML alias bomb)
    text = " ".join(_SHORT.repr(value).split())  # collapse newlines so the message stays on one line
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{kind} {text}"


class SchemaError(ValueError):
    """A value that does not fit its declared type: `<key>: expected <what>, got <what>` on one line."""

    def __init__(self, key: str | None, expected: str, got: str):
        self.key, self.expected, self.got = key, expected, got
        text = f"{key}: expected {expected}, got {got}" if key else f"expected {expected}, got {got}"
        super().__init__(" ".join(text.split()))

    def under(self, prefix: str | None) -> SchemaError:
        """The same error with its key placed under `prefix`."""
        return SchemaError(join(prefix, self.key) if self.key else prefix, self.expected, self.got)


def join(prefix: str | None, key) -> str:
    if not prefix:
        return str(key)
    return f"{prefix}{key}" if str(key).startswith("[") else f"{prefix}.{key}"


# ----------------------------------------------------------------------------- checks added with Annotated


@dataclass(frozen=True)
class Bounds:
    """Numbers (or, on lists, lengths) within [low, high]; `open_low` excludes low itself (`> 0`)."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False

    def ok(self, x: float) -> bool:
        if self.low is not None and (x <= self.low if self.open_low else x < self.low):
            return False
        return self.high is None or x <= self.high

    def text(self, noun: str) -> str:
        if self.low == 0 and self.open_low and self.high is None:
            return f"a positive {noun}"
        if self.low == 1 and not self.open_low and self.high is None and noun == "integer":
            return "a positive integer"
        if self.low is not None and self.high is not None:
            return (
                f"an {noun} {self.low:.0f}..{self.high:.0f}"  # every digit: 4294967295, not 4.29497e+09
                if noun == "integer"
                else f"a {noun} in [{self.low:g}, {self.high:g}]"
            )
        if self.low is not None:
            article = "an" if noun == "integer" else "a"
            return f"{article} {noun} {'>' if self.open_low else '>='} {self.low:g}"
        return f"{'an' if noun == 'integer' else 'a'} {noun} <= {self.high:g}"


@dataclass(frozen=True)
class Match:
    """Strings matching a regular expression; `what` says in words what that is."""

    pattern: str
    what: str


@dataclass(frozen=True)
class Expect:
    """Words for what the whole value should be, used in place of the generated ones."""

    text: str


POSITIVE = Bounds(0, open_low=True)
NON_NEGATIVE = Bounds(0)
AT_LEAST_ONE = Bounds(1)


# ----------------------------------------------------------------------------- the loader


def parse(cls, data: Any, key: str | None = None):
    """`data` (a mapping) as an instance of the dataclass `cls`, checked field by field."""
    return parse_value(cls, data, key)


def parse_fields(cls, data: Any, key: str | None = None, partial: bool = False) -> dict:
    """The checked fields of the dataclass `cls` found in the mapping `data`: every field when not `partial`
    (defaults filled in, missing required ones an error), else only the keys present (overrides)."""
    if not isinstance(data, dict):
        raise SchemaError(key, "a mapping", describe(data))
    hints = _hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    if not getattr(cls, "__open_schema__", False):  # an open schema keeps keys it does not know, unchecked
        for k in data:
            if k not in hints:
                raise SchemaError(join(key, k), "a known key (" + ", ".join(names) + ")", f"unknown key {k!r}")
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            out[f.name] = parse_value(hints[f.name], data[f.name], join(key, f.name))
        elif not partial and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            expect = next((c.text for c in _extras(hints[f.name]) if isinstance(c, Expect)), "a value")
            raise SchemaError(join(key, f.name), expect, "nothing (missing required key)")
    return out


@functools.cache  # a class's hints do not change, and resolving them dominated loading a large result
def _hints(cls) -> dict:
    return get_type_hints(cls, include_extras=True)


def _extras(tp) -> tuple:
    return tuple(get_args(tp)[1:]) if get_origin(tp) is Annotated else ()


def parse_value(tp, value: Any, key: str | None):
    """`value` checked against the type `tp` (see the module docstring); returns the typed value."""
    checks: tuple = ()
    if get_origin(tp) is Annotated:
        tp, *extras = get_args(tp)
        checks = tuple(extras)
    try:
        out = _parse_plain(tp, value, key, checks)
    except SchemaError as e:
        expect = next((c.text for c in checks if isinstance(c, Expect)), None)
        if expect is not None and e.key == key:  # the value as a whole failed: say it in the given words
            raise SchemaError(key, expect, describe(value)) from None
        raise
    return out


def _parse_plain(tp, value, key, checks):
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        fields = parse_fields(tp, value, key)
        try:
            return tp(**fields)
        except SchemaError as e:  # a check across fields, raised by the dataclass itself
            raise e.under(key) from None
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return _parse_union(get_args(tp), value, key)
    if origin is Literal:
        choices = get_args(tp)
        # exact types too: `true` is not the choice 1, nor 1.0 the choice 1
        if not any(type(value) is type(c) and value == c for c in choices):
            raise SchemaError(key, expected_text(tp), describe(value))
        return value
    if origin in (tuple, list):
        args = get_args(tp)
        item_type = args[0] if args else Any
        if not isinstance(value, (list, tuple)):
            raise SchemaError(key, expected_text(tp, checks), describe(value))
        bounds = next((c for c in checks if isinstance(c, Bounds)), None)
        if bounds is not None and not bounds.ok(len(value)):
            raise SchemaError(key, expected_text(tp, checks), describe(value))
        return tuple(parse_value(item_type, v, f"{key}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        key_type, item_type = get_args(tp) or (str, Any)
        if not isinstance(value, dict):
            raise SchemaError(key, "a mapping", describe(value))
        return {parse_value(key_type, k, key): parse_value(item_type, v, join(key, k)) for k, v in value.items()}
    if tp is type(None):
        if value is not None:
            raise SchemaError(key, "null", describe(value))
        return None
    if tp is bool:
        if not isinstance(value, bool):
            raise SchemaError(key, "true or false", describe(value))
        return value
    if tp is int:
        bounds = next((c for c in checks if isinstance(c, Bounds)), None)
        if not isinstance(value, int) or isinstance(value, bool):  # `true` is never a count
            raise SchemaError(key, bounds.text("integer") if bounds else "an integer", describe(value))
        if bounds is not None and not bounds.ok(value):
            raise SchemaError(key, bounds.text("integer"), describe(value))
        return value
    if tp is float:
        bounds = next((c for c in checks if isinstance(c, Bounds)), None)
        number = _number(value)
        if number is None or not math.isfinite(number) or (bounds is not None and not bounds.ok(number)):
            raise SchemaError(key, bounds.text("number") if bounds else "a finite number", describe(value))
        return number
    if tp is str:
        match = next((c for c in checks if isinstance(c, Match)), None)
        if not isinstance(value, str) or not value:
            raise SchemaError(key, match.what if match else "a non-empty string", describe(value))
        if match is not None and not re.fullmatch(match.pattern, value):
            raise SchemaError(key, match.what, describe(value))
        return value
    raise TypeError(f"schema: unsupported type {tp!r}")  # a programming error, not a user's


def _parse_union(alternatives, value, key):
    # A mapping or a list goes to the one alternative of that shape, so its inner error (a wrong nested key)
    # reaches the user instead of a generic "expected A or B".
    shaped = [a for a in alternatives if _shape(a) == type(value).__name__.replace("tuple", "list")]
    if len(shaped) == 1 and isinstance(value, (dict, list, tuple)):
        return parse_value(shaped[0], value, key)
    for alternative in alternatives:
        try:
            return parse_value(alternative, value, key)
        except SchemaError:
            continue
    raise SchemaError(key, expected_text(Union[tuple(alternatives)]), describe(value))  # noqa: UP007 (built at run time)


def _shape(tp) -> str | None:
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if dataclasses.is_dataclass(tp) or get_origin(tp) is dict:
        return "dict"
    if get_origin(tp) in (tuple, list):
        return "list"
    return None


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:  # YAML 1.1 reads `1e-5` (no dot) as a string; accept it rather than surprise the user
            return float(value)
        except ValueError:
            return None
    return None


def expected_text(tp, checks: tuple = ()) -> str:
    """What a value of type `tp` should be, in words."""
    if get_origin(tp) is Annotated:
        tp, *extras = get_args(tp)
        checks = tuple(extras)
    expect = next((c.text for c in checks if isinstance(c, Expect)), None)
    if expect:
        return expect
    bounds = next((c for c in checks if isinstance(c, Bounds)), None)
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(c) for c in get_args(tp))
    if origin in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        literals = [c for a in args if get_origin(a) is Literal for c in get_args(a)]
        others = [expected_text(a) for a in args if get_origin(a) is not Literal]
        parts = (["one of " + ", ".join(str(c) for c in literals)] if literals else []) + others
        text = " or ".join(parts)
        return text + " or null" if type(None) in get_args(tp) else text
    if origin in (tuple, list):
        item = get_args(tp)[0] if get_args(tp) else Any
        prefix = "a non-empty list" if bounds is not None and bounds.low == 1 else "a list"
        return prefix if item is Any else f"{prefix} of {_plural(item)}"
    if dataclasses.is_dataclass(tp):
        return "a mapping {" + ", ".join(f.name for f in dataclasses.fields(tp)) + "}"
    if origin is dict:
        return "a mapping"
    if bounds is not None and tp in (int, float):
        return bounds.text("integer" if tp is int else "number")
    match = next((c for c in checks if isinstance(c, Match)), None)
    if match is not None:
        return match.what
    return {
        bool: "true or false",
        int: "an integer",
        float: "a number",
        str: "a non-empty string",
        type(None): "null",
        Any: "a value",
    }.get(tp, getattr(tp, "__name__", str(tp)))


def _plural(tp) -> str:
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) is Literal:
        return "(" + ", ".join(str(c) for c in get_args(tp)) + ")"
    return {int: "integers", float: "numbers", str: "strings", bool: "booleans"}.get(tp, "values")


def to_plain(value: Any) -> Any:
    """A typed value back as plain data (dicts, lists, scalars), as a YAML or JSON file would hold it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    return value


def choices(literal) -> tuple:
    """The values of a Literal type (e.g. for argparse `choices`)."""
    return get_args(literal)


__all__ = [
    "AT_LEAST_ONE",
    "Bounds",
    "Expect",
    "Match",
    "NON_NEGATIVE",
    "POSITIVE",
    "SchemaError",
    "choices",
    "describe",
    "expected_text",
    "join",
    "parse",
    "parse_fields",
    "parse_value",
    "to_plain",
]
