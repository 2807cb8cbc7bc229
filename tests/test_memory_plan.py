"""Rungs that plan for the card's memory (harness/ladder/memory_plan.py), from the committed H200 evidence that
scenarios/pi05-beyond.yaml names: the recompute a planned rung takes on cards of several sizes, the refusal before
anything builds, and the capability refusals per target."""

import dataclasses
import json
from pathlib import Path

import pytest

from harness.ladder.memory_plan import MemoryPlanner, memory_line
from harness.ladder.runner import unsupported_reason
from harness.machine.hardware import capabilities, get_target
from harness.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[1]
BEYOND = load_scenario(ROOT / "scenarios/pi05-beyond.yaml")
PEAKS = json.loads((ROOT / "results/h200/pi05-beyond.json").read_text())
SWEEP = json.loads((ROOT / "results/h200/pi05-beyond-recompute-sweep.json").read_text())


def rung(name):
    return next(r for r in BEYOND.ladder if r.name == name)


def planner(card_gib, workload=None, scenario=BEYOND, target=None):
    return MemoryPlanner(scenario, workload or PEAKS["workload"], card_gib, target)


def planning(mode: str):
    """pi05-beyond with its planned rungs planning by `mode` ("memory": micro-batches first; "recompute" only)."""
    ladder = tuple(dataclasses.replace(r, plan=mode) if r.plan else r for r in BEYOND.ladder)
    return dataclasses.replace(BEYOND, ladder=ladder)


RECOMPUTE_ONLY = planning("recompute")


def by_name(result):
    return {r["name"]: r for r in result["rungs"]}


def test_the_plan_is_inherited_until_a_rung_sets_recompute_itself():
    planned = [r.name for r in BEYOND.ladder if r.plan]
    assert planned[0] == "planned-recompute" and planned[-1] == BEYOND.ladder[-1].name
    assert "sdpa-joint-attention" not in planned


def test_a_card_with_room_keeps_the_written_recompute():
    """On the H200 the most any planned rung measured (whole-step-graph's reserved graph pool) fits 90% of the card."""
    p = planner(139.8)
    worst = max(r.get("peak_reserved_gib") or r["peak_memory_gib"] for r in PEAKS["rungs"][2:] if r["status"] == "ok")
    assert p.plan["as_written"] and p.plan["predicted_peak_gib"] == pytest.approx(worst, abs=0.01)
    ran, plan, refused = p.apply(rung("skip-prefix-tail"))
    assert ran.cumulative == rung("skip-prefix-tail").cumulative and refused is None and plan is p.plan


def test_an_h100_splits_the_batch_in_two_where_that_fits():
    """pi05-beyond plans `plan: memory`: on an 80 GB card less 10% the batch runs as two micro-batches, predicted as
    the training state (counted on the meta device) plus half of the rest of the most a planned rung needed."""
    from models import get_family
    from models.workload import Workload

    card = 79.19
    plan = planner(card).plan
    workload = Workload.from_record(PEAKS["workload"])
    state = get_family("pi05").state_bytes("full", workload) / 2**30
    assert plan["micro_batches"] == 2 and plan["state_gib"] == pytest.approx(state, abs=0.01)
    assert plan["predicted_peak_gib"] == pytest.approx(state + (plan["without_recompute_gib"] - state) / 2, abs=0.01)
    assert plan["predicted_peak_gib"] <= plan["budget_gib"] < plan["without_recompute_gib"]
    ran, recorded, refused = planner(card).apply(rung("skip-prefix-tail"))
    assert refused is None and recorded["micro_batches"] == 2
    assert ran.cumulative == {**rung("skip-prefix-tail").cumulative, "micro_batches": 2}
    assert ran.cumulative["recompute"] == "none"  # the written recompute stays
    line = memory_line(plan)
    assert line.startswith("memory: 2 micro-batches a step for the 79.2 GiB card less 10%: predicted peak"), line
    # a smaller card takes more micro-batches; none that fits gives way to recompute, then to a refusal
    assert planner(45.0).plan["micro_batches"] == 8
    assert planner(30.0).plan["fits"] is False


def test_with_plan_recompute_an_h100_gets_the_cheapest_recompute_that_fits_its_budget():
    """On an 80 GB card less 10% the sweep's cheapest fitting choice: every subset's predicted peak and extra time
    recomputed here by brute force from the sweep's rows must agree with the planner's pick."""
    card = 79.19
    p = planner(card, scenario=RECOMPUTE_ONLY)
    plan = p.plan
    assert not plan["as_written"] and plan["budget_gib"] == pytest.approx(card * 0.9, abs=0.01)
    assert plan["predicted_peak_gib"] <= plan["budget_gib"]
    rows = {r["name"].removeprefix("recompute-"): r for r in SWEEP["rungs"]}
    base = rows.pop("no-recompute")
    saved = {g: base["peak_memory_gib"] - r["peak_memory_gib"] for g, r in rows.items()}
    extra = {g: max(0.0, 32 / r["samples_per_s"] - 32 / base["samples_per_s"]) * 1e3 for g, r in rows.items()}
    fits = [
        (sum(extra[g] for g in groups), groups)
        for n in range(len(rows) + 1)
        for groups in __import__("itertools").combinations(sorted(rows), n)
        if plan["without_recompute_gib"] - sum(max(0, saved[g]) for g in groups) <= plan["budget_gib"]
    ]
    cheapest = min(fits)[0]
    assert plan["predicted_extra_ms"] == pytest.approx(cheapest, abs=0.5)
    ran, recorded, refused = p.apply(rung("fp8-triton-vision-mlp"))
    assert refused is None and recorded["groups"] == plan["groups"]
    assert ran.cumulative["recompute"] == {"patterns": [pat for g in plan["groups"] for pat in _patterns(g)]}
    assert "predicted peak" in memory_line(plan) and "79.2 GiB card less 10%" in memory_line(plan)
    # the rungs before the plan keep their own recompute and fit
    assert p.apply(rung("loongforge-best-bf16")) == (rung("loongforge-best-bf16"), None, None)


def _patterns(group):
    return next(r["options"]["recompute"]["patterns"] for r in SWEEP["rungs"] if r["name"] == f"recompute-{group}")


def test_a_rung_that_cannot_fit_is_refused_before_it_builds():
    p = planner(20.0)
    ran, plan, refused = p.apply(rung("whole-step-graph"))
    assert plan["fits"] is False and refused.startswith("needs ") and refused.endswith("the card has 20.0")
    _, _, refused = p.apply(rung("loongforge-best-bf16"))
    measured = by_name(PEAKS)["loongforge-best-bf16"]["peak_memory_gib"]
    assert refused == f"needs {measured:.1f} GiB (as measured on h200 (pi05-beyond.json)), the card has 20.0"


def test_evidence_for_another_workload_plans_and_refuses_nothing():
    """The CPU smoke (tiny model) or another batch: the H200's peaks say nothing about it."""
    other = {**PEAKS["workload"], "batch_size": 8}
    p = planner(20.0, other)
    assert p.plan is None
    assert p.apply(rung("whole-step-graph")) == (rung("whole-step-graph"), None, None)
    assert MemoryPlanner(BEYOND, PEAKS["workload"], None).apply(rung("fp8")) == (rung("fp8"), None, None)


def test_fp8_rungs_are_unsupported_on_an_a100_before_anything_builds():
    loongforge = load_scenario(ROOT / "scenarios/pi05-loongforge.yaml")
    fp8 = next(r for r in loongforge.ladder if r.name == "fp8")
    for name, refused in (("a100", True), ("h100", False), ("h200", False), ("cpu", True)):
        target = get_target(name)
        reason = unsupported_reason(loongforge, target, fp8, capabilities(target))
        assert (reason is not None) is refused, (name, reason)


@pytest.mark.parametrize("mode", ["memory", "recompute"])
def test_the_ladder_table_says_how_each_planned_rung_fitted(mode):
    from harness.report.report import ladder_table

    result = json.loads(json.dumps(PEAKS))
    plan = planner(79.19, scenario=planning(mode)).plan
    for r in result["rungs"]:
        if rung(r["name"]).plan:
            r["memory_plan"] = plan
    result["provenance"]["host"] = {"cpu_model": "Test CPU 9000", "cpus_visible": 16, "cpu_count": 32}
    table = ladder_table(result)
    chosen = "2 micro-batches" if mode == "memory" else "recompute " + "+".join(plan["groups"])
    expected = f"{chosen} for {plan['budget_gib']:.0f} GiB (predicted peak {plan['predicted_peak_gib']:.1f})"
    lines = [line for line in table.splitlines() if line.startswith(("planned-recompute", "sdpa-joint-attention"))]
    assert expected in lines[1] and expected not in lines[0]
    assert "host Test CPU 9000, 16 cores" in table.splitlines()[0]


def test_a_rung_that_ran_out_of_memory_on_this_card_with_these_options_is_refused_up_front():
    """The committed H100 run: fp8-triton-vision-mlp ran out of memory under the H100's recompute plan. On an H100
    with the same plan it is refused before it builds, naming the run; the rungs that fitted run; another card is
    not concerned, and neither are other options (the micro-batch plan's)."""
    h100 = json.loads((ROOT / "results/h100/history/pi05-beyond/0001-73e4fc5.json").read_text())
    oom = [r["name"] for r in h100["rungs"] if r["status"] == "oom"]
    assert oom == ["fp8-triton-vision-mlp"]
    card = h100["target"]["memory_gib"]
    p = planner(card, scenario=RECOMPUTE_ONLY, target="h100")
    ran, plan, refused = p.apply(rung("fp8-triton-vision-mlp"))
    assert ran.cumulative == by_name(h100)["fp8-triton-vision-mlp"]["options"]
    sha = h100["provenance"]["git_sha"][:7]
    assert refused == (
        f"needs more than the card's {card:.1f} GiB: it ran out of memory on h100 with these options "
        f"(0001-73e4fc5.json, vlabench {sha})"
    )
    assert p.apply(rung("fp8-triton-mlp"))[2] is None and p.apply(rung("skip-prefix-tail"))[2] is None
    assert planner(card, scenario=RECOMPUTE_ONLY, target="h200").apply(rung("fp8-triton-vision-mlp"))[2] is None
    ran, _, refused = planner(card, target="h100").apply(rung("fp8-triton-vision-mlp"))
    assert refused is None and ran.cumulative["micro_batches"] == 2
    assert MemoryPlanner(BEYOND, PEAKS["workload"], card, "a100").apply(rung("fp8-triton-vision-mlp"))[2] is None
    # on a card whose plan differs (room for the written recompute), the options differ: not refused
    assert MemoryPlanner(BEYOND, PEAKS["workload"], 139.8, "h100").apply(rung("fp8-triton-vision-mlp"))[2] is None


def test_profile_builds_a_planned_rung_as_run_does_on_the_card(monkeypatch, capsys):
    """`vlabench profile` of a planned rung on an 80 GB card profiles the step `run` times there (two micro-batches),
    says so, and keeps the plan; a card no plan fits refuses before anything builds."""
    from harness.commands import profile

    class Card:
        def __init__(self, gib):
            self.gib = gib

        def total_memory_gib(self):
            return self.gib

    h100 = get_target("h100")
    monkeypatch.setattr(profile, "get_device", lambda *a, **k: Card(79.19))
    ran, plan, refused = profile.planned_for_card(BEYOND, h100, rung("skip-prefix-tail"), None)
    assert refused is None and plan["micro_batches"] == 2 and ran.cumulative["micro_batches"] == 2
    assert "memory: 2 micro-batches a step" in capsys.readouterr().out
    # a --batch-size override has no evidence: the rung as written, nothing planned
    assert profile.planned_for_card(BEYOND, h100, rung("skip-prefix-tail"), 8) == (rung("skip-prefix-tail"), None, None)
    monkeypatch.setattr(profile, "get_device", lambda *a, **k: Card(30.0))
    _, _, refused = profile.planned_for_card(BEYOND, h100, rung("skip-prefix-tail"), None)
    assert refused and refused.startswith("needs ") and "the card has 30.0" in refused
