"""`vlabench train` on the CPU with the tiny Pi0.5 and a small synthetic dataset: checkpoints and an exact
--resume, the convergence check catching the test sabotage that the ladder's loss parity passes, and the whole
path train -> eval -> gate. One-line refusals of bad input are quick and not marked slow."""

import json
from pathlib import Path

import pytest
from sim_ready import sim_unready

from harness.cli import main

REPO = Path(__file__).resolve().parent.parent
SCENARIO = """\
name: test-train
model: pi05
workload: {batch_size: 4, cameras: 2, text_tokens: 64, action_horizon: 10, warmup_steps: 5, timed_steps: 20,
           seed: 0, dtype: fp32, model_size: tiny}
ladder:
  - name: community
    options: {camera_slots: 3, attention: eager, recompute: nested-full, compile: none}
  - name: prune-empty-cameras
    options: {camera_slots: auto, recompute: none}
targets:
  cpu: {compile_backend: aot_eager}
"""
# a short schedule (openpi's warms up for 10,000 steps): these runs must learn in a few hundred
FAST = ["--target", "cpu", "--loader-workers", "0", "--warmup-steps", "20", "--peak-lr", "1e-3"]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> str:
    out = tmp_path_factory.mktemp("data") / "ds"
    argv = ["make-dataset", "--source", "synthetic", "--episodes", "3", "--image-size", "64", "--out", str(out)]
    assert main(argv) == 0
    return str(out)


@pytest.fixture(scope="module")
def scenario(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("scenario") / "test-train.yaml"
    path.write_text(SCENARIO)
    return str(path)


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the CI machine's 2 cores are shared: oversubscribed threads only spin
    yield
    torch.set_num_threads(threads)


def train(scenario: str, dataset: str, out: Path, steps: int, *extra: str) -> int:
    argv = ["train", scenario, "--dataset", dataset, "--steps", str(steps), "--out", str(out), *FAST, *extra]
    return main(argv if "--rung" in extra else [*argv, "--rung", "community"])


def losses(out: Path) -> list[float]:
    return json.loads((out / "train.json").read_text())["train"]["losses"]


@pytest.mark.slow
def test_checkpoints_load_and_resume_continues_the_run_exactly(scenario, dataset, tmp_path, capsys):
    from safetensors.torch import load_file

    from harness.results import load_result

    a, b = tmp_path / "a", tmp_path / "b"
    ema = ["--ema-decay", "0.9", "--checkpoint-every", "3"]
    assert train(scenario, dataset, a, 6, *ema) == 0
    assert train(scenario, dataset, a, 10, *ema, "--resume") == 0  # continues from step 6
    assert train(scenario, dataset, b, 10, *ema) == 0  # uninterrupted
    assert losses(a) == losses(b) and len(losses(a)) == 10
    for name in ("model.safetensors", "train_state.safetensors"):  # EMA policy, trained weights, AdamW state
        x, y = (load_file(str(out / "checkpoints" / "step-00000010" / name)) for out in (a, b))
        assert x.keys() == y.keys() and all((x[k] == y[k]).all() for k in x), name
    assert [p.name for p in sorted((a / "checkpoints").iterdir())] == ["step-00000009", "step-00000010"]  # keep 2
    result = load_result(a / "train.json")
    record = result["train"]
    assert result["kind"] == "train" and result["rungs"] == [] and [p["start_step"] for p in record["parts"]] == [0, 6]
    assert all(p["gpu_state"] is None for p in record["parts"])  # no GPU to sample here
    assert record["steps_done"] == 10 and record["final_loss"] == pytest.approx(sum(losses(a)) / 10)
    assert record["recipe_changed"]["ema_decay"] == [0.999, 0.9] and record["samples_per_s"] > 0
    state = json.loads((a / "checkpoints" / "step-00000010" / "train_state.json").read_text())
    assert state["step"] == 10 and state["run"]["rung"] == "community"
    capsys.readouterr()
    assert main(["show", str(a / "train.json")]) == 0
    shown = capsys.readouterr().out
    assert "10/10" in shown and "final loss (smoothed)" in shown and "differs from openpi" in shown


@pytest.mark.slow
def test_convergence_check_catches_a_sabotage_that_the_ladders_loss_parity_passes(
    scenario, dataset, tmp_path, monkeypatch
):
    """The sabotage freezes the flow-time conditioning: 20 ladder steps stay within the strictest parity tolerance
    (1e-5, fp32 and identical math), but after 120 training steps the loss is far above a clean run's (+68%)."""
    from harness.ladder.rung import run
    from harness.ladder.runner import loss_parity
    from harness.ladder.sabotage import SABOTAGE_ENV
    from harness.machine.hardware import get_target
    from harness.results import load_result
    from harness.scenario import load_scenario
    from harness.spec import scenario_spec
    from harness.train.convergence import check_convergence
    from models import get_family

    sc = load_scenario(scenario)
    family, rung = get_family("pi05"), sc.ladder[0]
    spec = scenario_spec(sc, get_target("cpu"), rung)
    clean = run(spec)
    monkeypatch.setenv(SABOTAGE_ENV, "freeze-time")
    sabotaged = run(spec)
    assert clean["status"] == sabotaged["status"] == "ok" and len(clean["losses"]) == 20
    assert sabotaged["test_train_sabotage"] == "freeze-time" and "test_train_sabotage" not in clean
    opts = family.parse_options(rung.cumulative)
    parity = loss_parity(sabotaged["losses"], clean["losses"], *family.parity_tolerance(opts, opts, "fp32"))
    assert parity["pass"] and parity["tolerance"] == 1e-5, parity

    assert train(scenario, dataset, tmp_path / "sabotaged", 120, "--ema-decay", "none") == 0
    monkeypatch.delenv(SABOTAGE_ENV)
    assert train(scenario, dataset, tmp_path / "clean", 120, "--ema-decay", "none") == 0
    other = ["--rung", "prune-empty-cameras", "--ema-decay", "none"]  # another rung, the same math
    assert train(scenario, dataset, tmp_path / "other", 120, *other) == 0
    reference = load_result(tmp_path / "clean" / "train.json")
    caught = check_convergence(load_result(tmp_path / "sabotaged" / "train.json"), reference)
    assert not caught.passed and caught.rel_diff > 2 * caught.tolerance, caught
    assert check_convergence(load_result(tmp_path / "other" / "train.json"), reference).passed
    sabotaged_result = load_result(tmp_path / "sabotaged" / "train.json")
    assert sabotaged_result["train"]["test_train_sabotage"]["mode"] == "freeze-time"
    args = ["train-check", "--reference", str(tmp_path / "clean" / "train.json")]
    assert main([*args, str(tmp_path / "other" / "train.json")]) == 0
    assert main([*args, str(tmp_path / "sabotaged" / "train.json")]) == 1


@pytest.mark.slow
@pytest.mark.skipif(sim_unready() is not None, reason=str(sim_unready()))
def test_train_then_evaluate_the_checkpoint_in_libero_then_gate_it(tmp_path, capsys):
    """The whole CPU path with the LoongForge scenario's tiny smoke workload: a synthetic dataset (a LIBERO
    demonstration takes minutes per episode on this machine's CPU), a few training steps, the checkpoint in
    `vlabench eval` (one task, two trials), and the success-rate gate of that result against itself."""
    data, out, evaluated = tmp_path / "ds", tmp_path / "run", tmp_path / "eval.json"
    make = ["make-dataset", "--source", "synthetic", "--episodes", "2", "--image-size", "64", "--out", str(data)]
    assert main(make) == 0
    scenario = str(REPO / "scenarios" / "pi05-loongforge.yaml")
    argv = ["train", scenario, "--rung", "community", "--dataset", str(data), "--steps", "4", "--out", str(out)]
    assert main([*argv, "--target", "cpu", "--loader-workers", "0"]) == 0
    checkpoint = out / "checkpoints" / "step-00000004"
    assert (checkpoint / "model.safetensors").exists() and (checkpoint / "normalizer.safetensors").exists()
    ev = ["eval", "--suite", "libero_spatial", "--tasks", "0", "--trials", "2", "--policy", "pi05"]
    ev += ["--checkpoint", str(checkpoint), "--max-steps", "10", "--device", "cpu", "--out", str(evaluated)]
    assert main(ev) == 0
    result = json.loads(evaluated.read_text())
    assert result["kind"] == "eval" and result["policy"]["checkpoint"] == str(checkpoint)
    assert result["policy"]["layout"] == "lerobot" and result["policy"]["tokenizer"] == "bytes"
    assert result["success_rate"]["libero_spatial"]["trials"] == 2
    assert len(result["episodes"]) == 2 and all(e["status"] == "ok" for e in result["episodes"])
    capsys.readouterr()
    # a policy of 4 steps succeeds 0 times in 2: the success check cannot fail, and says so (exit 3)
    assert main(["gate", str(evaluated), "--baseline", str(evaluated)]) == 3
    assert "leaves no room for a drop" in capsys.readouterr().out


@pytest.mark.slow
def test_fine_tuning_starts_from_a_saved_tiny_checkpoint_and_the_evaluation_loads_the_result(
    scenario, dataset, tmp_path
):
    """The tiny path of a fine-tune: a saved checkpoint as --init (the layout `vlabench eval` loads), trained on
    with a learning rate too small to move the weights, saves the weights it started from; its checkpoint loads
    in the evaluation's policy."""
    from safetensors.torch import load_file

    from harness.eval.policies import make_policy

    base, tuned = tmp_path / "base", tmp_path / "tuned"
    assert train(scenario, dataset, base, 4) == 0
    start = base / "checkpoints" / "step-00000004"
    assert train(scenario, dataset, tuned, 3, "--init", str(start), "--peak-lr", "1e-12", "--ema-decay", "none") == 0
    record = json.loads((tuned / "train.json").read_text())["train"]
    assert record["init"] == str(start) and record["steps_done"] == 3
    before = load_file(str(start / "model.safetensors"))
    after = load_file(str(tuned / "checkpoints" / "step-00000003" / "model.safetensors"))
    assert before.keys() == after.keys()
    assert max((before[k].float() - after[k].float()).abs().max().item() for k in before) < 1e-6
    policy = make_policy("pi05", str(tuned / "checkpoints" / "step-00000003"), device="cpu", dtype="fp32", seed=0)
    assert policy.describe()["model_size"] == "tiny"


def test_the_seed_sets_the_training_draws_and_is_recorded(scenario, dataset, tmp_path):
    """--seed replaces the workload's seed: another seed trains other steps (weights, order, draws), the same seed
    the same ones, and the result records the seed it trained with."""
    from harness.results import load_result

    runs = {name: tmp_path / name for name in ("default", "zero", "one")}
    assert train(scenario, dataset, runs["default"], 3) == 0
    assert train(scenario, dataset, runs["zero"], 3, "--seed", "0") == 0
    assert train(scenario, dataset, runs["one"], 3, "--seed", "1") == 0
    assert losses(runs["default"]) == losses(runs["zero"])
    assert all(a != b for a, b in zip(losses(runs["zero"]), losses(runs["one"]), strict=True))
    assert load_result(runs["one"] / "train.json")["workload"]["seed"] == 1
