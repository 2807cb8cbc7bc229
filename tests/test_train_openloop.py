"""Open-loop replay: a checkpoint trained by `vlabench train`, loaded by the evaluation's policy as `vlabench eval`
builds it and shown dataset frames as the LIBERO simulator presents them (raw 256x256 camera images, rotated and
resized with padding by the protocol, the state the environment gives), sees the training batch's prompt tokens
and its pixels within one uint8 level, and on those pixels reproduces the training model's predictions (the same
weights and flow-matching noise); with the state in the prompt (padded to the workload's state_pad, 8 here, which
the checkpoint's max_state_dim hands to the evaluation) and without it (openpi's pi05_libero); with the byte
tokenizer, and with the hashed word pieces (`--tokenizer pieces`), which the checkpoint names for the evaluation."""

import json

import numpy as np
import pytest
import torch

from harness.cli import main

SCENARIO = """\
name: test-openloop
model: pi05
workload: {batch_size: 4, cameras: 2, text_tokens: 64, action_horizon: 10, warmup_steps: 1, timed_steps: 1,
           seed: 0, dtype: fp32, model_size: tiny, robot_state: ROBOT_STATE, state_pad: 8}
ladder:
  - name: community
    options: {camera_slots: 3, attention: eager, recompute: nested-full, compile: none}
targets:
  cpu: {compile_backend: aot_eager}
"""


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the CI machine's 2 cores are shared
    yield
    torch.set_num_threads(threads)


@pytest.mark.slow
@pytest.mark.parametrize(
    "robot_state, tokenizer", [(True, "pieces"), (False, "bytes")], ids=["state-in-prompt-pieces", "no-state-bytes"]
)
def test_eval_policy_reproduces_the_training_models_predictions_on_training_frames(tmp_path, robot_state, tokenizer):
    from harness.data.dataset import LeRobotV3Dataset
    from harness.data.lerobot_format import LIBERO_CAMERAS
    from harness.eval.policies import make_policy
    from harness.eval.protocol import demonstration_observation
    from models import get_family
    from models.policy import snap_to_values
    from models.workload import Workload

    data, out, scenario = tmp_path / "ds", tmp_path / "run", tmp_path / "s.yaml"
    scenario.write_text(SCENARIO.replace("ROBOT_STATE", str(robot_state).lower()))
    # 256x256 frames, as LIBERO renders and the demonstrations store them (the evaluation resizes them to 224)
    assert main(["make-dataset", "--source", "synthetic", "--episodes", "1", "--out", str(data)]) == 0
    train = ["train", str(scenario), "--rung", "community", "--dataset", str(data), "--steps", "60", "--out", str(out)]
    fast = ["--target", "cpu", "--loader-workers", "0", "--warmup-steps", "5", "--peak-lr", "3e-3"]
    fast += ["--ema-decay", "0.9"]
    fast += ["--tokenizer", tokenizer]
    assert main([*train, *fast]) == 0
    checkpoint = out / "checkpoints" / "step-00000060"

    # the evaluation's policy, as `vlabench eval --policy pi05 --checkpoint` builds it on a CPU
    policy = make_policy("pi05", str(checkpoint), device="cpu", dtype="fp32", model_size="full", seed=7)
    # openpi's pi05_libero trains without the state in the prompt: the checkpoint tells the evaluation so
    assert policy.describe()["state_in_prompt"] is robot_state
    assert policy.meta.state_pad == 8  # the workload's: the checkpoint's max_state_dim
    # the synthetic demonstrations' gripper is -1 or 1: the policy snaps its gripper output there
    assert policy.meta.action_values == {6: [-1.0, 1.0]}
    assert policy.processor.tokenizer.name == tokenizer  # the checkpoint's config.json names it
    # the training model: the rung built as training builds it, with the checkpoint's weights, and its processor
    run = json.loads((checkpoint / "train_state.json").read_text())["run"]
    record, family = run["workload"], get_family("pi05")
    workload = Workload.from_record(record)
    model = family.build("tiny", family.parse_options(run["options"]), workload, "cpu", torch.float32, 0).model
    model.load_state_dict(family.import_weights(model, family.read_weights(str(checkpoint))[0]), strict=True)
    model.eval()
    dataset = LeRobotV3Dataset(data, action_horizon=workload.action_horizon, cameras=list(LIBERO_CAMERAS))
    processor = family.data_processor("tiny", workload, dataset.stats, record["data"]["tokenizer"])

    differences, spread, pixels = [], [], []
    for i in (0, 25, 50, 75):
        sample = dataset[i]
        # through the protocol's own observation, the images rotated back into the simulator's first
        observation = {**demonstration_observation(sample, LIBERO_CAMERAS), "noise_seed": 100 + i}
        evaluated = policy.infer([observation])[0]

        batch = processor.training_batch([sample], tuple(LIBERO_CAMERAS), torch.Generator().manual_seed(0))
        tokens = batch["tokens"][0][batch["token_masks"][0]].tolist()
        if tokenizer == "bytes":
            prompt = bytes(t - 3 for t in tokens[1:]).decode()
            assert ("State:" in prompt) is robot_state, prompt
        else:  # a word with its leading space, digits alone: under half the prompt's bytes
            state = np.asarray(sample["observation.state"], dtype=np.float32)
            in_bytes = family.data_processor("tiny", workload, dataset.stats, "bytes").prompt_tokens(
                sample["task"], state
            )
            assert len(tokens) < len(in_bytes) / 2, (len(tokens), len(in_bytes))
        shown = policy.processor.observation_batch([observation])
        assert torch.equal(shown["tokens"], batch["tokens"]) and torch.equal(shown["token_masks"], batch["token_masks"])
        pixels.append((shown["images"] - batch["images"]).abs().max().item())
        noise = torch.randn((1, workload.action_horizon, 32), generator=torch.Generator().manual_seed(100 + i))
        trained = processor.actions_out(model.sample_actions(batch, noise=noise, steps=10)[0].numpy(), 7)
        on_shown = {**batch, "images": shown["images"]}  # the training model on the pixels the evaluation showed
        trained_on_shown = processor.actions_out(model.sample_actions(on_shown, noise=noise, steps=10)[0].numpy(), 7)
        trained_on_shown = snap_to_values(trained_on_shown, {6: [-1.0, 1.0]})
        differences.append(np.abs(evaluated - trained_on_shown).max())
        spread.append(np.abs(trained - trained.mean(0)).max())
    # the predictions depend on the frame (a mismatch would not hide behind a constant output)...
    assert min(spread) > 0.05, spread
    # ...the evaluation shows the model the training pixels within one uint8 level (the protocol's resize: PIL and
    # torch's antialiased bilinear round apart; a resize that differs, as training's before the presented-frames
    # fix, is off by many levels)...
    assert max(pixels) <= 1 / 127.5 + 1e-6, pixels
    # ...and on the same pixels, tokens and noise its actions are the training model's, to float rounding
    assert max(differences) < 1e-4, differences
