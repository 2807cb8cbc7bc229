"""Load and validate a scenario YAML file: one model, one workload, an optimization ladder, targets.

Every user error becomes a one-line `ScenarioError`: `<file>: <key path>: expected <what>, got <what>`.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import models
import models.workload
from models.schema import (
    Bounds,
    Expect,
    Match,
    SchemaError,
    describe,
    join,
    parse,
    parse_fields,
    to_plain,
)

from .data.pipeline import DataSpec, LoaderOptions, reading
from .errors import InputError
from .machine.hardware import TARGETS, Capability
from .user_yaml import load_yaml

RUNG_NAME = Match(r"[a-z0-9][a-z0-9-]*", "a name of lowercase letters, digits and '-' (e.g. compile-backbone)")


class ScenarioError(InputError):
    """A scenario file the harness cannot use."""


@dataclass(frozen=True)
class Workload(models.workload.Workload):
    """The family's workload (models/workload.py: shapes, precision, steps, seed) and where its batches come from:
    made up front on the device from the seed, or read from a dataset on disk inside the timed step
    (harness/data/pipeline.py). Families receive it typed as models.workload.Workload."""

    data: Literal["synthetic"] | DataSpec = "synthetic"


def workload_keys(excluded: dict[str, str], workload: type[Workload] = Workload) -> tuple[str, ...]:
    """The keys of a result's `workload` block (`workload.record_keys()`) that two results are compared on: all but
    `excluded` ({key: why it does not change what is compared}), so that a field added to the workload is compared
    until someone says why not."""
    keys = workload.record_keys()
    stale = sorted(set(excluded) - set(keys))
    if stale:  # an exclusion outliving its field would hide nothing and mislead the reader
        raise ValueError(f"excluded workload keys that no result has: {', '.join(stale)}")
    return tuple(k for k in keys if k not in excluded)


def recorded_workload(block: dict, workload: type[Workload] = Workload) -> dict:
    """A result's `workload` block with the fields an older file lacks at their defaults: a field is added with
    the behaviour before it as its default, so an old file and a new one compare on what each ran."""
    defaults = {
        f.name: to_plain(f.default) for f in dataclasses.fields(workload) if f.default is not dataclasses.MISSING
    }
    return {**defaults, **block}


@dataclass(frozen=True)
class Rung:
    name: str
    options: dict  # this rung's own options, as written
    cumulative: dict  # options merged down the ladder up to and including this rung
    requires: tuple[str, ...] = ()
    # the input pipeline (for workloads that read a dataset): this rung's own `loader:` and the merged ones
    loader: dict = dataclasses.field(default_factory=dict)
    loader_cumulative: dict = dataclasses.field(default_factory=dict)
    # how the rung fits the card's memory (`plan:`, inherited by the rungs after it until one sets the recompute or
    # micro-batch option itself): "memory" splits the batch into micro-batches where that fits, else recomputes;
    # "recompute" recomputes only. Its written options hold where the card has room for them. None: not planned
    plan: Literal["memory", "recompute"] | None = None


@dataclass(frozen=True)
class MemoryEvidence:
    """`memory:` in a scenario: what its rungs were measured to need, for choosing recompute on a card with less
    memory and refusing a rung that cannot fit before it builds (harness/ladder/memory_plan.py). Paths are relative
    to the scenario file."""

    # a ladder result of this scenario (any card with enough memory): each rung's measured peak
    peaks: str | None = None
    # a recompute sweep of this workload (`vlabench recompute-sweep`): what recomputing each group saves and costs
    recompute_sweep: str | None = None
    # the share of the card's memory a planned rung leaves free: the plan adds up savings measured one group at a
    # time and in another compile mode, and the allocator needs room beside the peak
    margin: Annotated[float, Bounds(0, 0.5)] = 0.10
    # ladder results of this scenario measured on the cards themselves: a rung that ran out of memory on a card with
    # the same options is refused there before it builds (its need is known to exceed that card)
    card_runs: tuple[str, ...] = ()


@dataclass(frozen=True)
class RungEntry:
    """A rung as the file writes it (its options are checked by the model family, cumulatively)."""

    name: Annotated[str, RUNG_NAME]
    options: dict[str, Any] | None = None
    requires: tuple[Capability, ...] = ()
    loader: dict[str, Any] | None = None
    plan: Literal["memory", "recompute"] | None = None


@dataclass(frozen=True)
class ScenarioFile:
    """The top level of a scenario file; targets are checked against TARGETS and the workload's fields."""

    name: str
    model: str
    workload: dict[str, Any]
    ladder: Annotated[tuple[RungEntry, ...], Bounds(1), Expect("a non-empty list of rungs")]
    targets: dict[str, dict[str, Any] | None]
    source: str | None = None
    description: str | None = None
    eval: dict[str, Any] | None = None  # checked by the evaluation (harness/eval/main.py eval_block)
    train: dict[str, Any] | None = None  # checked by `vlabench train-ladder` (harness/train/ladder.py)
    parity_baseline: str | None = None  # rung that loss parity is judged against (default: the first)
    memory: MemoryEvidence | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    model: str
    source: str | None
    path: str
    sha256: str
    workload: Workload
    ladder: tuple[Rung, ...]
    # per-target workload overrides, already checked; a known target not listed here runs the workload unchanged
    targets: dict[str, dict]
    description: str | None = None
    eval: dict | None = None  # kept raw; its schema belongs to the evaluation
    train: dict | None = None  # kept raw; its schema belongs to `vlabench train-ladder`
    # Per target, options that stand in for ones the target cannot train with (e.g. attention: sdpa for
    # flex on a CPU), applied only to rungs that inherit the unsupported option, never to the rung
    # that introduces it; such rungs record what was substituted.
    substitutes: dict[str, dict] = dataclasses.field(default_factory=dict)
    parity_baseline: str | None = None  # rung that loss parity is judged against (default: the first)
    memory: MemoryEvidence | None = None

    def lists_target(self, target_name: str) -> bool:
        """Whether the scenario's `targets:` has an entry for the target (with its overrides and substitutes)."""
        return target_name in self.targets

    def workload_for(self, target_name: str) -> Workload:
        """The workload on a target: the scenario's with the target's overrides, or unchanged for a known target
        the scenario does not list (a new GPU needs no entry in every scenario)."""
        if target_name not in TARGETS:
            raise ScenarioError(
                self.path, "targets", "a known target (" + ", ".join(TARGETS) + ")", f"unknown target {target_name!r}"
            )
        return dataclasses.replace(self.workload, **self.targets.get(target_name, {}))

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
    data = load_yaml(raw_bytes, path, ScenarioError)  # one line for bad YAML, bad UTF-8 or a duplicate key
    return _parse(path, hashlib.sha256(raw_bytes).hexdigest(), data)


def with_dataset(scenario: Scenario, path: str) -> Scenario:
    """The scenario with every target's workload reading the dataset at `path` (`--dataset PATH` of run, profile
    and recompute-sweep)."""
    # a dataset named on the command line is never made: a mistyped path stays an error
    targets = {
        name: {**o, "data": reading(o["data"], path)} if isinstance(o.get("data"), DataSpec) else o
        for name, o in scenario.targets.items()
    }
    workload = dataclasses.replace(scenario.workload, data=reading(scenario.workload.data, path))
    return dataclasses.replace(scenario, workload=workload, targets=targets)


def _parse(path: str, sha256: str, data: Any) -> Scenario:
    def fail(key, expected, got):
        raise ScenarioError(path, key, expected, got)

    if not isinstance(data, dict):
        fail("(top level)", "a mapping", describe(data) + (" (empty file)" if data is None else ""))
    try:
        raw = parse(ScenarioFile, data)
        if raw.model not in models.FAMILIES:
            raise SchemaError("model", "one of " + ", ".join(models.FAMILIES), describe(raw.model))
        family = models.get_family(raw.model)
        workload = Workload(**_workload_fields(raw.workload, "workload", family, partial=False))
        ladder = _ladder(raw.ladder, family)
        if not raw.targets:
            raise SchemaError(
                "targets", "a non-empty mapping of target names to workload overrides", "an empty mapping"
            )
        targets, substitutes = {}, {}
        for target_name, overrides in raw.targets.items():
            key = join("targets", target_name)
            if target_name not in TARGETS:
                raise SchemaError(key, "a known target (" + ", ".join(TARGETS) + ")", f"unknown target {target_name!r}")
            # `h200:` with nothing after it reads as null; it means "no overrides".
            overrides = dict(overrides or {})
            substitute = overrides.pop("substitute", None) or {}
            if substitute:
                try:
                    family.parse_options(substitute)
                except SchemaError as e:
                    raise e.under(join(key, "substitute")) from None
            substitutes[target_name] = dict(substitute)
            targets[target_name] = _workload_fields(overrides, key, family, partial=True)
        if raw.parity_baseline is not None and raw.parity_baseline not in [r.name for r in ladder]:
            raise SchemaError("parity_baseline", "the name of a rung of the ladder", describe(raw.parity_baseline))
        if any(r.plan for r in ladder) and not (raw.memory and raw.memory.recompute_sweep):
            raise SchemaError("memory.recompute_sweep", "a recompute sweep to plan a rung's `plan:` from", "none")
    except SchemaError as e:
        raise ScenarioError(path, e.key, e.expected, e.got) from None
    return Scenario(
        name=raw.name,
        model=raw.model,
        source=raw.source,
        path=path,
        sha256=sha256,
        workload=workload,
        ladder=ladder,
        targets=targets,
        description=raw.description,
        eval=raw.eval,
        train=raw.train,
        substitutes=substitutes,
        parity_baseline=raw.parity_baseline,
        memory=raw.memory,
    )


def _workload_fields(values: dict, key: str, family, partial: bool) -> dict:
    """The workload fields in `values` checked (all of them, or only those present for a target's overrides),
    the model size against the family's sizes."""
    allowed = {f.name for f in dataclasses.fields(Workload)} | ({"substitute"} if partial else set())
    for k in values:
        if k not in allowed:
            raise SchemaError(
                join(key, k), "a known key (" + ", ".join(sorted(allowed, key=_field_order)) + ")", f"unknown key {k!r}"
            )
    checked = parse_fields(Workload, values, key, partial=partial)
    if "model_size" in checked and checked["model_size"] not in family.sizes:
        raise SchemaError(join(key, "model_size"), "one of " + ", ".join(family.sizes), describe(checked["model_size"]))
    return checked


def _field_order(name: str) -> int:
    names = [f.name for f in dataclasses.fields(Workload)]
    return names.index(name) if name in names else len(names)


def _ladder(entries: tuple[RungEntry, ...], family) -> tuple[Rung, ...]:
    rungs: list[Rung] = []
    cumulative: dict = {}
    loader: dict = {}
    seen: dict[str, int] = {}
    planned, planned_keys = None, set()
    if any(e.plan for e in entries):
        if not family.recompute_groups():
            i = next(i for i, e in enumerate(entries) if e.plan)
            raise SchemaError(
                f"ladder[{i}].plan", f"a family with recompute groups ({family.name} has none)", entries[i].plan
            )
        planned_keys = set(family.recompute_options(())) | set(family.micro_batch_options(2) or {})
    for i, entry in enumerate(entries):
        key = f"ladder[{i}]"
        if entry.name in seen:
            raise SchemaError(
                f"{key}.name",
                "a name not used by another rung",
                f"{entry.name!r} again (also ladder[{seen[entry.name]}])",
            )
        seen[entry.name] = i
        options = dict(entry.options or {})
        # Later rungs replace a key wholesale (a nested mapping is not merged), so each rung's
        # options read as "what changes here". Copies keep rungs independent of each other.
        cumulative = {**cumulative, **copy.deepcopy(options)}
        try:
            family.parse_options(copy.deepcopy(cumulative))
        except SchemaError as e:  # earlier rungs validated, so the bad value arrived with this rung
            raise e.under(f"{key}.options") from None
        loader = {**loader, **(entry.loader or {})}
        parse(LoaderOptions, loader, f"{key}.loader")
        # a rung that writes its own recompute or micro-batch option ends an earlier rung's plan
        planned = entry.plan or (planned if not planned_keys & options.keys() else None)
        rungs.append(
            Rung(
                name=entry.name,
                options=copy.deepcopy(options),
                cumulative=cumulative,
                requires=entry.requires,
                loader=dict(entry.loader or {}),
                loader_cumulative=dict(loader),
                plan=planned,
            )
        )
    return tuple(rungs)
