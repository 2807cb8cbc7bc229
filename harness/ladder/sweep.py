"""`vlabench recompute-sweep`: what recomputing each module group costs in step time and saves in memory.

Starting from one rung's options with recompute off, each candidate group (the family's
`recompute_groups`) is recomputed alone; every configuration is a rung of its own process, so the
usual result file, progress and failure handling apply. The cost table is ms of extra step time per
GiB of peak memory saved, the figure LoongForge used to pick what to recompute. The options that
recompute a group, or nothing, and that set the compile mode are the family's to write
(`recompute_options`, `compile_options`); which patterns a rung recomputes is the family's to read (`knobs`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from itertools import combinations

from tabulate import tabulate

from models import ModelFamily, get_family

from ..scenario import Rung, Scenario
from ..stats.timing import percentile

BASE = "no-recompute"


def default_rung(scenario: Scenario, trainable: Callable[[Rung], bool] = lambda rung: True) -> str:
    """The first rung that recomputes by pattern (the ladder's recompute choice), else the last rung the
    target can train (`trainable`), else the last rung."""
    family = get_family(scenario.model)
    for rung in scenario.ladder:
        if family.knobs(rung.cumulative).recompute_patterns:
            return rung.name
    return next((r.name for r in reversed(scenario.ladder) if trainable(r)), scenario.ladder[-1].name)


def sweep_scenario(scenario: Scenario, rung_name: str, compile_mode: str | None, workload_overrides: dict) -> Scenario:
    """A scenario whose rungs are the base (no recompute) and one rung per recompute group, all with the base
    rung's options and input pipeline."""
    family = get_family(scenario.model)
    base = next(r for r in scenario.ladder if r.name == rung_name)
    off = family.recompute_options(())
    options = {**base.cumulative, **off, **(family.compile_options(compile_mode) if compile_mode else {})}
    loader = base.loader_cumulative
    rungs = [Rung(BASE, off, options, loader=loader, loader_cumulative=loader)]
    for group, patterns in family.recompute_groups().items():
        rec = family.recompute_options(patterns)
        rungs.append(Rung(f"recompute-{group}", rec, {**options, **rec}, loader_cumulative=loader))
    targets = {name: {**overrides, **workload_overrides} for name, overrides in scenario.targets.items()}
    return dataclasses.replace(
        scenario,
        name=f"{scenario.name}-recompute-sweep",
        ladder=tuple(rungs),
        workload=dataclasses.replace(scenario.workload, **workload_overrides),  # for a target the scenario omits
        targets=targets,
        parity_baseline=None,
    )


def step_noise_ms(a: dict, b: dict) -> float:
    """Run-to-run noise of a step-time difference: the larger interquartile range of the two rungs' step
    times (quartiles, not p10/p90: a sweep times few steps and one slow step must not swamp it)."""
    return max(percentile(r["step_times_s"], 75) - percentile(r["step_times_s"], 25) for r in (a, b)) * 1e3


def sweep_family(result: dict) -> ModelFamily:
    return get_family(result["workload"]["model"])


def sweep_rows(result: dict) -> list[dict]:
    """Extra step time and saved peak memory of each group against the no-recompute base."""
    by_name = {r["name"]: r for r in result["rungs"]}
    base = by_name.get(BASE)
    family = sweep_family(result)
    rows = []
    for r in result["rungs"]:
        if r["name"] == BASE:
            continue
        row = {
            "group": r["name"].removeprefix("recompute-"),
            "patterns": list(family.knobs(r["options"]).recompute_patterns),
            "status": r["status"],
            "step_ms": None,
            "extra_ms": None,
            "peak_gib": None,
            "saved_gib": None,
            "ms_per_gib": None,
        }
        if r["status"] == "ok":
            row.update(step_ms=r["step_time_s"] * 1e3, peak_gib=r["peak_memory_gib"])
            if base and base["status"] == "ok":
                row["extra_ms"] = (r["step_time_s"] - base["step_time_s"]) * 1e3
                row["saved_gib"] = base["peak_memory_gib"] - r["peak_memory_gib"]
                row["noise_ms"] = step_noise_ms(base, r)
                # A ratio of noise to (almost) nothing is not a cost: report it only when both the extra
                # time is outside the step-time spread and some memory was saved.
                if row["saved_gib"] > 0.05 and abs(row["extra_ms"]) > row["noise_ms"]:
                    row["ms_per_gib"] = row["extra_ms"] / row["saved_gib"]
        rows.append(row)
    return rows


def sweep_table(result: dict, fmt: str = "simple") -> str:
    by_name = {r["name"]: r for r in result["rungs"]}
    base = by_name.get(BASE, {})
    w = result["workload"]

    def f(v, spec):
        return "-" if v is None else format(v, spec)

    head = (
        f"{result['scenario']['name']} on {result['target']['name']}, {w['model_size']} model, batch "
        f"{w['batch_size']}; base: {base.get('status', 'missing')}"
        + (
            f", {base['step_time_s'] * 1e3:.0f} ms/step, peak {base['peak_memory_gib']:.1f} GiB"
            if base.get("status") == "ok"
            else f" ({base.get('reason')})"
            if base
            else ""
        )
    )
    rows = [
        [
            r["group"],
            ", ".join(r["patterns"]),
            r["status"],
            f(r["step_ms"], ".0f"),
            f(r["extra_ms"], "+.0f"),
            f(r["peak_gib"], ".1f"),
            f(r["saved_gib"], ".2f"),
            f(r["ms_per_gib"], ".1f") if r["ms_per_gib"] is not None or r["status"] != "ok" else "within noise",
        ]
        for r in sweep_rows(result)
    ]
    return (
        head
        + "\n"
        + tabulate(
            rows,
            headers=("group", "patterns", "status", "step ms", "extra ms", "peak GiB", "saved GiB", "ms per GiB saved"),
            tablefmt=fmt,
            disable_numparse=True,
        )
    )


@dataclasses.dataclass
class RecomputePlan:
    """The cheapest set of module groups to recompute so that the peak fits a memory budget, predicted from a
    recompute sweep (each group's saved peak memory and extra step time, taken as additive)."""

    budget_gib: float
    base_peak_gib: float
    base_step_ms: float
    groups: tuple[str, ...]
    patterns: tuple[str, ...]
    peak_gib: float  # predicted
    extra_ms: float  # predicted; a group whose measured extra time was negative counts 0
    options: dict  # the rung options that apply the plan, in the family's terms


def plan_recompute(result: dict, budget_gib: float, base_peak_gib: float | None = None) -> RecomputePlan:
    """Among every subset of the sweep's measured groups, the one with the least predicted extra step time
    whose predicted peak fits `budget_gib`; ties go to the fewer groups. The peak with nothing recomputed is the
    sweep's base rung's unless `base_peak_gib` gives one measured for the rung that takes the plan. Raises
    ValueError when the sweep has no usable base or no subset fits."""
    base = next((r for r in result["rungs"] if r["name"] == BASE), None)
    if base is None or base["status"] != "ok":
        raise ValueError(f"a sweep whose {BASE!r} rung ran (it is {base['status'] if base else 'missing'})")
    rows = [r for r in sweep_rows(result) if r["status"] == "ok"]
    base_peak = base["peak_memory_gib"] if base_peak_gib is None else base_peak_gib

    def peak(chosen) -> float:
        return base_peak - sum(max(0.0, r["saved_gib"]) for r in chosen)

    best = None
    for k in range(len(rows) + 1):
        for chosen in combinations(rows, k):
            extra = sum(max(0.0, r["extra_ms"]) for r in chosen)
            if peak(chosen) <= budget_gib and (best is None or extra < best[1]):
                best = (chosen, extra, peak(chosen))
    if best is None:
        raise ValueError(
            f"a budget of at least {peak(rows):.1f} GiB (recomputing every measured group), got {budget_gib:g}"
        )
    chosen, extra, peak = best
    patterns = tuple(p for r in chosen for p in r["patterns"])
    return RecomputePlan(
        budget_gib=budget_gib,
        base_peak_gib=base_peak,
        base_step_ms=base["step_time_s"] * 1e3,
        groups=tuple(r["group"] for r in chosen),
        patterns=patterns,
        peak_gib=peak,
        extra_ms=extra,
        options=sweep_family(result).recompute_options(patterns),
    )
