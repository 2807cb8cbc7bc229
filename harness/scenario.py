"""Load and validate a scenario YAML file: one model, one workload, an optimization ladder, targets.

Every user error becomes a one-line `ScenarioError`: `<file>: <key path>: expected <what>, got <what>`.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import yaml

import models
from models.family import OptionError

from .errors import InputError, describe
from .hardware import KNOWN_CAPABILITIES, TARGETS

TOP_KEYS = ("name", "model", "source", "description", "workload", "ladder", "targets", "eval", "parity_baseline")
RUNG_KEYS = ("name", "options", "requires")
RUNG_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")
DTYPES = ("bf16", "fp32")
COMPILE_BACKENDS = ("inductor", "aot_eager", "eager")


class ScenarioError(InputError):
    """A scenario file the harness cannot use."""


@dataclass(frozen=True)
class Workload:
    batch_size: int
    cameras: int = 2
    text_tokens: int = 200
    action_horizon: int = 50
    warmup_steps: int = 5
    timed_steps: int = 20
    seed: int = 0
    dtype: str = "bf16"
    lr: float = 2.5e-5
    model_size: str = "full"
    # The torch.compile backend for compile rungs. The CPU smoke uses aot_eager: it checks graph capture
    # and parity, while inductor's C++ build takes about a minute per graph on 2 cores.
    compile_backend: str = "inductor"

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


WORKLOAD_KEYS = tuple(f.name for f in dataclasses.fields(Workload))


@dataclass(frozen=True)
class Rung:
    name: str
    options: dict  # this rung's own options, as written
    cumulative: dict  # options merged down the ladder up to and including this rung
    requires: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    model: str
    source: str | None
    path: str
    sha256: str
    workload: Workload
    ladder: tuple[Rung, ...]
    targets: dict[str, dict]  # raw per-target workload overrides, already validated
    description: str | None = None
    eval: dict | None = None  # kept raw; its schema belongs to the evaluation
    # Per target, options that stand in for ones the target cannot train with (e.g. attention: sdpa for
    # flex on a CPU), applied only to rungs that inherit the unsupported option, never to the rung
    # that introduces it; such rungs record what was substituted.
    substitutes: dict[str, dict] = dataclasses.field(default_factory=dict)
    parity_baseline: str | None = None  # rung that loss parity is judged against (default: the first)

    def workload_for(self, target_name: str) -> Workload:
        if target_name not in self.targets:
            raise ScenarioError(self.path, "targets", "one of the scenario's targets (" + ", ".join(self.targets) + ")",
                                f"{target_name!r}")
        return dataclasses.replace(self.workload, **self.targets[target_name])

    def rung_names(self) -> list[str]:
        return [rung.name for rung in self.ladder]


def load_scenario(path) -> Scenario:
    path = str(path)
    try:
        with open(path, "rb") as f:
            raw_bytes = f.read()
    except FileNotFoundError:
        raise ScenarioError(path, None, "an existing scenario file", "no such file") from None
    except OSError as e:
        raise ScenarioError(path, None, "a readable scenario file", e.strerror or str(e)) from None
    try:
        data = yaml.safe_load(raw_bytes.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ScenarioError(path, None, "UTF-8 text", f"undecodable byte at offset {e.start}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(e, "problem", None) or str(e)
        raise ScenarioError(path, where, "valid YAML", problem) from None
    return _parse(path, hashlib.sha256(raw_bytes).hexdigest(), data)


class _Checker:
    """Type and value checks that raise ScenarioError naming the file and key path."""

    def __init__(self, path: str):
        self.path = path

    def fail(self, key: str | None, expected: str, got: str):
        raise ScenarioError(self.path, key, expected, got)

    def mapping(self, value, key: str, allowed: tuple[str, ...] | None = None) -> dict:
        if not isinstance(value, dict):
            self.fail(key, "a mapping", describe(value))
        for k in value:
            if allowed is not None and k not in allowed:
                self.fail(_join(key, k), "a known key (" + ", ".join(allowed) + ")", f"unknown key {k!r}")
        return value

    def required(self, mapping: dict, key: str, prefix: str | None):
        if key not in mapping:
            self.fail(_join(prefix, key), "a value", "nothing (missing required key)")
        return mapping[key]

    def string(self, value, key: str) -> str:
        if not isinstance(value, str) or not value:
            self.fail(key, "a non-empty string", describe(value))
        return value

    def integer(self, value, key: str, minimum: int | None) -> int:
        # bool is a subclass of int in Python, but `true` is never a count.
        if not isinstance(value, int) or isinstance(value, bool):
            self.fail(key, "an integer", describe(value))
        if minimum is not None and value < minimum:
            self.fail(key, "a positive integer" if minimum == 1 else f"an integer >= {minimum}", describe(value))
        return value


def _join(prefix: str | None, key) -> str:
    return f"{prefix}.{key}" if prefix else str(key)


def _parse(path: str, sha256: str, data: Any) -> Scenario:
    c = _Checker(path)
    if not isinstance(data, dict):
        c.fail("(top level)", "a mapping", describe(data) + (" (empty file)" if data is None else ""))
    c.mapping(data, "", TOP_KEYS)
    name = c.string(c.required(data, "name", None), "name")
    model = c.required(data, "model", None)
    if model not in models.FAMILIES:
        c.fail("model", "one of " + ", ".join(models.FAMILIES), describe(model))
    family = models.get_family(model)
    source = c.string(data["source"], "source") if data.get("source") is not None else None
    description = c.string(data["description"], "description") if data.get("description") is not None else None
    eval_ = c.mapping(data["eval"], "eval") if data.get("eval") is not None else None

    workload_raw = c.mapping(c.required(data, "workload", None), "workload", WORKLOAD_KEYS)
    c.required(workload_raw, "batch_size", "workload")
    workload = Workload(**_check_workload(c, workload_raw, "workload", family.sizes))

    ladder = _parse_ladder(c, c.required(data, "ladder", None), family)

    targets_raw = c.mapping(c.required(data, "targets", None), "targets")
    if not targets_raw:
        c.fail("targets", "a non-empty mapping of target names to workload overrides", "an empty mapping")
    targets, substitutes = {}, {}
    for target_name, overrides in targets_raw.items():
        key = _join("targets", target_name)
        if target_name not in TARGETS:
            c.fail(key, "a known target (" + ", ".join(TARGETS) + ")", f"unknown target {target_name!r}")
        # `h200:` with nothing after it reads as null; it means "no overrides".
        overrides = {} if overrides is None else dict(c.mapping(overrides, key, WORKLOAD_KEYS + ("substitute",)))
        substitute = overrides.pop("substitute", None) or {}
        if substitute:
            sub_key = _join(key, "substitute")
            c.mapping(substitute, sub_key)
            try:
                family.parse_options(substitute)
            except OptionError as e:
                c.fail(_join(sub_key, e.key), e.expected, describe(e.got))
        substitutes[target_name] = dict(substitute)
        targets[target_name] = _check_workload(c, overrides, key, family.sizes)

    parity_baseline = data.get("parity_baseline")
    if parity_baseline is not None and parity_baseline not in [r.name for r in ladder]:
        c.fail("parity_baseline", "the name of a rung of the ladder", describe(parity_baseline))

    return Scenario(name=name, model=model, source=source, path=path, sha256=sha256, workload=workload,
                    ladder=ladder, targets=targets, description=description, eval=eval_,
                    substitutes=substitutes, parity_baseline=parity_baseline)


def _check_workload(c: _Checker, values: dict, prefix: str, sizes: tuple[str, ...]) -> dict:
    """Check the workload fields present in `values` (a full workload or a target's overrides)."""
    checked = dict(values)
    for key, value in values.items():
        path = _join(prefix, key)
        if key in ("batch_size", "cameras", "action_horizon", "timed_steps"):
            c.integer(value, path, minimum=1)
        elif key in ("text_tokens", "warmup_steps", "seed"):
            c.integer(value, path, minimum=0)
        elif key == "dtype":
            if value not in DTYPES:
                c.fail(path, "one of " + ", ".join(DTYPES), describe(value))
        elif key == "lr":
            # YAML 1.1 reads `1e-5` (no dot) as a string; accept it rather than surprise the user.
            number = _number(value)
            if number is None or not 0 < number < float("inf"):
                c.fail(path, "a positive number", describe(value))
            checked[key] = number
        elif key == "compile_backend":
            if value not in COMPILE_BACKENDS:
                c.fail(path, "one of " + ", ".join(COMPILE_BACKENDS), describe(value))
        elif key == "model_size":
            if value not in sizes:
                c.fail(path, "one of " + ", ".join(sizes), describe(value))
    return checked


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _parse_ladder(c: _Checker, ladder_raw, family) -> tuple[Rung, ...]:
    if not isinstance(ladder_raw, list) or not ladder_raw:
        c.fail("ladder", "a non-empty list of rungs", describe(ladder_raw))
    rungs: list[Rung] = []
    cumulative: dict = {}
    seen: dict[str, int] = {}
    for i, rung_raw in enumerate(ladder_raw):
        key = f"ladder[{i}]"
        c.mapping(rung_raw, key, RUNG_KEYS)
        name = c.required(rung_raw, "name", key)
        if not isinstance(name, str) or not RUNG_NAME.fullmatch(name):
            c.fail(f"{key}.name", "a name of lowercase letters, digits and '-' (e.g. compile-backbone)",
                   describe(name))
        if name in seen:
            c.fail(f"{key}.name", "a name not used by another rung", f"{name!r} again (also ladder[{seen[name]}])")
        seen[name] = i

        options = rung_raw.get("options")
        options = {} if options is None else c.mapping(options, f"{key}.options")
        requires = rung_raw.get("requires")
        requires = [] if requires is None else requires
        if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
            c.fail(f"{key}.requires", "a list of capability names", describe(requires))
        for j, capability in enumerate(requires):
            if capability not in KNOWN_CAPABILITIES:
                c.fail(f"{key}.requires[{j}]", "a known capability (" + ", ".join(sorted(KNOWN_CAPABILITIES)) + ")",
                       describe(capability))

        # Later rungs replace a key wholesale (a nested mapping is not merged), so each rung's
        # options read as "what changes here". Copies keep rungs independent of each other.
        cumulative = {**cumulative, **copy.deepcopy(options)}
        try:
            family.parse_options(copy.deepcopy(cumulative))
        except OptionError as e:
            # Earlier rungs validated, so the bad value arrived with this rung.
            got = "an unknown option" if e.got == "unknown option" else describe(e.got)
            c.fail(f"{key}.options.{e.key}", e.expected, got)
        rungs.append(Rung(name=name, options=copy.deepcopy(options), cumulative=cumulative,
                          requires=tuple(requires)))
    return tuple(rungs)
