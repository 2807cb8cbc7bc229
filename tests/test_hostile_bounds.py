"""Bounds before work (issue 52, item 5): sizes are held to stated bounds, a target the scenario does not list is
costed before a rung builds, a train-ladder checks the simulator and its --resume folder before it trains, and a
broken dataset is one line before any training or timing starts. docs/reliability.md lists each guarantee with
the test that shows it."""

import json
import shutil
from pathlib import Path

import pytest
from cli_errors import files_under, one_line_error

import harness.eval.sim
import harness.ladder.memory_plan
from harness.data import lerobot_format as fmt
from harness.data.dataset import preflight
from harness.data.synthetic import synthetic_episodes
from harness.data.writer import write_dataset

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


# ---- a broken dataset is one line before training or timing starts ---------------------------------------------


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("data") / "ds"
    write_dataset(root, synthetic_episodes(2, image_size=32, lengths=(12, 16)), fmt.libero_features(32))
    return root


VIDEO = fmt.VIDEO_PATH.format(video_key=fmt.LIBERO_CAMERAS[1], chunk_index=0, file_index=0)


def video_of(root: Path) -> Path:
    return root / VIDEO


def truncate(path: Path, keep: float) -> None:
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * keep)])


def set_fps(root: Path, fps: int) -> None:
    info = root / fmt.INFO_PATH
    info.write_text(json.dumps({**json.loads(info.read_text()), "fps": fps}))


CORRUPTIONS = {
    # name: (how to break a copy of the dataset, the file the line names, what it says)
    "truncated-parquet": (lambda r: truncate(r / "data/chunk-000/file-000.parquet", 0.5),
                          "data/chunk-000/file-000.parquet", "expected a readable parquet file"),
    "missing-video": (lambda r: video_of(r).unlink(), VIDEO, "got no such file"),
    "empty-video": (lambda r: truncate(video_of(r), 0), VIDEO, "got an empty file"),
    "truncated-video": (lambda r: truncate(video_of(r), 0.6), VIDEO, "expected a frame at"),
    "fps-30-over-10": (lambda r: set_fps(r, 30), "meta/info.json", "meta/info.json: fps: expected 10 (the frame rate of videos/"),
}  # fmt: skip


@pytest.mark.parametrize("command", ["run", "train"])
@pytest.mark.parametrize("corruption", list(CORRUPTIONS))
def test_a_broken_dataset_is_one_line_before_anything_builds(small_dataset, tmp_path, capsys, command, corruption):
    breaks, file, says = CORRUPTIONS[corruption]
    root = tmp_path / "ds"
    shutil.copytree(small_dataset, root)
    breaks(root)
    scenario = scenario_file(tmp_path)
    out = tmp_path / "out"
    args = {
        "run": ["run", scenario, "--target", "cpu", "--dataset", root, "--out", out],
        "train": ["train", scenario, "--target", "cpu", "--rung", "community", "--dataset", root, "--steps", "1",
                  "--out", out],
    }[command]  # fmt: skip
    err = one_line_error(capsys, args)
    assert f"{root / file}" in err and says in err, err
    assert not out.exists()


def test_the_dataset_as_written_passes_the_checks(small_dataset):
    assert preflight(small_dataset).fps == 10


# ---- train-ladder: what it needs after training is checked before it trains ------------------------------------

TRAIN_SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "pi05-libero-train.yaml"


def train_ladder(out: Path, *extra) -> list:
    return ["train-ladder", TRAIN_SCENARIO, "--target", "cpu", "--steps", "1", "--out", out, *extra]


def test_train_ladder_refuses_before_training_when_the_sim_extra_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the CPU target's dataset would be made under runs/ here
    monkeypatch.setattr(harness.eval.sim, "SIM_PACKAGES", (*harness.eval.sim.SIM_PACKAGES, "vlabench_no_such_sim"))
    err = one_line_error(capsys, train_ladder(tmp_path / "tl"))
    assert f"{TRAIN_SCENARIO}: eval: expected the sim extra" in err and "got missing vlabench_no_such_sim" in err
    assert files_under(tmp_path) == set()  # nothing trained, no dataset made, no result


@pytest.mark.parametrize("made", [True, False])
def test_train_ladder_resume_refuses_a_folder_that_is_not_a_ladder(tmp_path, capsys, monkeypatch, made):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "not-a-ladder"
    if made:
        out.mkdir()
        (out / "notes.txt").write_text("mine\n")
    before = files_under(tmp_path)
    err = one_line_error(capsys, train_ladder(out, "--resume"))
    assert "--resume: expected an --out folder of a train-ladder (train-ladder.json) to continue" in err
    assert str(out) in err and files_under(tmp_path) == before


# ---- a target the scenario does not list is costed before a rung builds ----------------------------------------

GPU_ONLY = "h200: {batch_size: 32}"  # the full model in bf16: its weights, gradients and AdamW state alone are 25 GiB


def gpu_only_scenario(folder: Path) -> Path:
    path = scenario_file(folder, targets=GPU_ONLY)
    path.write_text(path.read_text().replace("dtype: fp32", "dtype: bf16"))
    return path


@pytest.mark.parametrize("command", ["run", "train"])
def test_an_unlisted_target_whose_model_cannot_fit_is_refused_before_it_builds(
    small_dataset, tmp_path, capsys, monkeypatch, command
):
    monkeypatch.setattr(
        harness.ladder.memory_plan, "host_available_gib", lambda: 8.0
    )  # a small host, whatever runs this
    scenario, out = gpu_only_scenario(tmp_path), tmp_path / "out"
    args = {
        "run": ["run", scenario, "--target", "cpu", "--out", out],
        "train": ["train", scenario, "--target", "cpu", "--rung", "community", "--dataset", small_dataset,
                  "--steps", "1", "--out", out],
    }[command]  # fmt: skip
    err = one_line_error(capsys, args)
    assert err == (
        f"vlabench: error: {scenario}: targets: expected a target it lists (h200), or a cpu: entry with a small "
        "model_size (e.g. cpu: {model_size: tiny}), got cpu, not listed, whose workload needs 25.0 GiB (the full "
        "model's weights, gradients and AdamW state, before activations), the host has 8.0 available"
    )
    assert not out.exists()


def test_the_estimate_counts_what_the_built_model_holds(tmp_path):
    """state_bytes on the meta device is the weights, gradients and AdamW moments of the model a rung builds."""
    import torch

    import models
    from harness.machine.hardware import get_target
    from harness.scenario import load_scenario
    from harness.spec import scenario_spec

    path = scenario_file(tmp_path, targets="h200: {batch_size: 32}")
    path.write_text(path.read_text().replace("dtype: fp32", "dtype: fp32, model_size: tiny"))
    scenario = load_scenario(path)
    family = models.get_family("pi05")
    spec = scenario_spec(scenario, get_target("cpu"))  # unlisted, tiny: fits any host
    built = family.build("tiny", family.parse_options({}), spec.workload, torch.device("cpu"), torch.float32, 0)
    params = sum(p.numel() for p in built.model.parameters())
    assert family.state_bytes("tiny", spec.workload) == params * 4 * 4  # fp32: weight, gradient, two moments
