"""Bounds before work (issue 52, item 5): sizes are held to stated bounds, a target the scenario does not list is
costed before a rung builds, a train-ladder checks the simulator and its --resume folder before it trains, and a
broken dataset is one line before any training or timing starts. docs/reliability.md lists each guarantee with
the test that shows it."""

from pathlib import Path

import pytest

from harness.cli import main

SCENARIO = """\
name: bounds
model: pi05
workload: {{batch_size: {batch_size}, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 1,
           timed_steps: 2, seed: 0, dtype: fp32}}
ladder:
  - {{name: community, options: {{camera_slots: 3}}}}
targets:
  {targets}
"""


def scenario_file(folder: Path, batch_size=1, targets="cpu: {model_size: tiny}") -> Path:
    path = folder / "s.yaml"
    path.write_text(SCENARIO.format(batch_size=batch_size, targets=targets))
    return path


def one_line_error(capsys, args) -> str:
    code = main([str(a) for a in args])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("vlabench: error: ") and "Traceback" not in err, err
    return err


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


# ---- sizes within stated bounds ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "batch_size, targets, key, expected",
    [
        (10**12, "cpu: {model_size: tiny}", "workload.batch_size", "an integer 1..65536"),
        (1, "cpu: {model_size: tiny, timed_steps: 100000000000000000000000}", "targets.cpu.timed_steps",
         "an integer 1..100000"),
        (1, "cpu: {model_size: tiny, text_tokens: 10000000}", "targets.cpu.text_tokens", "an integer 0..8192"),
        (1, "cpu: {model_size: tiny, cameras: 1000}", "targets.cpu.cameras", "an integer 1..16"),
    ],
)  # fmt: skip
def test_a_scenario_size_beyond_its_bound_is_refused_before_anything_runs(
    tmp_path, capsys, batch_size, targets, key, expected
):
    scenario = scenario_file(tmp_path, batch_size, targets)
    before = files_under(tmp_path)
    err = one_line_error(capsys, ["run", scenario, "--target", "cpu", "--out", tmp_path / "r.json"])
    assert f"{scenario}: {key}: expected {expected}, got integer" in err
    assert files_under(tmp_path) == before


@pytest.mark.parametrize(
    "args, expected",
    [
        (["train", "{s}", "--rung", "community", "--dataset", "{d}", "--steps", "1", "--batch-size", "1000000000000"],
         "--batch-size: expected an integer 1..65536, got integer 1000000000000"),
        (["train", "{s}", "--rung", "community", "--dataset", "{d}", "--steps", "1", "--seed", str(2**40)],
         f"--seed: expected an integer 0..4294967295, got integer {2**40}"),
        (["recompute-sweep", "{s}", "--timed-steps", "1000000"],
         "--timed-steps: expected an integer 1..100000, got integer 1000000"),
        (["profile", "{s}", "--rung", "community", "--batch-size", "70000"],
         "--batch-size: expected an integer 1..65536, got integer 70000"),
    ],
)  # fmt: skip
def test_a_command_line_size_beyond_the_workload_bound_is_refused(tmp_path, capsys, args, expected):
    scenario = scenario_file(tmp_path)
    args = [a.format(s=scenario, d=tmp_path / "no-dataset") for a in args]
    err = one_line_error(capsys, args)
    assert err == f"vlabench: error: {expected}"
