"""recompute-sweep: the configurations it builds and the cost arithmetic of its table."""

import json
from pathlib import Path

import pytest
import torch

from harness.cli import main
from harness.ladder.sweep import BASE, default_rung, plan_recompute, sweep_rows, sweep_scenario, sweep_table
from harness.scenario import load_scenario
from models.fp8 import fp8_candidates
from models.pi05 import FAMILY, FULL, Pi05Model
from models.pi05.techniques import FP8_SKIP, FP8_SKIP_EAGER_VISION
from models.workload import Workload

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SCENARIO = load_scenario(Path(__file__).resolve().parent.parent / "scenarios/pi05-loongforge.yaml")


def test_sweep_configurations():
    assert default_rung(SCENARIO) == "recompute-vit-only"
    sweep = sweep_scenario(SCENARIO, "recompute-vit-only", "none", {"batch_size": 16})
    names = [r.name for r in sweep.ladder]
    assert names == [BASE, "recompute-vit-layers", "recompute-gemma-mlp", "recompute-attention", "recompute-expert-mlp"]
    base = sweep.ladder[0].cumulative
    assert base["recompute"] == "none" and base["compile"] == "none" and base["attention"] == "flex"
    assert sweep.ladder[2].cumulative == {**base, "recompute": {"patterns": ["backbone.layers.*.prefix.mlp"]}}
    assert sweep.workload_for("h200").batch_size == 16 and sweep.workload_for("cpu").batch_size == 16
    # every group's patterns match modules of the real model
    model = FAMILY.build(
        "tiny", FAMILY.parse_options(base), Workload(batch_size=1, action_horizon=4), "cpu", torch.float32, 0
    ).model
    for rung in sweep.ladder[1:]:
        from models.recompute import matching_modules

        assert matching_modules(model, rung.cumulative["recompute"]["patterns"])


def rung(name, steps, peak, status="ok"):
    r = {"name": name, "status": status, "options": {"recompute": {"patterns": [name]}}}
    if status == "ok":
        r.update(step_times_s=steps, step_time_s=sorted(steps)[len(steps) // 2], peak_memory_gib=peak)
    return r


def test_sweep_cost_per_gib_and_noise():
    result = {
        "scenario": {"name": "s"},
        "target": {"name": "cpu"},
        "workload": {"model": "pi05", "model_size": "tiny", "batch_size": 2},
        "rungs": [
            rung(BASE, [1.00, 1.01, 0.99, 1.00], 10.0),
            rung("recompute-a", [1.10, 1.11, 1.09, 1.10], 8.0),  # +100 ms for 2 GiB
            rung("recompute-b", [1.005, 1.0, 0.995, 1.0], 6.0),  # free: inside the noise
            rung("recompute-c", [], 0, status="oom"),
        ],
    }
    rows = {r["group"]: r for r in sweep_rows(result)}
    assert rows["a"]["extra_ms"] == pytest.approx(100) and rows["a"]["saved_gib"] == pytest.approx(2)
    assert rows["a"]["ms_per_gib"] == pytest.approx(50)
    assert rows["b"]["ms_per_gib"] is None and rows["c"]["status"] == "oom"
    table = sweep_table(result)
    assert "within noise" in table and "50.0" in table


def sweep_result():
    return {
        "kind": "recompute-sweep",
        "scenario": {"name": "s"},
        "target": {"name": "cpu"},
        "workload": {"model": "pi05", "model_size": "tiny", "batch_size": 2},
        "rungs": [
            rung(BASE, [1.00, 1.01, 0.99, 1.00], 10.0),
            rung("recompute-a", [1.10, 1.11, 1.09, 1.10], 8.0),  # 2 GiB for +100 ms
            rung("recompute-b", [1.04, 1.04, 1.04, 1.04], 9.0),  # 1 GiB for +40 ms
            rung("recompute-c", [1.03, 1.03, 1.03, 1.03], 9.0),  # 1 GiB for +30 ms
            rung("recompute-d", [0.98, 0.98, 0.98, 0.98], 9.9),  # 0.1 GiB, measured faster: counts 0 ms
            rung("recompute-e", [], 0, status="oom"),  # not measured: never chosen
        ],
    }


@pytest.mark.parametrize(
    "budget, groups, peak, extra",
    [
        (10.0, (), 10.0, 0),  # fits without recompute
        (9.9, ("d",), 9.9, 0),  # the free group
        (9.0, ("c",), 9.0, 30),  # c is cheaper than b for the same GiB
        (8.0, ("b", "c"), 8.0, 70),  # b + c (70 ms) save as much as a alone (100 ms)
        (7.5, ("a", "c"), 7.0, 130),  # 2.5 GiB: a + c (130) beats a + b (140); b + c + d saves only 2.1
        (5.9, ("a", "b", "c", "d"), 5.9, 170),
    ],
)
def test_recompute_plan_is_the_cheapest_set_that_fits(budget, groups, peak, extra):
    plan = plan_recompute(sweep_result(), budget)
    assert plan.groups == groups and plan.peak_gib == pytest.approx(peak) and plan.extra_ms == pytest.approx(extra)
    assert plan.options == {"recompute": {"patterns": [f"recompute-{g}" for g in groups]} if groups else "none"}


def test_recompute_plan_command(capsys):
    """On the H200 sweep (batch 16, no compile): 62.8 GiB without recompute; under 60 GiB the Gemma MLPs
    (23.8 GiB for +50 ms) are cheaper than the SigLIP layers (6.9 GiB for +95 ms)."""
    sweep = FIXTURES / "sweep-h200.json"
    assert main(["recompute-plan", str(sweep), "--budget-gib", "60"]) == 0
    out = capsys.readouterr().out
    assert "recompute gemma-mlp; predicted peak 39.0 GiB (no recompute: 62.8), +50 ms per step over 450 ms" in out
    assert "{recompute: {patterns: [backbone.layers.*.prefix.mlp]}}" in out
    assert main(["recompute-plan", str(sweep), "--budget-gib", "70"]) == 0
    assert "{recompute: none}" in capsys.readouterr().out
    assert main(["recompute-plan", str(sweep), "--budget-gib", "30"]) == 2
    assert "--budget-gib: expected a budget of at least 30.9 GiB" in capsys.readouterr().err
    assert main(["recompute-plan", str(FIXTURES / "ladder-h200.json"), "--budget-gib", "80"]) == 2
    assert "kind: expected recompute-sweep" in capsys.readouterr().err


def test_fp8_converts_only_the_compiled_backbone():
    with torch.device("meta"):
        model = Pi05Model(FULL)
    chosen = fp8_candidates(model, skip=FP8_SKIP + FP8_SKIP_EAGER_VISION)
    assert chosen and all(name.startswith("backbone.layers.") for name in chosen)
    assert len(chosen) == 18 * 10  # q, o, gate, up, down of both streams (K/V are too thin)


def test_the_beyond_ladders_recompute_rung_is_the_plan_of_its_sweep():
    """scenarios/pi05-beyond.yaml's planned-recompute rung holds what `vlabench recompute-plan --budget-gib 120`
    chooses on that workload's batch-32 sweep (no recompute: 107.9 GiB fits), and a tighter budget would have
    chosen the cheapest group per GiB that fits instead."""
    sweep = json.loads((FIXTURES / "sweep-beyond-h200.json").read_text())
    beyond = load_scenario(Path(__file__).resolve().parent.parent / "scenarios/pi05-beyond.yaml")
    rung = next(r for r in beyond.ladder if r.name == "planned-recompute")
    plan = plan_recompute(sweep, 120)
    assert sweep["workload"]["batch_size"] == beyond.workload_for("h200").as_dict()["batch_size"]
    assert plan.options == {"recompute": rung.options["recompute"]} == {"recompute": "none"}
    rows = {r["group"]: r for r in sweep_rows(sweep)}
    tight = plan_recompute(sweep, 100)
    assert tight.groups == ("vit-layers",)
    assert tight.peak_gib == pytest.approx(plan.base_peak_gib - rows["vit-layers"]["saved_gib"])


GR00T_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios/gr00t-loongforge.yaml"


def test_gr00t_sweep_configurations_come_from_the_family():
    """GR00T has no recompute rung: the sweep starts from the last rung the target trains (on the CPU the
    fc1-bias-in-gelu rung: the graphs are substituted there, FP8 is not), with recompute and compile written
    in GR00T's options."""
    from harness.commands.recompute import _trainable_on
    from harness.machine.hardware import get_target
    from models.gr00t import FAMILY as GR00T

    scenario = load_scenario(GR00T_SCENARIO)
    assert default_rung(scenario) == "fp8-dit"
    assert default_rung(scenario, _trainable_on(scenario, get_target("cpu"))) == "fc1-bias-in-gelu"
    sweep = sweep_scenario(scenario, "compile", "none", {})
    assert [r.name for r in sweep.ladder] == [
        BASE,
        "recompute-vit-layers",
        "recompute-llm-layers",
        "recompute-dit-blocks",
    ]
    base = sweep.ladder[0].cumulative
    assert base["recompute"] == "none" and base["compile"] == "none" and base["lm_head"] is False
    assert sweep.ladder[3].cumulative == {**base, "recompute": {"patterns": ["dit.blocks.*"]}}
    assert all(r.loader_cumulative == scenario.ladder[-2].loader_cumulative for r in sweep.ladder)
    assert [GR00T.knobs(r.cumulative).recompute_patterns for r in sweep.ladder] == [
        (),
        ("vision.layers.*",),
        ("llm.layers.*",),
        ("dit.blocks.*",),
    ]


@pytest.mark.slow  # four rung processes reading a dataset (about 100 s on 2 cores)
def test_a_gr00t_recompute_sweep_runs_on_the_cpu(tmp_path, capsys):
    """The tiny GR00T model from the community rung's options: every group trains with the base's losses to the
    bit (recompute reruns each module from the forward's RNG state, dropout included), and the table follows."""
    from harness.data import lerobot_format as fmt
    from harness.data.synthetic import synthetic_episodes
    from harness.data.writer import write_dataset
    from harness.results import load_result

    dataset = tmp_path / "libero-synthetic"
    write_dataset(dataset, synthetic_episodes(2, seed=2, image_size=64, lengths=(20, 24)), fmt.libero_features(64))
    out = tmp_path / "sweep.json"
    args = ["recompute-sweep", str(GR00T_SCENARIO), "--target", "cpu", "--dataset", str(dataset), "--rung"]
    code = main([*args, "community", "--timed-steps", "2", "--out", str(out)])
    printed = capsys.readouterr()
    assert code == 0, printed.err
    result = load_result(out)
    rungs = {r["name"]: r for r in result["rungs"]}
    assert result["kind"] == "recompute-sweep" and result["sweep_base_rung"] == "community"
    assert all(r["status"] == "ok" and r["loss_parity"]["pass"] for r in rungs.values())
    assert all(r["losses"] == rungs[BASE]["losses"] for r in rungs.values())
    assert rungs["recompute-dit-blocks"]["applied"]["recomputed"] == [f"dit.blocks.{i}" for i in range(4)]
    assert [row["patterns"] for row in sweep_rows(result)] == [["vision.layers.*"], ["llm.layers.*"], ["dit.blocks.*"]]
    assert "ms per GiB saved" in printed.out and "dit-blocks  dit.blocks.*" in printed.out


@pytest.mark.parametrize(
    "scenario, mode, message",
    [
        (
            GR00T_SCENARIO,
            "backbone",
            "--compile: expected one of gr00t's compile modes (none, per-block), got 'backbone'",
        ),
        (
            SCENARIO.path,
            "per-block",
            "--compile: expected one of pi05's compile modes (none, backbone, per-layer), got 'per-block'",
        ),
    ],
)
def test_the_compile_modes_are_the_familys(scenario, mode, message, capsys, tmp_path):
    out = tmp_path / "never.json"
    assert main(["recompute-sweep", str(scenario), "--target", "cpu", "--compile", mode, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"vlabench: error: {message}\n" and not out.exists()


def test_a_family_without_the_knobs_is_one_line():
    """A family that declares no recompute groups, or no compile option, refuses the sweep or --compile by name."""
    from harness.commands.recompute import _sweep_knobs_error
    from models import ModelFamily

    class Bare(ModelFamily):
        name = "bare"

    class GroupsOnly(Bare):
        def recompute_groups(self):
            return {"all": ("*",)}

    assert _sweep_knobs_error(Bare(), SCENARIO, None) == (
        f"{SCENARIO.path}: model: expected a family with module groups to recompute, got bare (none)"
    )
    assert _sweep_knobs_error(GroupsOnly(), SCENARIO, None) is None
    assert _sweep_knobs_error(GroupsOnly(), SCENARIO, "none") == (
        "--compile: expected no compile mode (bare has no compile option), got 'none'"
    )
