"""GR00T N1.6 checkpoints in the released safetensors layout, mapped onto our module names.

The released files (`nvidia/GR00T-N1.6-3B`: `model-0000X-of-0000Y.safetensors` + `model.safetensors.index.json`,
written by transformers' `save_pretrained` of `Gr00tN1d6`) name parameters after the reference modules:
`backbone.model.vision_model.vision_model.*` (SigLIP2), `backbone.model.mlp1.{0,1,3}.*`,
`backbone.model.language_model.model.*` (Qwen3, 16 layers), `action_head.model.*` (AlternateVLDiT, diffusers
names), `action_head.{state_encoder,action_encoder,action_decoder}.*.{W,b}`, `action_head.position_embedding`,
`action_head.vlln`. Keys the reference holds but N1.6 never reads are accepted and dropped:
- the SigLIP2 pooling head `backbone.model.vision_model.vision_model.head.*` (11 tensors, 15,238,352 values);
- `backbone.model.language_model.lm_head.weight`, tied to the token embedding (the embedding wins when both are
  present, as transformers re-ties after loading; it fills the embedding when only it is present);
- `action_head.mask_token` when the model is built without state dropout.
Only safetensors files are read: a pickle can run code, a safetensors file cannot.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .. import checkpoints, siglip
from ..checkpoints import CheckpointError
from .config import SIZES, Gr00tConfig

_VISION = "backbone.model.vision_model.vision_model"
_LLM = "backbone.model.language_model"
_DIT = "action_head.model"
EMBED_KEY = f"{_LLM}.model.embed_tokens.weight"
LM_HEAD_KEY = f"{_LLM}.lm_head.weight"
POOLING_HEAD_PREFIX = f"{_VISION}.head."
MASK_TOKEN_KEY = "action_head.mask_token"


def _layer_rules() -> list[tuple[str, str]]:
    """(our name, reference name) patterns; `{n}` is the layer index."""
    both = ("weight", "bias")
    rules = siglip.layer_rules("vision", _VISION)
    llm = [
        ("input_norm", "input_layernorm"),
        ("post_norm", "post_attention_layernorm"),
        ("attn.q_proj", "self_attn.q_proj"),
        ("attn.k_proj", "self_attn.k_proj"),
        ("attn.v_proj", "self_attn.v_proj"),
        ("attn.o_proj", "self_attn.o_proj"),
        ("attn.q_norm", "self_attn.q_norm"),
        ("attn.k_norm", "self_attn.k_norm"),
        ("mlp.gate_proj", "mlp.gate_proj"),
        ("mlp.up_proj", "mlp.up_proj"),
        ("mlp.down_proj", "mlp.down_proj"),
    ]
    rules += [(f"llm.layers.{{n}}.{o}.weight", f"{_LLM}.model.layers.{{n}}.{r}.weight") for o, r in llm]
    dit = [
        ("norm1.linear", "norm1.linear"),
        ("attn.to_q", "attn1.to_q"),
        ("attn.to_k", "attn1.to_k"),
        ("attn.to_v", "attn1.to_v"),
        ("attn.to_out", "attn1.to_out.0"),
        ("ff.fc1", "ff.net.0.proj"),
        ("ff.fc2", "ff.net.2"),
    ]
    rules += [(f"dit.blocks.{{n}}.{o}.{p}", f"{_DIT}.transformer_blocks.{{n}}.{r}.{p}") for o, r in dit for p in both]
    return rules


def _single_rules(cfg: Gr00tConfig) -> list[tuple[str, str]]:
    both = ("weight", "bias")
    rules = siglip.embedding_rules("vision", _VISION)
    rules += [
        (f"mlp1.{o}.{p}", f"backbone.model.mlp1.{i}.{p}")
        for o, i in (("norm", 0), ("fc1", 1), ("fc2", 3))
        for p in both
    ]
    rules += [("llm.embed_tokens.weight", EMBED_KEY), ("llm.norm.weight", f"{_LLM}.model.norm.weight")]
    rules += [(f"vlln.{p}", f"action_head.vlln.{p}") for p in both]
    rules += [
        (f"dit.time_embed.{m}.{p}", f"{_DIT}.timestep_encoder.timestep_embedder.{m}.{p}")
        for m in ("linear_1", "linear_2")
        for p in both
    ]
    rules += [(f"dit.{m}.{p}", f"{_DIT}.{m}.{p}") for m in ("proj_out_1", "proj_out_2") for p in both]
    heads = [
        ("state_encoder", "state_encoder", ("layer1", "layer2")),
        ("action_encoder", "action_encoder", ("W1", "W2", "W3")),
        ("action_decoder", "action_decoder", ("layer1", "layer2")),
    ]
    rules += [
        (f"{o}.{layer}.{ours}", f"action_head.{r}.{layer}.{ref}")
        for o, r, layers in heads
        for layer in layers
        for ours, ref in (("weight", "W"), ("bias", "b"))
    ]
    rules += [("action_pos.weight", "action_head.position_embedding.weight")]
    if cfg.head.state_dropout > 0:
        rules += [("state_mask_token", MASK_TOKEN_KEY)]
    return rules


def reference_names(cfg: Gr00tConfig) -> dict[str, str]:
    """Our parameter name -> the released checkpoint's name, for every parameter of a model with `cfg`."""
    layers = {"vision": cfg.vision.layers, "llm": cfg.llm.layers, "dit": cfg.dit.layers}
    return {**dict(_single_rules(cfg)), **checkpoints.expand_layer_rules(_layer_rules(), layers)}


def to_our_state_dict(tensors: dict[str, torch.Tensor], cfg: Gr00tConfig, source: str = "checkpoint") -> dict:
    """Map released-layout tensors onto our names; strict about missing and unknown keys (one-line error)."""
    tensors = dict(tensors)
    if EMBED_KEY not in tensors and LM_HEAD_KEY in tensors:
        tensors[EMBED_KEY] = tensors[LM_HEAD_KEY]  # the tied embedding saved under its lm_head name only
    tensors.pop(LM_HEAD_KEY, None)
    for key in [k for k in tensors if k.startswith(POOLING_HEAD_PREFIX)]:
        del tensors[key]  # SigLIP2's pooling head: built by the reference, never run
    names = reference_names(cfg)
    if MASK_TOKEN_KEY not in names.values():
        tensors.pop(MASK_TOKEN_KEY, None)
    return checkpoints.map_reference(tensors, names, "GR00T N1.6", source)


def to_reference_state_dict(state: dict[str, torch.Tensor], cfg: Gr00tConfig) -> dict:
    """Our state dict under the released names (without the unused pooling head and tied lm_head)."""
    return {ref: state[ours].contiguous() for ours, ref in reference_names(cfg).items()}


def infer_size(shapes: dict[str, tuple], source: str = "checkpoint") -> str:
    """Which of our sizes has exactly these parameter shapes (our names)."""
    from .model import Gr00tModel

    return checkpoints.infer_size(Gr00tModel, SIZES, shapes, "GR00T N1.6", source)


def read_checkpoint(path) -> dict[str, torch.Tensor]:
    """Read a checkpoint folder (single file or shards with their index) or one .safetensors file, our names."""
    path = Path(path)
    tensors = checkpoints.read_tensors(path)
    error = None
    for cfg in SIZES.values():  # the sizes differ in layer counts: a size's names fit its checkpoints only
        try:
            return to_our_state_dict(tensors, cfg, str(path))
        except CheckpointError as e:
            error = error or e  # report against the first (full) size
    raise error


def save_checkpoint(model: torch.nn.Module, folder, shards: int = 1) -> list[Path]:
    """Write the model in the released layout (`model.safetensors`, or `shards` files plus the index json as
    save_pretrained writes them); for tests and exports."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = to_reference_state_dict(model.state_dict(), model.cfg)
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"))
        return [folder / "model.safetensors"]
    keys = sorted(tensors)
    files, weight_map = [], {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = keys[i::shards]
        save_file({k: tensors[k] for k in part}, str(folder / name))
        weight_map.update({k: name for k in part})
        files.append(folder / name)
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return files


def load_gr00t(path, device="cpu", dtype: torch.dtype = torch.float32):
    """Build the plain model of the checkpoint's size and load its weights: (model, size)."""
    from .model import Gr00tModel

    state = read_checkpoint(path)
    size = infer_size({k: tuple(v.shape) for k, v in state.items()}, str(path))
    return checkpoints.load_plain(Gr00tModel, SIZES[size], state, device, dtype), size
