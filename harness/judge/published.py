"""Published figures (results/published/*.yaml): load, validate and parse tolerances.

The format is described in results/published/README.md. Every user error is one line naming the file,
the key path and what was expected.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from models.schema import AT_LEAST_ONE, Bounds, Expect, SchemaError, describe, parse, to_plain

from ..arguments import parse_percent
from ..errors import InputError
from ..user_yaml import load_yaml

PUBLISHED_DIR = Path(__file__).resolve().parents[2] / "results" / "published"
NOT_STATED = "not stated"
# Metrics vlabench measures, so a figure of one of them may map onto our results (`ours`).
COMPARABLE = {
    "speedup": ("from_rung", "to_rung"),
    "throughput": ("rung",),
    "step_time": ("rung",),
    "success_rate": ("suite",),
}
LOWER_IS_BETTER = {"step_time"}


@dataclass(frozen=True)
class Tolerance:
    value: float
    points: bool  # True: absolute percentage points (success rates); False: relative to the figure

    def __str__(self) -> str:
        return f"{self.value:g} points" if self.points else f"{self.value * 100:g}%"


@dataclass(frozen=True)
class Figure:
    id: str
    label: str
    source: str
    transcribed_from: str
    file: str
    metric: str
    unit: str
    value: float | tuple[float, float]
    covers: dict
    tolerance: Tolerance
    ours: dict | None
    not_comparable: str | None
    derived_from: dict | None = None
    notes: str | None = None

    @property
    def point(self) -> float:
        """One number for a range (its midpoint): the value a verdict compares with."""
        return sum(self.value) / 2 if isinstance(self.value, tuple) else self.value

    def value_text(self) -> str:
        def fmt(v):  # speedups keep two decimals as published (3.00x); other figures as written
            return f"{v:.2f}" if self.unit == "x" and round(v, 2) == v else f"{v:g}"

        unit = self.unit if self.unit in ("x", "%") else f" {self.unit}"
        if isinstance(self.value, tuple):
            return f"{fmt(self.value[0])}-{fmt(self.value[1])}{unit}"
        return f"{fmt(self.value)}{unit}"


_POINTS = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*points?\s*")


def parse_tolerance(text) -> Tolerance | None:
    if isinstance(text, str) and _POINTS.fullmatch(text):
        return Tolerance(float(_POINTS.fullmatch(text).group(1)), points=True)
    value = parse_percent(text)
    return None if value is None else Tolerance(value, points=False)


@dataclass(frozen=True)
class Covers:
    """What a figure measures; each is the stated value or 'not stated' (with what was not stated)."""

    what: str
    batch: Annotated[Any, Expect(f"the stated value or {NOT_STATED!r}")]
    hardware: Annotated[Any, Expect(f"the stated value or {NOT_STATED!r}")]
    device_count: Annotated[Any, Expect(f"the stated value or {NOT_STATED!r}")]
    target: str | None = None  # a vlabench target name, when the hardware is one we have


@dataclass(frozen=True)
class Ours:
    """Where a figure maps onto our results; which keys a metric needs is checked with the metric."""

    scenario: str | None = None
    from_rung: str | None = None
    to_rung: str | None = None
    rung: str | None = None
    suite: str | None = None
    policy: str | None = None  # success rates: the model family whose trained policy the figure is about
    min_device_count: Annotated[int, AT_LEAST_ONE] | None = None


@dataclass(frozen=True)
class FigureEntry:
    id: str
    label: str
    metric: str
    unit: str
    value: float | Annotated[tuple[float, ...], Bounds(2, 2)]
    covers: Covers
    tolerance: Annotated[Any, Expect("a relative tolerance like 10% or absolute points like 2 points")]
    source: str | None = None
    derived_from: dict[str, Any] | None = None
    ours: Ours | None = None
    not_comparable: str | None = None
    notes: str | None = None


@dataclass(frozen=True)
class PublishedFile:
    source: str
    transcribed_from: str
    figures: Annotated[tuple[dict[str, Any], ...], Expect("a list of figures")]


def load_published(directory: str | Path = PUBLISHED_DIR) -> list[Figure]:
    """Every figure of every YAML file in `directory`, validated; ids are unique across files."""
    directory = Path(directory)
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise InputError(str(directory), None, "a directory of published-figure YAML files", "none found")
    figures, seen = [], {}
    for path in files:
        for figure in _load_file(path):
            if figure.id in seen:
                raise InputError(
                    str(path),
                    f"figures.{figure.id}",
                    "a figure id not used elsewhere",
                    f"{figure.id!r} again (also in {seen[figure.id]})",
                )
            seen[figure.id] = path.name
            figures.append(figure)
    return figures


def _load_file(path: Path) -> list[Figure]:
    file = str(path)
    data = load_yaml(path.read_bytes(), file)  # one line for bad YAML, bad UTF-8 or a duplicate key
    try:
        published = parse(PublishedFile, data)
        return [_figure(raw, i, published, file) for i, raw in enumerate(published.figures)]
    except SchemaError as e:
        raise InputError(file, e.key, e.expected, e.got) from None


def _figure(raw: dict, index: int, published: PublishedFile, file: str) -> Figure:
    # errors name the figure by its id once it has one (`figures.fp8-speedup.value`), by position before
    key = f"figures[{index}]"
    if isinstance(raw, dict) and isinstance(raw.get("id"), str) and raw["id"]:
        key = f"figures.{raw['id']}"
    entry = parse(FigureEntry, raw, key)
    value = tuple(entry.value) if isinstance(entry.value, tuple) else entry.value
    if isinstance(value, tuple) and value[0] > value[1]:
        raise SchemaError(f"{key}.value", "a number or [low, high]", describe(list(value)))
    tolerance = parse_tolerance(entry.tolerance)
    if tolerance is None:
        raise SchemaError(
            f"{key}.tolerance",
            "a relative tolerance like 10% or absolute points like 2 points",
            describe(entry.tolerance),
        )
    derived = entry.derived_from
    if derived is not None:
        if not (_number(derived.get("from")) and _number(derived.get("to")) and derived["from"] > 0):
            raise SchemaError(f"{key}.derived_from", "{from: number, to: number, unit: ...}", describe(derived))
        ratio = derived["to"] / derived["from"]
        if not _number(value) or abs(ratio - value) > 0.006 * ratio:
            raise SchemaError(f"{key}.value", f"to / from = {ratio:.3f} (derived_from)", describe(value))
    if (entry.ours is None) == (entry.not_comparable is None):
        raise SchemaError(
            key,
            "exactly one of `ours` (a mapping onto our results) or `not_comparable` (why there is none)",
            "both" if entry.ours is not None else "neither",
        )
    ours = None
    if entry.ours is not None:
        ours = _check_ours(entry.ours, entry.metric, f"{key}.ours")
    return Figure(
        id=entry.id,
        label=entry.label,
        source=entry.source or published.source,
        transcribed_from=published.transcribed_from,
        file=file,
        metric=entry.metric,
        unit=entry.unit,
        value=value,
        covers={k: v for k, v in to_plain(entry.covers).items() if v is not None},
        tolerance=tolerance,
        ours=ours,
        not_comparable=entry.not_comparable,
        derived_from=derived,
        notes=entry.notes,
    )


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_ours(ours: Ours, metric: str, key: str) -> dict:
    if metric not in COMPARABLE:
        raise SchemaError(
            key, f"no mapping: vlabench measures only {', '.join(COMPARABLE)}", f"one for metric {metric!r}"
        )
    needed = COMPARABLE[metric] + (() if metric == "success_rate" else ("scenario",))
    for k in needed:
        if getattr(ours, k) is None:
            raise SchemaError(f"{key}.{k}", "a name", "nothing")
    return {k: v for k, v in to_plain(ours).items() if v is not None}


def trained_by(figure: Figure) -> str:
    """Whose trained policy a published success rate is of: its label without the suite, the label's last word
    ("LoongForge bf16 libero_spatial" -> "LoongForge bf16")."""
    return figure.label.rsplit(" ", 1)[0]


def success_rates_by_policy(
    figures: list[Figure], model: str | None = None, suites: list[str] | None = None
) -> dict[str, dict[str, Figure]]:
    """The published per-suite success rates, by whose trained policy they are of ({"LoongForge bf16":
    {"libero_spatial": figure, ...}, "community": {...}}, in the files' order): those of a policy of `model`'s
    family (`ours.policy`; a figure naming none is any model's) on `suites` (default: every suite)."""
    out: dict[str, dict[str, Figure]] = {}
    for f in figures:
        suite = (f.ours or {}).get("suite")
        if f.metric != "success_rate" or not suite or (suites is not None and suite not in suites):
            continue
        if model is None or f.ours.get("policy") in (None, model):
            out.setdefault(trained_by(f), {})[suite] = f
    return out
