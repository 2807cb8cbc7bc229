"""The goals each card's committed results are held to, met or not (docs/hardware.md, "Goals per card").

A goal names a card, a result file of results/<card>/, what is read from it and the bar; the page shows the figure
that the file gives, the file and its commit, whether the bar is met, and where the analysis and the next step are
written. Only the bars are written here; every figure is read from the committed results when `vlabench readme`
writes the page, so a new result changes the verdict without an edit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from models import get_family

from ..judge import compare
from ..judge.published import Figure
from ..ladder.floor import floor_share

Measure = Literal["best_floor_share", "best_rate", "speedup", "failed_rows", "published_repeats"]


@dataclass(frozen=True)
class Goal:
    card: str
    what: str  # the goal in words, as the page states it
    measure: Measure
    bar: float  # at least this (failed_rows: at most)
    file: str | None = None  # the result under results/<card>/ the figure comes from (failed_rows: every ladder)
    precision: Literal["bf16", "fp8"] | None = None  # best_*: the best rung training in this precision
    to_rung: str | None = None  # speedup: this rung (default the fastest) over `over`
    over: str | None = None
    figures: tuple[str, ...] = ()  # published_repeats: the labels of the speedup figures held to the bar
    analysis: str = ""  # the doc section that says why, and the next step where the goal is not met


BEYOND = "ladders.md#pi05-beyond-loongforge-the-roofline"
ON_H100 = "ladders.md#on-an-h100-the-same-ladders-on-80-gb"
GOALS = (
    Goal("h100", "every rung runs or is refused up front: no OOM or failed row", "failed_rows", 0, analysis=ON_H100),
    Goal("h100", "pi05-beyond's best bf16 rung, share of the bf16 kernel floor", "best_floor_share", 0.85,
         "pi05-beyond.json", "bf16", analysis=ON_H100),
    Goal("h100", "pi05-beyond's best FP8 rung, share of the FP8 kernel floor", "best_floor_share", 0.65,
         "pi05-beyond.json", "fp8", analysis=ON_H100),
    Goal("h200", "pi05-beyond's best bf16 rung, samples/s", "best_rate", 57, "pi05-beyond.json", "bf16",
         analysis=BEYOND),
    Goal("h200", "pi05-beyond's best FP8 rung, samples/s", "best_rate", 72, "pi05-beyond.json", "fp8",
         analysis=BEYOND),
    *(
        Goal(card, "gr00t-loongforge's best rung over community, the reference's data path (community's data wait)",
             "speedup", 2.5, "gr00t-loongforge.json", over="community", analysis="gr00t.md#measured-runs")
        for card in ("h100", "h200")
    ),
    *(
        Goal(card, "pi05-loongforge's published verdicts (2.63x, 3.00x), repeats a verdict rests on",
             "published_repeats", 3, "pi05-loongforge.json", figures=("LoongForge bf16", "LoongForge FP8"),
             analysis="published.md")
        for card in ("h100", "h200")
    ),
    Goal("h200", "two H200s: gr00t-loongforge's cuda-graphs over community", "speedup", 2.3,
         "gr00t-loongforge-ddp2.json", to_rung="cuda-graphs", over="community", analysis="gr00t.md#measured-runs"),
)  # fmt: skip


@dataclass(frozen=True)
class Reading:
    value: float | None  # None: the result or the rung is not there
    text: str  # the figure as the page shows it


def _ok_rungs(result: dict, precision: str | None) -> list[tuple[dict, bool]]:
    """(rung, trains in FP8) of each ok rung, of one precision when given."""
    family = get_family(result["workload"]["model"])
    rows = [(r, bool(family.knobs(r["options"]).fp8_linears)) for r in result["rungs"] if r["status"] == "ok"]
    return [(r, fp8) for r, fp8 in rows if precision is None or fp8 == (precision == "fp8")]


def _best(result: dict, goal: Goal, value: Callable[[dict, bool], float | None], fmt: str) -> Reading:
    rows = [(v, r) for r, fp8 in _ok_rungs(result, goal.precision) if (v := value(r, fp8)) is not None]
    if not rows:
        return Reading(None, f"no ok {goal.precision} rung")
    v, r = max(rows, key=lambda row: row[0])
    return Reading(v, f"{fmt.format(v)} ({r['name']})")


def _speedup(result: dict, goal: Goal) -> Reading:
    to = goal.to_rung or max(_ok_rungs(result, None), key=lambda row: row[0]["samples_per_s"])[0]["name"]
    ratio = compare.speedup(result, to, goal.over)
    if ratio is None:
        return Reading(None, f"{to} or {goal.over} not ok")
    base = next(r for r in result["rungs"] if r["name"] == goal.over)
    wait = compare.data_wait_text(base)
    return Reading(
        ratio, f"{ratio:.2f}x ({to}; {goal.over} waited {wait} for data)" if wait != "-" else f"{ratio:.2f}x ({to})"
    )


def _published(result: dict, path: str, goal: Goal, figures: list[Figure]) -> Reading:
    col = compare.Column(result["target"]["name"], path, result)
    scenario = result["scenario"]["name"]
    mine = [
        f
        for f in figures
        if (f.ours or {}).get("scenario") == scenario and f.metric == "speedup" and f.label in goal.figures
    ]
    if not mine:
        return Reading(None, "no published figure")
    cells, fewest = [], None
    for f in mine:
        v = compare.judge(f, col)
        rungs = [f.ours[k] for k in ("to_rung", "from_rung", "rung") if f.ours.get(k)]
        recs = [r for r in result["rungs"] if r["name"] in rungs and r["status"] == "ok"]
        n = compare.repeats_of(*recs) if len(recs) == len(rungs) else 0
        fewest = n if fewest is None else min(fewest, n)
        cells.append(f"{f.label}: {v.verdict} {v.ours}, {n} repeats")
    return Reading(fewest, "; ".join(cells))


def _result_of(goal: Goal, results: list[tuple[str, dict]]) -> tuple[str, dict] | None:
    """The (path, result) of results/<card>/<file> that a goal reads, or None."""
    return next(((p, r) for p, r in results if r["target"]["name"] == goal.card and Path(p).name == goal.file), None)


def read_goal(goal: Goal, results: list[tuple[str, dict]], figures: list[Figure], failed: dict[str, int]) -> Reading:
    """What the committed results give for `goal` (`failed`: each card's failed rows over its ladders)."""
    if goal.measure == "failed_rows":
        n = failed.get(goal.card)
        return Reading(None, "no ladder result") if n is None else Reading(n, f"{n} failed rows")
    found = _result_of(goal, results)
    if found is None:
        return Reading(None, f"no results/{goal.card}/{goal.file}")
    path, result = found
    if goal.measure == "best_floor_share":
        floor = result.get("floor")
        if not floor or "totals" not in floor:
            return Reading(None, "no kernel floor in the result")
        return _best(result, goal, lambda r, fp8: floor_share(r, floor, fp8), "{:.0%}")
    if goal.measure == "best_rate":
        return _best(result, goal, lambda r, _: r["samples_per_s"], "{:.2f}")
    if goal.measure == "speedup":
        return _speedup(result, goal)
    return _published(result, path, goal, figures)


def _bar(goal: Goal) -> str:
    if goal.measure == "failed_rows":
        return f"at most {goal.bar:g}"
    if goal.measure == "best_floor_share":
        return f">= {goal.bar:.0%}"
    if goal.measure == "speedup":
        return f">= {goal.bar:g}x"
    if goal.measure == "published_repeats":
        return f">= {goal.bar:g} repeats"
    return f">= {goal.bar:g}"


def met(goal: Goal, reading: Reading) -> str:
    if reading.value is None:
        return "not measured"
    ok = reading.value <= goal.bar if goal.measure == "failed_rows" else reading.value >= goal.bar
    return "met" if ok else "not met"


def _evidence(goal: Goal, results: list[tuple[str, dict]]) -> str:
    if goal.file is None:
        return f"every ladder result of {goal.card} (coverage above)"
    found = _result_of(goal, results)
    if found is None:
        return "-"
    path, result = found
    return f"{Path(path).as_posix()}, {compare.commit_text(result)}"


HEADERS = ["card", "goal", "bar", "ours", "verdict", "read from", "analysis, next step"]
INTRO = (
    "The bars this project holds each card's committed results to, and what the recorded baselines give "
    "(harness/report/goals.py writes only the bars; the figures are read from the results each time this page is "
    "written). Where a goal is not met, the linked section has the profile and the next step."
)


def goal_rows(results: list[tuple[str, dict]], figures: list[Figure], failed: dict[str, int]) -> list[list[str]]:
    """A row per goal (HEADERS): its bar, the figure the committed result gives, met or not, the result it was read
    from and the docs/ page (#section) with the analysis and next step."""
    rows = []
    for goal in GOALS:
        reading = read_goal(goal, results, figures, failed)
        rows.append(
            [
                goal.card,
                goal.what,
                _bar(goal),
                reading.text,
                met(goal, reading),
                _evidence(goal, results),
                goal.analysis,
            ]
        )
    return rows


def goals_section(results: list[tuple[str, dict]], figures: list[Figure], failed: dict[str, int]) -> list[str]:
    """docs/hardware.md's goals table (markdown): the rows of goal_rows, a verdict short of its bar in bold."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    for *cells, verdict, evidence, analysis in goal_rows(results, figures, failed):
        link = f"[{analysis.split('#')[0]}]({analysis})" if analysis else "-"
        shown = "**not met**" if verdict == "not met" else verdict
        lines.append("| " + " | ".join([*cells, shown, evidence, link]) + " |")
    return ["## Goals per card", "", INTRO, "", *lines, ""]
