"""A rung's memory on the card it runs on: how a planned rung (`plan: memory` or `plan: recompute`) fits the card
(micro-batches or recompute), and a refusal before anything builds for a rung that cannot fit at all.

The evidence is the scenario's `memory:` block: a ladder result of the scenario measured on a card with room to spare
(each rung's peak) and a recompute sweep of the workload (what recomputing each group alone saves and costs). The
memory a step allocates depends on its shapes and code, not on the card, so a peak measured on an H200 predicts the
H100's. A rung that replays CUDA graphs needs its reserved peak: its graph pool's blocks count as free in the
allocated figure once captured.

A planned rung keeps its written options where the card has room for them (the published setting). Otherwise, with
`plan: memory`, it runs its batch in the fewest equal micro-batches whose predicted peak fits the card's memory less
the scenario's margin: micro-batches add no FLOPs (the same GEMMs on half the rows, one more pass over the gradients),
where recompute adds a forward of what it recomputes. The prediction keeps the training state (weights, gradients,
AdamW's moments, counted by the family) whole and divides the rest, the activations, by the number of micro-batches.
Where no split fits, or with `plan: recompute`, it takes the recompute plan with the least predicted extra step time
(harness/ladder/sweep.py plan_recompute) whose predicted peak fits. One plan serves every planned rung of the
ladder, so the rungs after it still differ from each other by their own switch alone.

A target the scenario does not list has no evidence: before a rung builds there, the family's weights, gradients and
AdamW state (counted on the meta device) are set against the card's memory, or on a CPU the host's available memory.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from models import get_family
from models.schema import SchemaError

from ..errors import InputError
from ..machine.hardware import Target, get_device
from ..results import ResultError, load_result
from ..scenario import Rung, Scenario, Workload
from .sweep import BASE, plan_recompute, sweep_rows

# Workload fields that change no tensor's size: evidence measured with other values still holds.
NOT_MEMORY = frozenset({"warmup_steps", "timed_steps", "seed", "lr", "data", "flops_per_sample"})


def _load(scenario: Scenario, rel: str, key: str) -> dict:
    """An evidence file, checked as every result is on load (relative to the scenario file)."""
    path = Path(scenario.path).parent / rel
    try:
        return load_result(path)
    except ResultError as e:
        raise InputError(
            scenario.path, f"memory.{key}", "a usable result file (relative to the scenario)", str(e)
        ) from None


def _same_workload(evidence: dict, workload: dict) -> bool:
    """Whether two `workload` blocks size every tensor alike (a field an older file lacks reads as its default)."""
    try:
        a, b = (dataclasses.asdict(Workload.from_record(w)) for w in (evidence, workload))
    except SchemaError:
        return False
    return all(a[k] == b[k] for k in a.keys() - NOT_MEMORY) and evidence.get("model") == workload.get("model")


def measured_need(family, record: dict) -> float | None:
    """What a measured rung needed: its reserved peak where it replays CUDA graphs, else its allocated peak."""
    if record.get("status") != "ok" or record.get("peak_memory_gib") is None:
        return None
    if family.knobs(record["options"]).cuda_graphs and record.get("peak_reserved_gib") is not None:
        return record["peak_reserved_gib"]
    return record["peak_memory_gib"]


class MemoryPlanner:
    """The memory decisions of one run on one card (`card_gib`: the device's total memory; None on a host without an
    accelerator, where nothing is planned or refused)."""

    def __init__(self, scenario: Scenario, workload: dict, card_gib: float | None, target: str | None = None):
        self.scenario, self.card_gib, self.target = scenario, card_gib, target
        self.workload = workload
        self.family = get_family(scenario.model)
        evidence = scenario.memory
        self.margin = evidence.margin if evidence else 0.0
        self.peaks: dict[str, dict] = {}
        self.ran_out: dict[str, tuple[dict, str]] = {}  # rung name: (its record, where) for an OOM on this card
        self.peaks_from = self.sweep = self.plan = None
        if evidence is None or card_gib is None:
            return
        for rel in evidence.card_runs:
            result = _load(scenario, rel, "card_runs")
            if result.get("target", {}).get("name") == target and _same_workload(result.get("workload", {}), workload):
                sha = str(result.get("provenance", {}).get("git_sha"))[:7]
                for r in result.get("rungs", []):
                    if r.get("status") == "oom":
                        self.ran_out[r["name"]] = (r, f"{Path(rel).name}, vlabench {sha}")
        if evidence.peaks:
            result = _load(scenario, evidence.peaks, "peaks")
            if _same_workload(result.get("workload", {}), workload):
                self.peaks = {r["name"]: r for r in result.get("rungs", [])}
                self.peaks_from = f"{result['target']['name']} ({Path(evidence.peaks).name})"
        if evidence.recompute_sweep:
            sweep = _load(scenario, evidence.recompute_sweep, "recompute_sweep")
            if _same_workload(sweep.get("workload", {}), workload):
                self.sweep = sweep
        self.plan = self._plan() if self.sweep is not None else None

    def _saved(self, options: dict) -> float:
        """What the sweep says the recompute written in `options` saves against none (its groups' savings)."""
        written = set(self.family.knobs(options).recompute_patterns)
        return sum(
            max(0.0, r["saved_gib"] or 0.0)
            for r in sweep_rows(self.sweep)
            if r["status"] == "ok" and r["patterns"] and set(r["patterns"]) <= written
        )

    def _plan(self) -> dict:
        """The one plan of the ladder's planned rungs: as written where it fits, else the cheapest that does."""
        budget = self.card_gib * (1 - self.margin)
        planned = [r for r in self.scenario.ladder if r.plan]
        base, basis = self._without_recompute(planned)
        plan = {"card_gib": round(self.card_gib, 2), "margin": self.margin, "budget_gib": round(budget, 2)}
        plan |= {"without_recompute_gib": round(base, 2), "basis": basis}
        written = base - self._saved(planned[0].cumulative)  # planned rungs inherit one written recompute
        if written <= budget:
            return {**plan, "as_written": True, "predicted_peak_gib": round(written, 2)}
        split = self._micro_batches(written, budget) if planned[0].plan == "memory" else None
        if split is not None:
            return {**plan, "as_written": False, **split}
        try:
            chosen = plan_recompute(self.sweep, budget, base_peak_gib=base)
        except ValueError:
            return {**plan, "fits": False, "predicted_peak_gib": round(base - self._saved_all(), 2)}
        return {
            **plan,
            "as_written": False,
            "groups": list(chosen.groups),
            "options": chosen.options,
            "predicted_peak_gib": round(chosen.peak_gib, 2),
            "predicted_extra_ms": round(chosen.extra_ms, 1),
        }

    def _micro_batches(self, need: float, budget: float) -> dict | None:
        """The fewest equal micro-batches of the batch whose predicted peak fits `budget` (None: the family cannot
        split its step or say its training state, or no split of up to 16 fits): the training state stays whole,
        the rest of `need` (the activations) is divided by their number."""
        workload = Workload.from_record(self.workload)
        state = self.family.state_bytes(workload.model_size, workload)
        if state is None or self.family.micro_batch_options(2) is None:
            return None
        state_gib = state / 2**30
        for k in (2, 4, 8, 16):
            peak = state_gib + (need - state_gib) / k
            if workload.batch_size % k == 0 and peak <= budget:
                return {
                    "micro_batches": k,
                    "options": self.family.micro_batch_options(k),
                    "predicted_peak_gib": round(peak, 2),
                    "state_gib": round(state_gib, 2),
                    "groups": [],
                }
        return None

    def _without_recompute(self, planned: list[Rung]) -> tuple[float, str]:
        """The most any planned rung needs with nothing recomputed, and what says so: its measured peak plus what its
        measured recompute saved, or with no planned rung measured, the sweep's own base."""
        measured = [
            (need + self._saved(rec["options"]), name)
            for name in (r.name for r in planned)
            if (rec := self.peaks.get(name)) and (need := measured_need(self.family, rec)) is not None
        ]
        if measured:
            need, name = max(measured)
            return need, f"{name} as measured on {self.peaks_from}"
        base = next(r for r in self.sweep["rungs"] if r["name"] == BASE)
        return base["peak_memory_gib"], f"the recompute sweep's {BASE} rung on {self.sweep['target']['name']}"

    def _saved_all(self) -> float:
        return sum(max(0.0, r["saved_gib"] or 0.0) for r in sweep_rows(self.sweep) if r["status"] == "ok")

    def apply(self, rung: Rung) -> tuple[Rung, dict | None, str | None]:
        """The rung as it runs on this card, what the plan recorded (None: nothing planned) and why it cannot run
        here (None: it can)."""
        if self.card_gib is None:
            return rung, None, None
        if rung.plan and self.plan is not None:
            plan = self.plan
            if plan.get("fits") is False:
                return (
                    rung,
                    plan,
                    self._too_big(plan["predicted_peak_gib"], "recomputing every group the sweep measured"),
                )
            if not plan["as_written"]:
                rung = dataclasses.replace(rung, cumulative={**rung.cumulative, **plan["options"]})
            return rung, plan, self._ran_out(rung)
        need = measured_need(self.family, self.peaks.get(rung.name, {}))
        if need is not None and self.peaks[rung.name]["options"] == rung.cumulative and need > self.card_gib:
            return rung, None, self._too_big(need, f"as measured on {self.peaks_from}")
        return rung, None, self._ran_out(rung)

    def _ran_out(self, rung: Rung) -> str | None:
        """Why a rung that already ran out of memory on this card, with the options it would run with now, is not
        built again (None: no such run)."""
        record, where = self.ran_out.get(rung.name, ({}, ""))
        if record.get("options") != rung.cumulative:
            return None
        return (
            f"needs more than the card's {self.card_gib:.1f} GiB: it ran out of memory on {self.target} with these "
            f"options ({where})"
        )

    def _too_big(self, need: float, why: str) -> str:
        return too_big(need, why, self.card_gib)


def too_big(need: float, why: str, have: float, holder: str = "the card", more: str = "") -> str:
    return f"needs {need:.1f} GiB ({why}), {holder} has {have:.1f}{more}"


def host_available_gib() -> float | None:
    """The host's available memory (MemAvailable: free plus what the kernel can reclaim); None where unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def check_unlisted_target(scenario: Scenario, target: Target, workload: Workload) -> None:
    """On a target the scenario does not list (its workload runs unchanged, sized for the listed ones), refuse in one
    line a workload whose model cannot fit before a rung builds it, instead of training it for minutes until it
    runs out of memory or swaps. The estimate leaves out activations, so what it refuses cannot fit."""
    if scenario.lists_target(target.name):
        return
    state = get_family(scenario.model).state_bytes(workload.model_size, workload)
    if target.backend == "cpu":
        have, holder, more = host_available_gib(), "the host", " available"
    else:
        try:
            have, holder, more = get_device(target.backend, target_name=target.name).total_memory_gib(), "the card", ""
        except RuntimeError:  # no such device here: the run says so in its own line
            have = None
    if state is None or have is None or state / 2**30 <= have:
        return
    why = f"the {workload.model_size} model's weights, gradients and AdamW state, before activations"
    smoke = (
        "" if "cpu" in scenario.targets else ", or a cpu: entry with a small model_size (e.g. cpu: {model_size: tiny})"
    )
    raise InputError(
        scenario.path,
        "targets",
        f"a target it lists ({', '.join(scenario.targets)}){smoke}",
        f"{target.name}, not listed, whose workload " + too_big(state / 2**30, why, have, holder, more),
    )


def memory_line(plan: dict) -> str:
    """One line on how a planned rung fits this card (micro-batches or recompute), and why."""
    card = f"{plan['card_gib']:.1f} GiB card less {plan['margin']:.0%}"
    if plan.get("fits") is False:
        return f"memory: no recompute plan fits the {card} (at least {plan['predicted_peak_gib']:.1f} GiB)"
    if plan["as_written"]:
        return f"memory: as written, predicted peak {plan['predicted_peak_gib']:.1f} GiB within the {card}"
    if plan.get("micro_batches"):
        return (
            f"memory: {plan['micro_batches']} micro-batches a step for the {card}: predicted peak "
            f"{plan['predicted_peak_gib']:.1f} GiB (training state {plan['state_gib']:.1f} GiB and 1/"
            f"{plan['micro_batches']} of the rest of {plan['without_recompute_gib']:.1f}: {plan['basis']})"
        )
    return (
        f"memory: recompute {', '.join(plan['groups']) or 'nothing'} for the {card}: predicted peak "
        f"{plan['predicted_peak_gib']:.1f} GiB (without recompute {plan['without_recompute_gib']:.1f}: "
        f"{plan['basis']}), about {plan['predicted_extra_ms']:.0f} ms more a step by the sweep"
    )
