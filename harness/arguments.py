"""Command-line values that several commands read the same way: a fraction (`5%`), a workload field's override,
the target to run on, the rungs to run, a flag under its new name."""

from __future__ import annotations

import argparse
import re
import sys
from typing import get_type_hints

from models.schema import SchemaError, parse_value
from models.workload import Workload

from .errors import InputError
from .machine.hardware import TARGETS, detect_target, get_target

_PERCENT = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*%\s*")


def parse_percent(text) -> float | None:
    """`5%` or a fraction below 1 (`0.05`) -> 0.05; None if it is neither (a bare `5` is ambiguous)."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text) if 0 <= text < 1 else None
    if isinstance(text, str):
        m = _PERCENT.fullmatch(text)
        if m:
            return float(m.group(1)) / 100
        try:
            value = float(text)
        except ValueError:
            return None
        return value if 0 <= value < 1 else None
    return None


def fraction(name: str, text: str) -> float:
    """`5%` or `0.05` -> 0.05; anything else is one line naming the flag."""
    value = parse_percent(text)
    if value is None:
        raise InputError(name, None, "a percentage like 5% or a fraction like 0.05", repr(text))
    return value


def workload_flag(flag: str, field: str, value) -> None:
    """A command-line override of a workload field (None: not given), held to the bounds a scenario file's value
    has (models/workload.py): one line naming the flag."""
    if value is None:
        return
    try:
        parse_value(get_type_hints(Workload, include_extras=True)[field], value, None)
    except SchemaError as e:
        raise InputError(flag, None, e.expected, e.got) from None


def resolve_target(scenario, name: str | None):
    """The asked-for or detected target; returns (target, error). A known target the scenario's `targets:` does not
    list runs the scenario's workload unchanged, said in one line here and recorded in the result
    (`target.listed_in_scenario: false`); an unknown name is the error."""
    if name:
        if name not in TARGETS:
            return None, f"--target: expected one of {', '.join(TARGETS)}, got {name!r}"
        target = get_target(name)
    else:
        target = detect_target()
        print(f"target: {target.name} (auto-detected; --target to choose)")
    if not scenario.lists_target(target.name):
        print(
            f"target: {target.name} is not listed in {scenario.path} (targets: {', '.join(scenario.targets)}): "
            "running the scenario's workload unchanged"
        )
    return target, None


def chosen_rungs(scenario, text: str | None) -> list[str] | None:
    """`--rungs a,b`: the named rungs of the scenario in the order given, None when the flag is not given; one
    line naming the unknown ones; an empty list (`--rungs ""`) is refused, not read as every rung."""
    if text is None:
        return None
    names = scenario.rung_names()
    rungs = [r.strip() for r in text.split(",") if r.strip()]
    unknown = [r for r in rungs if r not in names]
    if unknown or not rungs:
        got = ", ".join(unknown) or "an empty rung list"
        raise InputError("--rungs", None, f"rung names of {scenario.name} ({', '.join(names)})", got)
    return rungs


class _FormerName(argparse.Action):
    """A flag's former spelling: sets the new flag's value and says the new name in one line on stderr."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"vlabench: {option_string} is deprecated: use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def renamed_flag(parser, flag: str, former: str, **kwargs) -> None:
    """`flag` (add_argument's `kwargs`), with its `former` name still read, hidden from --help, and one line
    saying the new name when used (scripts written with the old name keep working)."""
    action = parser.add_argument(flag, **kwargs)
    parser.add_argument(
        former,
        dest=action.dest,
        type=kwargs.get("type"),
        metavar=action.metavar,
        action=_FormerName,
        new=flag,
        default=argparse.SUPPRESS,
        help=argparse.SUPPRESS,
    )
