"""The kernel floor: the GEMMs of a training step with their exact shapes (forward, and backward derived from
them), timed at the vendor library's speed, with the attention calls, summed into samples/s; a run records it
and each rung's share of it."""

from pathlib import Path

import pytest

from harness.cli import main
from harness.floor import floor_share, fp8_eligible
from harness.results import load_result
from models.floor import training_gemms
from models.pi05 import FAMILY, FULL
from models.pi05.flops import floor_ops, forward_flops_per_sample
from models.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = Workload(batch_size=32, cameras=2, text_tokens=200, action_horizon=50)


def test_training_gemms_are_forward_plus_both_gradients():
    forward, _ = floor_ops(FULL, **{"batch": 32, "cameras": 2, "text_tokens": 200, "action_horizon": 50})
    gemms = training_gemms(forward)
    for layer in forward:
        passes = {step: (m, n, k) for g, step, m, n, k in gemms if g is layer}
        assert passes["fwd"] == (layer.m, layer.n, layer.k)
        assert passes.get("dX") == ((layer.m, layer.k, layer.n) if layer.input_grad else None)
        assert passes["dW"] == (layer.n, layer.k, layer.m)  # every Pi0.5 weight trains
    # the GEMM FLOPs are the analytic linear FLOPs of the step: 3x forward, less the gradients of raw inputs
    total = sum(2 * m * n * k * g.count for g, _, m, n, k in gemms) / 32
    fwd = forward_flops_per_sample(FULL, 2, 200, 50)
    siglip_attention = 2 * 2 * FULL.vision.layers * 2 * FULL.vision.tokens**2 * FULL.vision.width  # FLOPs, 2 cameras
    linear_fwd = sum(fwd.values()) - fwd["attention"] - siglip_attention
    raw_inputs = 2 * (2 * 256 * 3 * 14 * 14 * 1152 + 50 * 32 * 1024)  # patch embedding and action-in dX
    assert total == pytest.approx(3 * linear_fwd - raw_inputs, rel=1e-6)


def test_fp8_follows_the_conversion_rule():
    forward, _ = floor_ops(FULL, 32, 2, 200, 50)
    by_name = {g.name: fp8_eligible(g) for g in forward}
    assert by_name["gemma gate/up"] and by_name["gemma q"] and by_name["siglip fc1"]
    assert not by_name["gemma kv"]  # 256 wide: too thin for FP8 to pay
    assert not by_name["action in"] and not by_name["action out"]


def test_share_of_the_floor_uses_the_rungs_precision():
    """The FP8 floor for a rung whose linears train in FP8, as the model family reads the rung's options."""
    from harness.report import floor_note
    from models import get_family

    floor = {"dtype": "bf16", "totals": {"bf16": {"samples_per_s": 60.0}, "fp8": {"samples_per_s": 100.0}}}
    assert floor_share({"status": "ok", "samples_per_s": 45.0}, floor, fp8_linears=False) == 0.75
    assert floor_share({"status": "ok", "samples_per_s": 50.0}, floor, fp8_linears=True) == 0.5
    assert floor_share({"status": "error"}, floor, False) is None and floor_share({"status": "ok"}, None, False) is None
    for family in ("pi05", "gr00t"):
        knobs = get_family(family).knobs({"linear": "fp8"})
        assert floor_note({"status": "ok", "samples_per_s": 50.0}, {"floor": floor}, knobs) == "50% of the kernel floor"


SCENARIO = """
name: floor-test
model: pi05
workload: {batch_size: 2, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 1, timed_steps: 2,
           seed: 0, dtype: fp32}
ladder:
  - {name: community, options: {camera_slots: auto, recompute: none}}
targets:
  cpu: {model_size: tiny}
"""


@pytest.mark.slow
def test_a_run_records_the_floor_and_the_table_shows_each_rungs_share(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    assert main(["run", str(scenario), "--target", "cpu", "--floor", "--out", str(tmp_path / "r.json")]) == 0
    result = load_result(tmp_path / "r.json")
    totals = result["floor"]["totals"]["fp32"]
    assert totals["step_s"] == pytest.approx(totals["gemm_s"] + totals["attention_s"])
    assert totals["samples_per_s"] == pytest.approx(2 / totals["step_s"])
    assert {a["name"] for a in result["floor"]["attention"]} == {"siglip attention", "joint attention"}
    out = capsys.readouterr().out
    assert "kernel floor fp32" in out and "of the kernel floor" in out
    assert main(["floor", str(scenario), "--target", "cpu", "--out", str(tmp_path / "f.json")]) == 0
    assert load_result(tmp_path / "f.json")["kind"] == "floor" and "GEMMs ms" in capsys.readouterr().out


def test_a_family_without_a_floor_says_so():
    from models import ModelFamily

    with pytest.raises(NotImplementedError, match="no kernel floor for x yet"):
        type("X", (ModelFamily,), {"name": "x"})().floor_ops("tiny", WORKLOAD)
    assert FAMILY.floor_ops("full", WORKLOAD)[0]


@pytest.mark.slow
def test_profile_reports_where_a_rungs_step_goes(tmp_path, capsys):
    import json

    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "p.json"
    assert (
        main(["profile", str(scenario), "--rung", "community", "--target", "cpu", "--steps", "2", "--out", str(out)])
        == 0
    )
    profile = json.loads(out.read_text())
    assert profile["steps"] == 2 and profile["wall_s"] > 0 and profile["data_wait_s"] == 0
    assert "ms per step (median of 2)" in capsys.readouterr().out
    assert main(["profile", str(scenario), "--rung", "nope", "--target", "cpu"]) == 2
