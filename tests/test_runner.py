"""The runner end to end on the CPU: real rung subprocesses, failure recording, result contract, CLI."""

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.ladder.runner import loss_parity, run_rung_process, run_scenario
from harness.machine.hardware import get_target
from harness.results import load_result
from harness.scenario import load_scenario
from harness.spec import scenario_spec
from harness.stats.batch_sizes import BatchSizes

SCENARIO = """
name: runner-test
model: pi05
workload: {batch_size: 1, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 1, timed_steps: 2,
           seed: 0, dtype: fp32}
ladder:
  - {name: community, options: {camera_slots: 3, recompute: nested-full}}
  - {name: too-few-slots, options: {camera_slots: 1}}
  - {name: needs-fp8, options: {camera_slots: 3}, requires: [fp8]}
  - {name: prune, options: {camera_slots: auto}}
targets:
  cpu: {model_size: tiny}
"""


@pytest.fixture(scope="module")
def ladder_result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("run")
    path = tmp / "s.yaml"
    path.write_text(SCENARIO)
    out = tmp / "result.json"
    lines = []
    result = run_scenario(load_scenario(path), get_target("cpu"), out, ["test"], progress=lines.append)
    return result, out, lines


@pytest.mark.slow  # four rung processes (the module's ladder)
def test_failing_rung_is_recorded_and_the_ladder_goes_on(ladder_result):
    result, _, lines = ladder_result
    status = {r["name"]: r["status"] for r in result["rungs"]}
    assert status == {"community": "ok", "too-few-slots": "error", "needs-fp8": "unsupported", "prune": "ok"}
    bad = result["rungs"][1]
    assert "2 cameras but the model has only 1 slots" in bad["reason"] and "Traceback" in bad["traceback"]
    assert "lacks fp8" in result["rungs"][2]["reason"]
    assert any("step 2/2" in line for line in lines)  # progress streamed from the rung process


@pytest.mark.slow  # four rung processes (the module's ladder)
def test_result_file_round_trips_and_matches_contract(ladder_result):
    result, out, _ = ladder_result
    loaded = load_result(out)
    assert loaded == json.loads(Path(out).read_text()) == result
    assert loaded["schema"] == "vlabench.result/1"
    assert loaded["scenario"]["name"] == "runner-test" and len(loaded["scenario"]["sha256"]) == 64
    assert loaded["target"]["name"] == "cpu" and loaded["target"]["backend"] == "cpu"
    for key in ("git_sha", "dirty", "python", "torch", "created_at", "command"):
        assert key in loaded["provenance"]
    assert loaded["workload"]["model_size"] == "tiny" and loaded["workload"]["flops_per_sample"] > 0
    ok = loaded["rungs"][0]
    assert len(ok["step_times_s"]) == 2 and len(ok["losses"]) == 2 and all(t > 0 for t in ok["step_times_s"])
    assert ok["samples_per_s_p10"] <= ok["samples_per_s"] <= ok["samples_per_s_p90"]
    assert ok["peak_memory_gib"] > 0 and ok["mfu"] is None  # the cpu target has no published peak


@pytest.mark.slow  # four rung processes (the module's ladder)
def test_pruning_keeps_the_loss_exactly_in_fp32(ladder_result):
    result, _, _ = ladder_result
    prune = result["rungs"][3]
    assert prune["loss_parity"]["pass"] and prune["loss_parity"]["tolerance"] == 1e-5
    assert prune["loss_parity"]["max_rel_diff"] <= 1e-5
    assert prune["speedup_vs_previous"] == pytest.approx(prune["samples_per_s"] / result["rungs"][0]["samples_per_s"])


@pytest.mark.slow  # four rung processes (the module's ladder)
def test_append_replaces_a_rung_and_keeps_the_others(ladder_result, tmp_path):
    result, out, _ = ladder_result
    copy = tmp_path / "r.json"
    floor = {"dtype": "fp32", "totals": {"fp32": {"samples_per_s": 123.0}}}  # as an earlier part's --floor left it
    copy.write_text(json.dumps({**json.loads(Path(out).read_text()), "floor": floor}))
    scenario = load_scenario(Path(out).parent / "s.yaml")
    merged = run_scenario(
        scenario, get_target("cpu"), copy, ["test"], rung_names=["needs-fp8"], append=True, progress=lambda _: None
    )
    assert [r["name"] for r in merged["rungs"]] == [r["name"] for r in result["rungs"]]
    assert merged["rungs"][0]["losses"] == result["rungs"][0]["losses"]
    assert merged["provenance_earlier"][0] == result["provenance"]
    assert merged["floor"] == floor  # a part run without --floor keeps the floor measured earlier


def test_dead_and_timed_out_rung_processes_are_errors(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    scenario = load_scenario(path)
    spec = scenario_spec(scenario, get_target("cpu"), scenario.ladder[0])
    # an interpreter that cannot start never writes its record
    dead = run_rung_process(spec, lambda _: None, None, env={"PYTHONHASHSEED": "not-a-number"})
    assert dead["status"] == "error" and "exit code" in dead["reason"] and dead["output_tail"]
    slow = run_rung_process(spec, lambda _: None, 0.01)
    assert slow["status"] == "error" and slow["reason"].startswith("timed out")


def test_loss_parity_values():
    assert loss_parity([1.0, 2.0], [1.0, 2.02], 0.02, "")["pass"]
    p = loss_parity([1.0, 2.1], [1.0, 2.0], 0.02, "")
    assert not p["pass"] and p["max_rel_diff"] == pytest.approx(0.05)
    assert not loss_parity([1.0], [1.0, 2.0], 0.02, "")["pass"]


def test_batch_sizes_are_derived_once_from_the_micro_batch(tmp_path):
    """The command line's batch is per optimizer step; the spec's workload holds the micro-batch it splits into,
    and BatchSizes names each size; a result file's are read back the same way (ladder: nproc, training:
    grad_accum)."""
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    spec = scenario_spec(load_scenario(path), get_target("cpu"), batch_size=12, grad_accum=4)
    assert spec.workload.batch_size == 3 and spec.workload_record()["batch_size"] == 3
    assert spec.batches() == BatchSizes(micro=3, per_step=12, global_=12)
    assert spec.batches(nproc=2) == BatchSizes(micro=3, per_step=12, global_=24)
    ddp = load_result(Path(__file__).resolve().parent.parent / "results" / "h200" / "gr00t-loongforge-ddp2.json")
    assert BatchSizes.of_result(ddp) == BatchSizes(16, 16, 32)
    train = {"workload": {"batch_size": 32}, "train": {"grad_accum": 8, "batch_per_step": 256}}
    assert BatchSizes.of_result(train) == BatchSizes(32, 256, 256)


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "missing.yaml"], "missing.yaml: expected an existing scenario file"),
        (["run", "scenarios/pi05-loongforge.yaml", "--rungs", "nope"], "--rungs: expected rung names"),
        (["run", "scenarios/pi05-loongforge.yaml", "--target", "tpu"], "--target: expected one of"),
    ],
)
def test_cli_user_errors_exit_2_with_one_line(args, message, capsys, monkeypatch):
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_readme_results_section_is_current():
    from harness.report.readme import update_readme

    assert not update_readme(Path(__file__).resolve().parent.parent, check=True), "run `vlabench readme`"


@pytest.mark.slow  # six rung processes
def test_repeats_run_each_rung_in_fresh_processes_in_rotated_rounds(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    out, lines = tmp_path / "r.json", []
    rungs = ["community", "needs-fp8", "prune"]
    run_scenario(load_scenario(path), get_target("cpu"), out, ["test"], rungs, progress=lines.append, repeats=2)
    started = [line.split("] ")[1].split(" on ")[0] for line in lines if line.startswith("[repeat")]
    assert started == ["community", "needs-fp8", "prune", "needs-fp8", "prune", "community"]  # rotated
    result = load_result(out)  # the cross-checks on load hold for the combined records
    assert result["repeats"] == 2
    by_name = {r["name"]: r for r in result["rungs"]}
    community, prune = by_name["community"], by_name["prune"]
    for rec in (community, prune):
        assert [r["repeat"] for r in rec["repeats"]] == [0, 1]
        rates = sorted(r["samples_per_s"] for r in rec["repeats"])
        assert rec["samples_per_s"] == pytest.approx(sum(rates) / 2)  # the median of two
        low, high = rec["samples_per_s_interval"]
        assert low < rec["samples_per_s"] < high
        assert rec["step_times_s"] == [t for r in rec["repeats"] for t in r["step_times_s"]]
        assert len({r["measured"]["run_id"] for r in rec["repeats"]}) == 1
    assert by_name["needs-fp8"]["status"] == "unsupported"
    assert prune["loss_parity"]["pass"]
    assert main(["show", str(out)]) == 0


def test_after_a_run_the_output_says_what_the_figures_are_and_what_to_do_next():
    from harness.commands.run import next_steps

    cpu = next_steps("runs/x.json", "cpu", {"target": {"backend": "cpu"}})
    assert "functional checks" in cpu and "vlabench record runs/x.json" in cpu and "vlabench gate" in cpu
    gpu = next_steps("runs/x.json", "h100", {"target": {"backend": "cuda"}})
    assert "functional checks" not in gpu and gpu.startswith("next: vlabench show runs/x.json")
