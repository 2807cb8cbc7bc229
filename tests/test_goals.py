"""docs/hardware.md's goals per card (harness/report/goals.py): each goal's figure read from the committed results,
and the verdict moving when the results do. Real committed result files, changed in copies."""

import copy
from pathlib import Path

from harness.judge.published import load_published
from harness.report import goals, hardware, readme
from harness.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent
RESULTS = readme._results(ROOT)  # the recorded baselines, as `vlabench readme` reads them
FIGURES = load_published(ROOT / "results" / "published")


def goal(card: str, start: str) -> goals.Goal:
    return next(g for g in goals.GOALS if g.card == card and g.what.startswith(start))


def verdict(g: goals.Goal, results=RESULTS, failed=None) -> tuple[str, goals.Reading]:
    reading = goals.read_goal(g, results, FIGURES, failed or {})
    return goals.met(g, reading), reading


def replaced(path: str, change) -> list[tuple[str, dict]]:
    """The baselines with a changed copy of one result in its place."""
    out = []
    for p, r in RESULTS:
        if p == path:
            r = copy.deepcopy(r)
            change(r)
        out.append((p, r))
    return out


def test_the_h100_floor_shares_are_read_from_the_committed_result_and_move_with_it():
    bf16 = goal("h100", "pi05-beyond's best bf16")
    word, reading = verdict(bf16)
    assert word == "not met" and reading.text == "80% (skip-prefix-tail)" and 0.80 <= reading.value < 0.81

    def faster(result):  # skip-prefix-tail at 86% of the run's bf16 floor
        rung = next(r for r in result["rungs"] if r["name"] == "skip-prefix-tail")
        rung["samples_per_s"] = 0.86 * result["floor"]["totals"]["bf16"]["samples_per_s"]

    word, reading = verdict(bf16, replaced("results/h100/pi05-beyond.json", faster))
    assert (word, reading.text) == ("met", "86% (skip-prefix-tail)")
    # the FP8 goal reads the FP8 rungs against the FP8 floor, whatever the bf16 rungs do
    word, reading = verdict(goal("h100", "pi05-beyond's best FP8"), replaced("results/h100/pi05-beyond.json", faster))
    assert (word, reading.text) == ("not met", "64% (fp8-triton-vision-mlp)")


def test_a_speedup_goal_shows_the_reference_rung_s_data_wait():
    word, reading = verdict(goal("h100", "gr00t-loongforge's best rung"))
    assert word == "met" and reading.text.startswith("2.81x (graphed-optimizer; community waited ")
    word, reading = verdict(goal("h200", "two H200s"))
    assert word == "not met" and reading.text.startswith("1.81x (cuda-graphs;")


def test_published_verdicts_need_their_repeats():
    g = goal("h100", "pi05-loongforge's published verdicts")
    word, reading = verdict(g)
    assert word == "met" and reading.value == 3 and "LoongForge FP8: reproduced 3.00x" in reading.text

    def one_run(result):  # every rung's repeats dropped: one run each
        for rung in result["rungs"]:
            rung.pop("repeats", None)

    word, reading = verdict(g, replaced("results/h100/pi05-loongforge.json", one_run))
    assert word == "not met" and reading.value == 1


def test_an_oom_row_fails_the_h100_goal_and_a_missing_result_is_not_measured():
    scenarios = [load_scenario(f) for f in sorted((ROOT / "scenarios").glob("*.yaml"))]
    ladders = readme.every_ladder(ROOT)
    assert hardware.failed_rows(ladders, scenarios)["h100"] == 0
    h100 = next(r for p, r in ladders if p == "results/h100/pi05-ascend.json")
    broken = copy.deepcopy(h100)
    broken["rungs"][-1]["status"] = "oom"
    broken["provenance"] = {**broken["provenance"], "created_at": "2099-01-01T00:00:00Z"}
    # an OOM in a newer result does not undo a rung that ran; a rung no result ran does count
    assert hardware.failed_rows([*ladders, ("x.json", broken)], scenarios)["h100"] == 0
    only = [(p, r) for p, r in ladders if p != "results/h100/pi05-ascend.json"]
    only = [(p, r) for p, r in only if "pi05-ascend" not in p or "/h100/" not in p]
    failed = hardware.failed_rows([*only, ("x.json", broken)], scenarios)
    assert failed["h100"] == 1
    word, reading = verdict(goal("h100", "every rung runs"), failed=failed)
    assert (word, reading.text) == ("not met", "1 failed rows")
    g = goal("h200", "pi05-beyond's best bf16")
    word, reading = verdict(g, [(p, r) for p, r in RESULTS if p != "results/h200/pi05-beyond.json"])
    assert (word, reading.text) == ("not measured", "no results/h200/pi05-beyond.json")


def test_the_committed_page_holds_the_goals_table():
    page = (ROOT / "docs" / "hardware.md").read_text()  # `vlabench readme --check` keeps it current
    assert "## Goals per card" in page
    assert (
        "| h100 | pi05-beyond's best bf16 rung, share of the bf16 kernel floor | >= 85% | 80% (skip-prefix-tail) |"
        in page
    )
