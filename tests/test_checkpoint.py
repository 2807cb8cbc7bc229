"""Pi0.5 checkpoints in the openpi and LeRobot safetensors layouts load onto our modules exactly."""

import json

import pytest
import torch

from models.pi05 import FULL, TINY, Pi05Model, init_weights
from models.pi05.checkpoint import (
    EMBED_KEY,
    LAYOUTS,
    LM_HEAD_KEY,
    CheckpointError,
    load_pi05,
    read_checkpoint,
    reference_names,
    save_checkpoint,
    to_our_state_dict,
    to_reference_state_dict,
)

pytest.importorskip("safetensors", reason="checkpoint loading needs safetensors (vlabench[dev] or [sim])")
from safetensors.torch import load_file, save_file  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    model = Pi05Model(TINY)
    init_weights(model, seed=3)
    with torch.no_grad():  # the reference zero-inits nothing we could confuse: make every tensor distinct
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.01)
    return model


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tiny_checkpoint_round_trips_bit_exactly(tiny, tmp_path, layout):
    save_checkpoint(tiny, tmp_path, layout, config={"type": "pi05"})
    keys = set(load_file(str(tmp_path / "model.safetensors")))
    if layout == "lerobot":
        assert all(k.startswith("model.") for k in keys)
        assert "model." + LM_HEAD_KEY in keys and "model." + EMBED_KEY not in keys  # tied: lm_head only
    else:
        assert EMBED_KEY in keys and not any(k.startswith("model.") for k in keys)
    model, size, found = load_pi05(tmp_path)
    assert (size, found) == ("tiny", layout)
    ours, theirs = tiny.state_dict(), model.state_dict()
    assert ours.keys() == theirs.keys()
    for name in ours:
        assert torch.equal(ours[name], theirs[name]), name


def test_full_size_names_match_the_reference_layout():
    names = reference_names(FULL)
    with torch.device("meta"):
        model = Pi05Model(FULL)
    assert set(names) == set(model.state_dict())  # every parameter has exactly one reference name
    assert len(set(names.values())) == len(names) == 811  # lerobot/pi05_base: 812 tensors incl. 2 lm_heads - 1
    expected = {  # real key names of the openpi / LeRobot modules
        "vision.patch_embed.weight": "paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings.patch_embedding.weight",
        "vision.pos_embed.weight": "paligemma_with_expert.paligemma.model.vision_tower.vision_model.embeddings.position_embedding.weight",
        "vision.layers.26.attn.q_proj.bias": "paligemma_with_expert.paligemma.model.vision_tower.vision_model.encoder.layers.26.self_attn.q_proj.bias",
        "vision.layers.0.norm2.weight": "paligemma_with_expert.paligemma.model.vision_tower.vision_model.encoder.layers.0.layer_norm2.weight",
        "vision.post_norm.bias": "paligemma_with_expert.paligemma.model.vision_tower.vision_model.post_layernorm.bias",
        "vision.projector.weight": "paligemma_with_expert.paligemma.model.multi_modal_projector.linear.weight",
        "text_embed.embed_tokens.weight": "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight",
        "backbone.layers.17.prefix.input_norm.weight": "paligemma_with_expert.paligemma.model.language_model.layers.17.input_layernorm.weight",
        "backbone.layers.3.prefix.mlp.gate_proj.weight": "paligemma_with_expert.paligemma.model.language_model.layers.3.mlp.gate_proj.weight",
        "backbone.layers.0.suffix.q_proj.weight": "paligemma_with_expert.gemma_expert.model.layers.0.self_attn.q_proj.weight",
        "backbone.layers.5.suffix.post_norm.dense.bias": "paligemma_with_expert.gemma_expert.model.layers.5.post_attention_layernorm.dense.bias",
        "backbone.prefix_norm.weight": "paligemma_with_expert.paligemma.model.language_model.norm.weight",
        "backbone.suffix_norm.dense.weight": "paligemma_with_expert.gemma_expert.model.norm.dense.weight",
        "suffix_embed.action_in.weight": "action_in_proj.weight",
        "suffix_embed.time_mlp.time_mlp_out.bias": "time_mlp_out.bias",
        "action_out.bias": "action_out_proj.bias",
    }
    for ours, ref in expected.items():
        assert names[ours] == ref


def test_tied_embedding_unused_heads_and_older_nesting(tiny):
    ref = to_reference_state_dict(tiny.state_dict(), TINY, "openpi")
    # Both tied names present, the expert's unused lm_head too, and the pre-4.52 transformers nesting.
    ref[LM_HEAD_KEY] = ref[EMBED_KEY]
    ref["paligemma_with_expert.gemma_expert.lm_head.weight"] = torch.zeros(3, 3)
    old = {k.replace("paligemma.model.language_model.", "paligemma.language_model.model."): v for k, v in ref.items()}
    state = to_our_state_dict(old, TINY)
    assert torch.equal(state["text_embed.embed_tokens.weight"], tiny.state_dict()["text_embed.embed_tokens.weight"])


def test_bad_checkpoints_fail_with_one_clear_line(tiny, tmp_path):
    ref = to_reference_state_dict(tiny.state_dict(), TINY, "openpi")
    del ref["action_out_proj.bias"]
    ref["something.else"] = torch.zeros(1)
    with pytest.raises(CheckpointError, match="1 missing .*action_out_proj.bias.*1 unknown .*something.else"):
        to_our_state_dict(ref, TINY, "ckpt")
    (tmp_path / "pickled").mkdir()
    torch.save({}, tmp_path / "pickled" / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickled weights are not loaded"):
        read_checkpoint(tmp_path / "pickled")
    (tmp_path / "shapes").mkdir()
    wrong = to_reference_state_dict(tiny.state_dict(), TINY, "openpi")
    wrong["action_out_proj.bias"] = torch.zeros(7)
    save_file(wrong, str(tmp_path / "shapes" / "model.safetensors"))
    with pytest.raises(CheckpointError, match="shapes match no Pi0.5 size"):
        load_pi05(tmp_path / "shapes")


def test_sharded_checkpoint(tiny, tmp_path):
    ref = to_reference_state_dict(tiny.state_dict(), TINY, "lerobot")
    keys = sorted(ref)
    shards = {"model-00001-of-00002.safetensors": keys[::2], "model-00002-of-00002.safetensors": keys[1::2]}
    for name, part in shards.items():
        save_file({k: ref[k] for k in part}, str(tmp_path / name))
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {k: name for name, part in shards.items() for k in part}})
    )
    model, size, layout = load_pi05(tmp_path)
    assert layout == "lerobot" and torch.equal(model.action_out.weight, tiny.action_out.weight)
