"""The evaluation machinery that needs no simulator: preprocessing, initial-state reading, normalisation,
checkpoint metadata of both layouts, success rates and the scenario eval block."""

import json
import pickle
import typing

import numpy as np
import pytest
import torch

import models
from harness.errors import InputError
from harness.eval.env import read_init_states
from harness.eval.policies import POLICIES, PolicyError, make_policy
from harness.eval.protocol import flip, quat_to_axis_angle, resize_with_pad
from harness.eval.runner import success_rates
from models.pi05.policy import lerobot_meta, openpi_meta
from models.policy import EvalPolicy, resolve_checkpoint


def test_images_are_rotated_and_resized_with_padding():
    img = np.arange(4 * 6 * 3, dtype=np.uint8).reshape(4, 6, 3)
    assert np.array_equal(flip(img)[0, 0], img[-1, -1])
    wide = np.full((100, 200, 3), 255, dtype=np.uint8)
    out = resize_with_pad(wide, 224)
    assert out.shape == (224, 224, 3)
    assert out[0, 0].max() == 0 and out[-1, -1].max() == 0 and out[112, 112].min() == 255  # black bars, content
    assert (out[:, 100] == 255).all(axis=1).sum() == 112  # 200x100 -> 224x112, centred
    square = np.random.default_rng(0).integers(0, 255, (256, 256, 3), dtype=np.uint8)
    assert resize_with_pad(square, 224).shape == (224, 224, 3)


def test_quaternion_to_axis_angle():
    assert np.allclose(quat_to_axis_angle([0, 0, 0, 1]), 0)
    half = np.sin(np.pi / 4)  # 90 degrees about z, (x, y, z, w)
    assert np.allclose(quat_to_axis_angle([0, 0, half, np.cos(np.pi / 4)]), [0, 0, np.pi / 2])


class _Evil:
    def __reduce__(self):
        return (print, ("pwned",))


def test_init_states_are_read_without_unpickling_code(tmp_path):
    states = np.random.default_rng(0).normal(size=(3, 9))
    torch.save(states, tmp_path / "task.pruned_init", _use_new_zipfile_serialization=True)  # LIBERO's format
    assert np.array_equal(read_init_states(tmp_path / "task.pruned_init"), states)
    (tmp_path / "evil.pkl").write_bytes(pickle.dumps([_Evil()]))
    with pytest.raises(pickle.UnpicklingError, match="refusing to load builtins.print"):
        read_init_states(tmp_path / "evil.pkl")
    torch.save(torch.zeros(2, 2), tmp_path / "tensor.pt")
    with pytest.raises(pickle.UnpicklingError):
        read_init_states(tmp_path / "tensor.pt")


def test_openpi_checkpoint_metadata(tmp_path):
    (tmp_path / "assets" / "physical-intelligence" / "libero").mkdir(parents=True)
    stats = {
        "state": {"q01": [0.0] * 8, "q99": [2.0] * 8, "mean": [0] * 8, "std": [1] * 8},
        "actions": {"q01": [-1.0] * 7, "q99": [3.0] * 7, "mean": [0] * 7, "std": [1] * 7},
    }
    (tmp_path / "assets" / "physical-intelligence" / "libero" / "norm_stats.json").write_text(
        json.dumps({"norm_stats": stats})
    )
    (tmp_path / "config.json").write_text(json.dumps({"action_horizon": 10, "paligemma_variant": "gemma_2b"}))
    meta = openpi_meta(tmp_path)
    assert (meta.layout, meta.horizon, meta.state_in_prompt, meta.state_pad) == ("openpi", 10, False, None)
    assert meta.action_norm.mode == "quantile" and np.allclose(meta.action_norm.unnormalize(np.zeros(7)), 1.0)


def test_lerobot_checkpoint_metadata(tmp_path):
    from safetensors.torch import save_file

    save_file(
        {
            "observation.state.q01": torch.zeros(8),
            "observation.state.q99": torch.full((8,), 2.0),
            "action.q01": torch.full((7,), -1.0),
            "action.q99": torch.full((7,), 3.0),
        },
        str(tmp_path / "policy_preprocessor_step_2_normalizer_processor.safetensors"),
    )
    (tmp_path / "policy_preprocessor.json").write_text(
        json.dumps(
            {
                "name": "policy_preprocessor",
                "steps": [
                    {"registry_name": "rename_observations_processor", "config": {}},
                    {
                        "registry_name": "normalizer_processor",
                        "config": {
                            "eps": 1e-8,
                            "norm_map": {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"},
                        },
                        "state_file": "policy_preprocessor_step_2_normalizer_processor.safetensors",
                    },
                ],
            }
        )
    )
    (tmp_path / "config.json").write_text(
        json.dumps({"type": "pi05", "chunk_size": 50, "max_state_dim": 32, "tokenizer_max_length": 200})
    )
    meta = lerobot_meta(tmp_path)
    assert (meta.layout, meta.horizon, meta.state_in_prompt, meta.state_pad) == ("lerobot", 50, True, 32)
    assert np.allclose(meta.state_norm.normalize(np.ones(8)), 0.0)
    assert np.allclose(meta.action_norm.unnormalize(np.zeros((2, 7))), 1.0)
    assert meta.action_values == {}
    # what `vlabench train` adds: no state in the prompt, and the demonstrations' discrete gripper values
    ours = {"state_in_prompt": False, "action_values": {"6": [-1.0, 0.0, 1.0]}}
    (tmp_path / "config.json").write_text(json.dumps({"type": "pi05", "chunk_size": 10, "vlabench": ours}))
    meta = lerobot_meta(tmp_path)
    assert (meta.horizon, meta.state_in_prompt, meta.action_values) == (10, False, {6: [-1.0, 0.0, 1.0]})


def test_discrete_action_dimensions_are_snapped_to_their_values():
    """A regressed gripper command near 0 must hold (robosuite moves the gripper by the command's sign)."""
    from models.policy import snap_to_values

    chunk = np.array([[0.3, 0.04], [-0.2, -0.07], [0.1, 0.8], [0.0, -0.51]])
    snapped = snap_to_values(chunk, {1: [-1.0, 0.0, 1.0]})
    assert np.array_equal(snapped[:, 0], chunk[:, 0])  # other dimensions untouched
    assert snapped[:, 1].tolist() == [0.0, 0.0, 1.0, -1.0]
    assert np.array_equal(snap_to_values(chunk, {}), chunk) and snap_to_values(chunk, {5: [0.0]}).shape == (4, 2)


def test_success_rates_per_suite_and_task():
    eps = [
        {"suite": "libero_goal", "task": t, "trial": i, "status": s, "success": ok}
        for t, i, s, ok in [(0, 0, "ok", True), (0, 1, "ok", False), (1, 0, "error", False), (10, 0, "ok", True)]
    ]
    rates = success_rates(eps)
    assert list(rates) == ["libero_goal", "libero_goal/0", "libero_goal/1", "libero_goal/10"]
    assert rates["libero_goal"]["successes"] == 2 and rates["libero_goal"]["trials"] == 4
    assert rates["libero_goal"]["errors"] == 1 and rates["libero_goal/0"]["rate"] == 0.5
    assert rates["libero_goal/1"]["wilson_high"] < 1 and rates["libero_goal/10"]["wilson_low"] > 0


def test_checkpoint_resolution_errors(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(PolicyError, match="no such file or folder"):
        resolve_checkpoint(str(tmp_path / "nope" / "x" / "y"))
    with pytest.raises(PolicyError, match="not a local path, and downloading it from the Hugging Face Hub failed"):
        resolve_checkpoint("nobody-here/no-such-checkpoint")
    with pytest.raises(PolicyError, match="needs --checkpoint"):
        make_policy("pi05", None)


def test_tiny_random_policy_returns_chunks():
    policy = make_policy("pi05", "random", model_size="tiny", device="cpu")
    rng = np.random.default_rng(0)
    obs = [
        {
            "image": rng.integers(0, 255, (224, 224, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 255, (224, 224, 3), dtype=np.uint8),
            "state": rng.normal(size=8).astype(np.float32),
            "prompt": "open the drawer",
            "noise_seed": s,
        }
        for s in (1, 2, 1)
    ]
    chunks = policy.infer(obs)
    assert [c.shape for c in chunks] == [(50, 7)] * 3
    assert not np.allclose(chunks[0], chunks[1])
    alone = policy.infer(obs[:1])[0]  # the noise follows the episode, not the batch: same chunk alone
    assert np.allclose(alone, chunks[0], atol=1e-5)
    assert policy.describe()["tokenizer"] == "bytes" and len(policy.latencies) == 2


@pytest.mark.parametrize("name", POLICIES)
def test_every_registered_policy_implements_the_eval_interface(name):
    """Every policy `--policy` offers is an EvalPolicy holding each attribute the interface declares, of its
    declared type: the evaluation reads them directly, with no defaults of its own."""
    if name in models.FAMILIES:
        policy = make_policy(name, "random", model_size="tiny", device="cpu")
    else:
        policy = make_policy(name)
    assert isinstance(policy, EvalPolicy)
    for attribute, hint in typing.get_type_hints(EvalPolicy).items():
        assert isinstance(getattr(policy, attribute), typing.get_origin(hint) or hint), attribute
    assert policy.name == name and policy.describe()["name"] == name and policy.replan_steps >= 1


def test_scenario_eval_block(tmp_path):
    from harness.eval.main import eval_block
    from harness.scenario import load_scenario

    text = """
name: eval-test
model: pi05
workload: {batch_size: 1}
ladder:
  - {name: base, options: {camera_slots: 3}}
  - {name: sdpa, options: {attention: sdpa}}
targets: {cpu: {model_size: tiny}}
eval: {suite: libero_goal, tasks: [0, 2], trials: 3, checkpoint: lerobot/pi05_libero, workers: 4}
"""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    settings, options, rung = eval_block(load_scenario(path))
    assert settings == {
        "suites": ["libero_goal"],
        "tasks": [0, 2],
        "trials": 3,
        "workers": 4,
        "checkpoint": "lerobot/pi05_libero",
    }
    assert rung == "sdpa" and options == {"camera_slots": 3, "attention": "sdpa"}
    assert eval_block(load_scenario(path), "base")[1] == {"camera_slots": 3}
    path.write_text(text.replace("trials: 3", "trails: 3"))
    with pytest.raises(InputError, match="eval.trails: expected a known key"):
        eval_block(load_scenario(path))
    path.write_text(text.replace("libero_goal", "libero_nope"))
    with pytest.raises(InputError, match="eval.suite: expected one of libero_spatial, libero_object"):
        eval_block(load_scenario(path))


def test_the_policys_host_threads_leave_the_env_workers_their_cores(monkeypatch):
    """While N env workers run, torch in the evaluation's own process gets the cores they leave (at least one), and
    its own count again afterwards: a thread per core would fight the workers for them."""
    from harness.eval.runner import _host_threads

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    before = torch.get_num_threads()
    with _host_threads(16) as threads:
        assert threads == 1 and torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with _host_threads(15) as threads:
        assert threads == 1
    with _host_threads(12) as threads:
        assert threads == min(before, 4) and torch.get_num_threads() == threads
    assert torch.get_num_threads() == before
