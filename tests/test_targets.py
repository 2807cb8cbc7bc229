"""A target the scenario's `targets:` does not list: a known one runs the scenario's workload unchanged, says so in
one line and records it in the result; an unknown one is a one-line error."""

import pytest

from harness.arguments import resolve_target
from harness.cli import main
from harness.ladder import rung as rung_module
from harness.ladder import runner
from harness.machine import hardware
from harness.machine.hardware import get_target
from harness.scenario import load_scenario

SCENARIO = """
name: unlisted-test
model: pi05
workload: {batch_size: 1, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 1, timed_steps: 1,
           seed: 0, dtype: fp32, model_size: tiny}
ladder:
  - {name: community, options: {camera_slots: auto, recompute: none}}
targets:
  h200: {batch_size: 8}
"""


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return load_scenario(path)


def test_a_named_unlisted_target_runs_the_workload_unchanged_and_says_so(scenario, capsys):
    target, error = resolve_target(scenario, "cpu")
    assert error is None and target is get_target("cpu")
    out = capsys.readouterr().out.splitlines()
    assert out == [
        f"target: cpu is not listed in {scenario.path} (targets: h200): running the scenario's workload unchanged"
    ]
    assert scenario.workload_for("cpu") == scenario.workload
    assert scenario.workload_for("h200").batch_size == 8


def test_an_auto_detected_unlisted_target_is_taken_too(scenario, capsys, monkeypatch):
    monkeypatch.setattr("harness.arguments.detect_target", lambda: get_target("cuda"))
    target, error = resolve_target(scenario, None)
    assert (target.name, error) == ("cuda", None)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "target: cuda (auto-detected; --target to choose)"
    assert out[1].startswith("target: cuda is not listed in ") and len(out) == 2


def test_a_listed_target_says_nothing_more(scenario, capsys):
    assert resolve_target(scenario, "h200") == (get_target("h200"), None)
    assert capsys.readouterr().out == ""


def test_an_unknown_target_is_one_line(scenario, tmp_path, capsys):
    target, error = resolve_target(scenario, "tpu")
    assert target is None and error == f"--target: expected one of {', '.join(hardware.TARGETS)}, got 'tpu'"
    path = tmp_path / "bad.yaml"
    path.write_text(SCENARIO.replace("h200:", "tpu-v9:"))
    assert main(["run", str(path), "--out", str(tmp_path / "r.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert err[0].endswith(
        f"{path}: targets.tpu-v9: expected a known target ({', '.join(hardware.TARGETS)}), got unknown target 'tpu-v9'"
    )


def test_the_result_records_an_unlisted_target(scenario, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "run_rung_process", lambda spec, *args, **kwargs: rung_module.run(spec))
    result = runner.run_scenario(scenario, get_target("cpu"), tmp_path / "r.json", ["test"], progress=lambda line: None)
    assert result["target"]["name"] == "cpu" and result["target"]["listed_in_scenario"] is False
    assert result["workload"]["batch_size"] == 1  # the scenario's, not h200's override
    assert [r["status"] for r in result["rungs"]] == ["ok"], result["rungs"][0].get("reason")
