"""The GR00T N1.6 policy for `vlabench eval` (harness/eval/policies.py): tiny random weights, and a tiny checkpoint
folder in the released layout with the processor's statistics (CPU)."""

import json

import numpy as np
import pytest

from harness.eval.policies import PolicyError, make_policy


def observations(seeds=(1, 2, 1)):
    rng = np.random.default_rng(0)
    return [
        {
            "image": rng.integers(0, 255, (224, 224, 3), dtype=np.uint8),
            "wrist_image": rng.integers(0, 255, (224, 224, 3), dtype=np.uint8),
            "state": rng.normal(size=8).astype(np.float32),
            "prompt": "open the top drawer",
            "noise_seed": s,
        }
        for s in seeds
    ]


def test_tiny_random_policy_returns_chunks():
    policy = make_policy("gr00t", "random", model_size="tiny", device="cpu")
    obs = observations()
    chunks = policy.infer(obs)
    assert [c.shape for c in chunks] == [(50, 7)] * 3 and all(c.dtype == np.float32 for c in chunks)
    assert not np.allclose(chunks[0], chunks[1])
    alone = policy.infer(obs[:1])[0]  # the noise follows the episode, not the batch: same chunk alone
    assert np.allclose(alone, chunks[0], atol=1e-5)
    desc = policy.describe()
    assert desc["stats"] == "none: identity normalisation" and desc["state_norm"] == "identity"
    assert desc["sample_steps"] == 4 and desc["tokenizer"].startswith("stand-in") and len(policy.latencies) == 2


def test_checkpoint_folder_with_processor_files(tmp_path):
    from models.gr00t import TINY, Gr00tModel, init_weights
    from models.gr00t.checkpoint import save_checkpoint

    model = Gr00tModel(TINY)
    init_weights(model, 3)
    save_checkpoint(model, tmp_path)
    groups = {"x": 1, "y": 1, "z": 1, "roll": 1, "pitch": 1, "yaw": 1, "gripper": 2}
    state = {g: {"min": [-1.0] * n, "max": [1.0] * n} for g, n in groups.items()}
    action = {g: {"min": [-0.5], "max": [0.25]} for g in groups}
    (tmp_path / "statistics.json").write_text(json.dumps({"libero_panda": {"state": state, "action": action}}))
    (tmp_path / "processor_config.json").write_text(
        json.dumps(
            {"processor_kwargs": {"modality_configs": {"libero_panda": {"action": {"delta_indices": list(range(16))}}}}}
        )
    )
    (tmp_path / "config.json").write_text(json.dumps({"action_horizon": 20}))
    policy = make_policy("gr00t", str(tmp_path), device="cpu")
    chunks = policy.infer(observations((4,)))
    assert chunks[0].shape == (16, 7)  # the model's 20-step chunk, the processor's 16 steps decoded
    assert (chunks[0] >= -0.5).all() and (chunks[0] <= 0.25).all()  # unnormalised into [min, max]
    desc = policy.describe()
    assert desc["model_size"] == "tiny" and desc["action_norm"] == "min_max" and desc["horizon"] == 20
    assert desc["stats"].endswith("statistics.json")


def test_errors_are_one_line(tmp_path):
    with pytest.raises(PolicyError, match="needs --checkpoint"):
        make_policy("gr00t", None)
    with pytest.raises(PolicyError, match="--model-size: expected one of full, full-252, tiny"):
        make_policy("gr00t", "random", model_size="huge", device="cpu")
    (tmp_path / "model.safetensors").write_bytes(b"")
    with pytest.raises(PolicyError, match="model.safetensors: not a readable safetensors file"):
        make_policy("gr00t", str(tmp_path), device="cpu")
