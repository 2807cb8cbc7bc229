"""GR00T N1.6 checkpoints in the released safetensors layout load onto our modules exactly."""

import json

import pytest
import torch

from models.gr00t.checkpoint import (
    EMBED_KEY,
    LM_HEAD_KEY,
    POOLING_HEAD_PREFIX,
    CheckpointError,
    load_gr00t,
    read_checkpoint,
    reference_names,
    save_checkpoint,
    to_our_state_dict,
    to_reference_state_dict,
)
from models.gr00t.config import FULL, TINY
from models.gr00t.model import Gr00tModel, init_weights

pytest.importorskip("safetensors", reason="checkpoint loading needs safetensors (vlabench[dev] or [sim])")
from safetensors.torch import load_file, save_file  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    model = Gr00tModel(TINY)
    init_weights(model, seed=3)
    with torch.no_grad():  # every tensor distinct (biases and norms are constant after init)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    return model


def assert_same(a: torch.nn.Module, b: torch.nn.Module):
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for name in sa:
        assert torch.equal(sa[name], sb[name]), name


@pytest.mark.parametrize("shards", [1, 3])
def test_tiny_checkpoint_round_trips_bit_exactly(tiny, tmp_path, shards):
    files = save_checkpoint(tiny, tmp_path, shards=shards)
    if shards > 1:
        assert [f.name for f in files] == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
        index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
        assert set(index["weight_map"].values()) == {f.name for f in files}
    keys = set().union(*(load_file(str(f)) for f in files))
    assert "action_head.model.transformer_blocks.0.attn1.to_k.weight" in keys
    model, size = load_gr00t(tmp_path)
    assert size == "tiny"
    assert_same(tiny, model)


def test_full_size_names_match_the_released_layout():
    names = reference_names(FULL)
    with torch.device("meta"):
        model = Gr00tModel(FULL)
    assert set(names) == set(model.state_dict())
    # nvidia/GR00T-N1.6-3B holds 1106 tensors: ours, the pooling head (11) and the tied lm_head (1)
    assert len(set(names.values())) == len(names) == 1106 - 11 - 1
    expected = {
        "vision.patch_embed.weight": "backbone.model.vision_model.vision_model.embeddings.patch_embedding.weight",
        "vision.pos_embed.weight": "backbone.model.vision_model.vision_model.embeddings.position_embedding.weight",
        "vision.layers.26.attn.out_proj.bias": "backbone.model.vision_model.vision_model.encoder.layers.26.self_attn.out_proj.bias",
        "vision.post_norm.weight": "backbone.model.vision_model.vision_model.post_layernorm.weight",
        "mlp1.norm.weight": "backbone.model.mlp1.0.weight",
        "mlp1.fc2.bias": "backbone.model.mlp1.3.bias",
        "llm.embed_tokens.weight": "backbone.model.language_model.model.embed_tokens.weight",
        "llm.layers.15.attn.k_norm.weight": "backbone.model.language_model.model.layers.15.self_attn.k_norm.weight",
        "llm.layers.0.post_norm.weight": "backbone.model.language_model.model.layers.0.post_attention_layernorm.weight",
        "llm.norm.weight": "backbone.model.language_model.model.norm.weight",
        "vlln.bias": "action_head.vlln.bias",
        "dit.time_embed.linear_1.weight": "action_head.model.timestep_encoder.timestep_embedder.linear_1.weight",
        "dit.blocks.31.norm1.linear.weight": "action_head.model.transformer_blocks.31.norm1.linear.weight",
        "dit.blocks.2.attn.to_out.bias": "action_head.model.transformer_blocks.2.attn1.to_out.0.bias",
        "dit.blocks.1.ff.fc1.weight": "action_head.model.transformer_blocks.1.ff.net.0.proj.weight",
        "dit.blocks.1.ff.fc2.weight": "action_head.model.transformer_blocks.1.ff.net.2.weight",
        "dit.proj_out_2.weight": "action_head.model.proj_out_2.weight",
        "state_encoder.layer1.weight": "action_head.state_encoder.layer1.W",
        "action_encoder.W2.bias": "action_head.action_encoder.W2.b",
        "action_decoder.layer2.weight": "action_head.action_decoder.layer2.W",
        "action_pos.weight": "action_head.position_embedding.weight",
    }
    for ours, ref in expected.items():
        assert names[ours] == ref
    shapes = {ref: tuple(model.state_dict()[ours].shape) for ours, ref in names.items()}
    # shapes as the released file stores them (per-embodiment weights are [32, in, out])
    assert shapes["action_head.state_encoder.layer1.W"] == (32, 128, 1024)
    assert shapes["action_head.model.timestep_encoder.timestep_embedder.linear_1.weight"] == (1536, 256)
    assert shapes["backbone.model.mlp1.1.weight"] == (2048, 4608)
    assert shapes["action_head.model.transformer_blocks.0.attn1.to_k.weight"] == (1536, 2048)
    assert shapes["backbone.model.vision_model.vision_model.embeddings.patch_embedding.weight"] == (1152, 588)


def test_unused_reference_keys_are_dropped(tiny):
    ref = to_reference_state_dict(tiny.state_dict(), TINY)
    ref[LM_HEAD_KEY] = torch.zeros_like(ref[EMBED_KEY])  # tied in the reference: the embedding wins
    for name in ("probe", "attention.in_proj_weight", "mlp.fc1.weight"):
        ref[POOLING_HEAD_PREFIX + name] = torch.zeros(3)
    ref["action_head.mask_token"] = torch.zeros(1, 1, TINY.dit.width)  # from a state-dropout fine-tune
    state = to_our_state_dict(ref, TINY)
    assert torch.equal(state["llm.embed_tokens.weight"], tiny.llm.embed_tokens.weight)
    only_head = to_reference_state_dict(tiny.state_dict(), TINY)
    only_head[LM_HEAD_KEY] = only_head.pop(EMBED_KEY)  # the embedding saved under its lm_head name only
    assert torch.equal(to_our_state_dict(only_head, TINY)["llm.embed_tokens.weight"], tiny.llm.embed_tokens.weight)


def test_bad_checkpoints_fail_with_one_clear_line(tiny, tmp_path):
    ref = to_reference_state_dict(tiny.state_dict(), TINY)
    del ref["action_head.vlln.bias"]
    ref["something.else"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match="1 missing .*action_head.vlln.bias.*1 unknown .*something.else") as e:
        to_our_state_dict(ref, TINY, "ckpt")
    assert "\n" not in str(e.value)
    (tmp_path / "pickled").mkdir()
    torch.save({}, tmp_path / "pickled" / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickled weights are not loaded"):
        read_checkpoint(tmp_path / "pickled")
    (tmp_path / "shapes").mkdir()
    wrong = to_reference_state_dict(tiny.state_dict(), TINY)
    wrong["action_head.vlln.bias"] = torch.zeros(7)
    save_file(wrong, str(tmp_path / "shapes" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="shapes match no GR00T N1.6 size"):
        load_gr00t(tmp_path / "shapes")
    (tmp_path / "shard").mkdir()
    (tmp_path / "shard" / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "model-00001-of-00002.safetensors"}})
    )
    with pytest.raises(CheckpointError, match="absent"):
        read_checkpoint(tmp_path / "shard")
