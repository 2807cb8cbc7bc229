"""Open-loop replay: a checkpoint trained by `vlabench train`, loaded by the evaluation's policy as `vlabench eval`
builds it and shown dataset frames as the LIBERO simulator presents them (raw 256x256 camera images, rotated and
resized with padding by the protocol, the state the environment gives), reproduces the training model's own
predictions on the same frames (its training batch, the same weights and the same flow-matching noise)."""

import json

import numpy as np
import pytest
import torch

from harness.cli import main

SCENARIO = """\
name: test-openloop
model: pi05
workload: {batch_size: 4, cameras: 2, text_tokens: 64, action_horizon: 10, warmup_steps: 1, timed_steps: 1,
           seed: 0, dtype: fp32, model_size: tiny}
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
def test_eval_policy_reproduces_the_training_models_predictions_on_training_frames(tmp_path):
    from harness.data.dataset import LeRobotV3Dataset
    from harness.data.lerobot_format import LIBERO_CAMERAS
    from harness.eval.policies import make_policy
    from harness.eval.protocol import flip, policy_observation
    from models import get_family
    from models.workload import Workload

    data, out, scenario = tmp_path / "ds", tmp_path / "run", tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    # 256x256 frames, as LIBERO renders and the demonstrations store them (the evaluation resizes them to 224)
    assert main(["make-dataset", "--source", "synthetic", "--episodes", "1", "--out", str(data)]) == 0
    train = ["train", str(scenario), "--rung", "community", "--dataset", str(data), "--steps", "60", "--out", str(out)]
    fast = ["--target", "cpu", "--workers", "0", "--warmup-steps", "5", "--peak-lr", "3e-3", "--ema-decay", "0.9"]
    assert main([*train, *fast]) == 0
    checkpoint = out / "checkpoints" / "step-00000060"

    # the evaluation's policy, as `vlabench eval --policy pi05 --checkpoint` builds it on a CPU
    policy = make_policy("pi05", str(checkpoint), device="cpu", dtype="fp32", model_size="full", seed=7)
    # the training model: the rung built as training builds it, with the checkpoint's weights, and its processor
    run = json.loads((checkpoint / "train_state.json").read_text())["run"]
    record, family = run["workload"], get_family("pi05")
    workload = Workload.from_record(record)
    model = family.build("tiny", family.parse_options(run["options"]), workload, "cpu", torch.float32, 0).model
    model.load_state_dict(family.import_weights(model, family.read_weights(str(checkpoint))[0]), strict=True)
    model.eval()
    dataset = LeRobotV3Dataset(data, action_horizon=workload.action_horizon, cameras=list(LIBERO_CAMERAS))
    processor = family.data_processor("tiny", workload, dataset.stats, record["data"]["tokenizer"])

    differences, spread = [], []
    for i in (0, 25, 50, 75):
        sample = dataset[i]
        # the simulator's raw observation: the dataset holds the images rotated as the policy sees them
        raw = {
            "agentview_image": flip(sample[LIBERO_CAMERAS[0]].numpy()),
            "robot0_eye_in_hand_image": flip(sample[LIBERO_CAMERAS[1]].numpy()),
            "robot0_eef_pos": np.zeros(3),
            "robot0_eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
            "robot0_gripper_qpos": np.zeros(2),
        }
        observation = policy_observation(raw, sample["task"])
        observation["state"] = sample["observation.state"].numpy()  # what state_vector made of the env's obs
        observation["noise_seed"] = 100 + i
        evaluated = policy.infer([observation])[0]

        batch = processor.training_batch([sample], tuple(LIBERO_CAMERAS), torch.Generator().manual_seed(0))
        noise = torch.randn((1, workload.action_horizon, 32), generator=torch.Generator().manual_seed(100 + i))
        trained = processor.actions_out(model.sample_actions(batch, noise=noise, steps=10)[0].numpy(), 7)
        differences.append(np.abs(evaluated - trained).max())
        spread.append(np.abs(trained - trained.mean(0)).max())
    # the predictions depend on the frame (a mismatch would not hide behind a constant output)...
    assert min(spread) > 0.05, spread
    # ...and the evaluation's are the training model's, to float rounding (the protocol's uint8 resize: PIL and
    # torch's antialiased bilinear agree within one level)
    assert max(differences) < 1.5e-3, differences
