"""recompute-sweep: the configurations it builds and the cost arithmetic of its table."""

from pathlib import Path

import pytest
import torch

from harness.scenario import load_scenario
from harness.sweep import BASE, default_rung, sweep_rows, sweep_scenario, sweep_table
from models.fp8 import fp8_candidates
from models.pi05 import FAMILY, FULL, Pi05Model
from models.pi05.techniques import FP8_SKIP, FP8_SKIP_EAGER_VISION

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
    model = FAMILY.build("tiny", FAMILY.parse_options(base), {"action_horizon": 4}, "cpu", torch.float32, 0).model
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
        "workload": {"model_size": "tiny", "batch_size": 2},
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


def test_fp8_converts_only_the_compiled_backbone():
    with torch.device("meta"):
        model = Pi05Model(FULL)
    chosen = fp8_candidates(model, skip=FP8_SKIP + FP8_SKIP_EAGER_VISION)
    assert chosen and all(name.startswith("backbone.layers.") for name in chosen)
    assert len(chosen) == 18 * 10  # q, o, gate, up, down of both streams (K/V are too thin)
