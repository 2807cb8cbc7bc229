"""Published figures (results/published/*.yaml): load, validate and parse tolerances.

The format is described in results/published/README.md. Every user error is one line naming the file,
the key path and what was expected.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from .errors import InputError, describe

PUBLISHED_DIR = Path(__file__).resolve().parent.parent / "results" / "published"
NOT_STATED = "not stated"
# Metrics vlabench measures, so a figure of one of them may map onto our results (`ours`).
COMPARABLE = {
    "speedup": ("from_rung", "to_rung"),
    "throughput": ("rung",),
    "step_time": ("rung",),
    "success_rate": ("suite",),
}
LOWER_IS_BETTER = {"step_time"}
FIGURE_KEYS = ("id", "label", "source", "metric", "unit", "value", "derived_from", "covers", "tolerance",
               "ours", "not_comparable", "notes")
COVERS_REQUIRED = ("what", "batch", "hardware", "device_count")
OURS_KEYS = ("scenario", "from_rung", "to_rung", "rung", "suite", "min_device_count")


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


_PERCENT = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*%\s*")
_POINTS = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*points?\s*")


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


def parse_tolerance(text) -> Tolerance | None:
    if isinstance(text, str) and _POINTS.fullmatch(text):
        return Tolerance(float(_POINTS.fullmatch(text).group(1)), points=True)
    value = parse_percent(text)
    return None if value is None else Tolerance(value, points=False)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


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
                raise InputError(str(path), f"figures.{figure.id}", "a figure id not used elsewhere",
                                 f"{figure.id!r} again (also in {seen[figure.id]})")
            seen[figure.id] = path.name
            figures.append(figure)
    return figures


def _load_file(path: Path) -> list[Figure]:
    file = str(path)

    def fail(key, expected, got):
        raise InputError(file, key, expected, got)

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        fail(f"line {mark.line + 1}" if mark else None, "valid YAML", getattr(e, "problem", None) or str(e))
    if not isinstance(data, dict) or not isinstance(data.get("figures"), list):
        fail("figures", "a list of figures", describe(data.get("figures") if isinstance(data, dict) else data))
    for key in ("source", "transcribed_from"):
        if not isinstance(data.get(key), str):
            fail(key, "a string", describe(data.get(key)))
    return [_figure(raw, f"figures[{i}]", data, file, fail) for i, raw in enumerate(data["figures"])]


def _figure(raw, key: str, file_data: dict, file: str, fail) -> Figure:
    if not isinstance(raw, dict):
        fail(key, "a mapping", describe(raw))
    for k in raw:
        if k not in FIGURE_KEYS:
            fail(f"{key}.{k}", "a known key (" + ", ".join(FIGURE_KEYS) + ")", f"unknown key {k!r}")
    for k in ("id", "label", "metric", "unit"):
        if not isinstance(raw.get(k), str) or not raw[k]:
            fail(f"{key}.{k}", "a non-empty string", describe(raw.get(k)))
    key = f"figures.{raw['id']}"
    value = raw.get("value")
    if isinstance(value, list) and len(value) == 2 and all(_number(v) for v in value) and value[0] <= value[1]:
        value = (float(value[0]), float(value[1]))
    elif not _number(value):
        fail(f"{key}.value", "a number or [low, high]", describe(value))
    tolerance = parse_tolerance(raw.get("tolerance"))
    if tolerance is None:
        fail(f"{key}.tolerance", "a relative tolerance like 10% or absolute points like 2 points",
             describe(raw.get("tolerance")))
    covers = raw.get("covers")
    if not isinstance(covers, dict):
        fail(f"{key}.covers", "a mapping", describe(covers))
    for k in COVERS_REQUIRED:
        if k not in covers:
            fail(f"{key}.covers.{k}", f"the stated value or {NOT_STATED!r}", "nothing (missing)")
    derived = raw.get("derived_from")
    if derived is not None:
        if not (isinstance(derived, dict) and _number(derived.get("from")) and _number(derived.get("to"))
                and derived["from"] > 0):
            fail(f"{key}.derived_from", "{from: number, to: number, unit: ...}", describe(derived))
        ratio = derived["to"] / derived["from"]
        if not _number(value) or abs(ratio - value) > 0.006 * ratio:
            fail(f"{key}.value", f"to / from = {ratio:.3f} (derived_from)", describe(value))
    ours, why = raw.get("ours"), raw.get("not_comparable")
    if (ours is None) == (why is None):
        fail(key, "exactly one of `ours` (a mapping onto our results) or `not_comparable` (why there is none)",
             "both" if ours is not None else "neither")
    if ours is not None:
        _check_ours(ours, raw["metric"], f"{key}.ours", fail)
    elif not isinstance(why, str) or not why:
        fail(f"{key}.not_comparable", "a reason", describe(why))
    return Figure(id=raw["id"], label=raw["label"], source=raw.get("source") or file_data["source"],
                  transcribed_from=file_data["transcribed_from"], file=file, metric=raw["metric"],
                  unit=raw["unit"], value=value, covers=dict(covers), tolerance=tolerance, ours=ours,
                  not_comparable=why, derived_from=derived, notes=raw.get("notes"))


def _check_ours(ours, metric: str, key: str, fail) -> None:
    if metric not in COMPARABLE:
        fail(f"{key}", f"no mapping: vlabench measures only {', '.join(COMPARABLE)}", f"one for metric {metric!r}")
    if not isinstance(ours, dict):
        fail(key, "a mapping", describe(ours))
    for k in ours:
        if k not in OURS_KEYS:
            fail(f"{key}.{k}", "a known key (" + ", ".join(OURS_KEYS) + ")", f"unknown key {k!r}")
    needed = COMPARABLE[metric] + (() if metric == "success_rate" else ("scenario",))
    for k in needed:
        if not isinstance(ours.get(k), str) or not ours[k]:
            fail(f"{key}.{k}", "a name", describe(ours.get(k)))
    if "min_device_count" in ours and not (isinstance(ours["min_device_count"], int) and ours["min_device_count"] > 0):
        fail(f"{key}.min_device_count", "a positive integer", describe(ours["min_device_count"]))
