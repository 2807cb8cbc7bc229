"""Pi0.5 checkpoints in the two public safetensors layouts, mapped onto our module names.

Both layouts name parameters after the reference modules (openpi's and LeRobot's):
- openpi (a JAX checkpoint converted to PyTorch): keys start at the model, e.g.
  `paligemma_with_expert.paligemma.model.language_model.layers.0.self_attn.q_proj.weight`;
- LeRobot (`save_pretrained` of the policy): the same keys under `model.`.
The Gemma-2B token embedding is tied to PaliGemma's `lm_head`; a file keeps one of the two names (LeRobot's
hub files keep only `lm_head`), so either one fills our `text_embed.embed_tokens`. The expert's `lm_head`
is never used. Only safetensors files are read: a pickle can run code, a safetensors file cannot.

Loading always targets the plain model (separate q/k/v and gate/up projections); optimization switches
such as fused projections are applied after the weights are in.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .. import checkpoints, siglip
from ..checkpoints import CheckpointError
from .config import SIZES, Pi05Config

LAYOUTS = ("openpi", "lerobot")
_PALI = "paligemma_with_expert.paligemma"
_EXPERT = "paligemma_with_expert.gemma_expert.model"
_VISION = f"{_PALI}.model.vision_tower.vision_model"
_LLM = f"{_PALI}.model.language_model"
EMBED_KEY = f"{_LLM}.embed_tokens.weight"
LM_HEAD_KEY = f"{_PALI}.lm_head.weight"
# Held by the reference modules, read by nothing in Pi0.5.
UNUSED_KEYS = ("paligemma_with_expert.gemma_expert.lm_head.weight", f"{_EXPERT}.embed_tokens.weight")
# Older transformers nested PaliGemma differently (`paligemma.language_model.model.*`); same tensors.
_OLD_NAMES = (
    (f"{_PALI}.language_model.model.", f"{_LLM}."),
    (f"{_PALI}.language_model.lm_head.", f"{_PALI}.lm_head."),
    (f"{_PALI}.vision_tower.", f"{_PALI}.model.vision_tower."),
    (f"{_PALI}.multi_modal_projector.", f"{_PALI}.model.multi_modal_projector."),
)


def _layer_rules() -> list[tuple[str, str]]:
    """(our name, reference name) patterns; `{n}` is a layer index."""
    rules = siglip.layer_rules("vision", _VISION)
    gemma_linears = [
        ("q_proj", "self_attn.q_proj"),
        ("k_proj", "self_attn.k_proj"),
        ("v_proj", "self_attn.v_proj"),
        ("o_proj", "self_attn.o_proj"),
        ("mlp.gate_proj", "mlp.gate_proj"),
        ("mlp.up_proj", "mlp.up_proj"),
        ("mlp.down_proj", "mlp.down_proj"),
    ]
    for stream, ref_root in (("prefix", f"{_LLM}.layers.{{n}}"), ("suffix", f"{_EXPERT}.layers.{{n}}")):
        rules += [
            (f"backbone.layers.{{n}}.{stream}.{ours}.weight", f"{ref_root}.{ref}.weight") for ours, ref in gemma_linears
        ]
    # Gemma-2B norms hold a weight; the expert's adaRMS norms hold a Dense(cond -> 3 * width).
    rules += [
        (f"backbone.layers.{{n}}.prefix.{ours}.weight", f"{_LLM}.layers.{{n}}.{ref}.weight")
        for ours, ref in (("input_norm", "input_layernorm"), ("post_norm", "post_attention_layernorm"))
    ]
    rules += [
        (f"backbone.layers.{{n}}.suffix.{ours}.dense.{p}", f"{_EXPERT}.layers.{{n}}.{ref}.dense.{p}")
        for ours, ref in (("input_norm", "input_layernorm"), ("post_norm", "post_attention_layernorm"))
        for p in ("weight", "bias")
    ]
    return rules


def _single_rules() -> list[tuple[str, str]]:
    both = ("weight", "bias")
    rules = siglip.embedding_rules("vision", _VISION)
    rules += [(f"vision.projector.{p}", f"{_PALI}.model.multi_modal_projector.linear.{p}") for p in both]
    rules += [("text_embed.embed_tokens.weight", EMBED_KEY), ("backbone.prefix_norm.weight", f"{_LLM}.norm.weight")]
    rules += [(f"backbone.suffix_norm.dense.{p}", f"{_EXPERT}.norm.dense.{p}") for p in both]
    rules += [(f"suffix_embed.action_in.{p}", f"action_in_proj.{p}") for p in both]
    rules += [(f"suffix_embed.time_mlp.{m}.{p}", f"{m}.{p}") for m in ("time_mlp_in", "time_mlp_out") for p in both]
    rules += [(f"action_out.{p}", f"action_out_proj.{p}") for p in both]
    return rules


def reference_names(cfg: Pi05Config) -> dict[str, str]:
    """Our parameter name -> the reference (openpi) name, for every parameter of a model with `cfg`."""
    layers = {"vision": cfg.vision.layers, "backbone": cfg.llm.layers}
    return {**dict(_single_rules()), **checkpoints.expand_layer_rules(_layer_rules(), layers)}


def _canonical(key: str) -> str:
    """A reference key with LeRobot's `model.` prefix removed and older PaliGemma nesting renamed."""
    if key.startswith("model."):
        key = key[len("model.") :]
    for old, new in _OLD_NAMES:
        if key.startswith(old):
            return new + key[len(old) :]
    return key


def detect_layout(keys) -> str:
    keys = list(keys)
    if keys and all(k.startswith("model.") for k in keys):
        return "lerobot"
    return "openpi"


def to_our_state_dict(tensors: dict[str, torch.Tensor], cfg: Pi05Config, source: str = "checkpoint") -> dict:
    """Map a reference-named state dict (either layout) onto our names; strict about missing and unknown keys."""
    canonical = {}
    for key, value in tensors.items():
        canonical[_canonical(key)] = value
    if EMBED_KEY not in canonical and LM_HEAD_KEY in canonical:
        canonical[EMBED_KEY] = canonical[LM_HEAD_KEY]  # the tied embedding, saved under its lm_head name
    canonical.pop(LM_HEAD_KEY, None)
    for key in UNUSED_KEYS:
        canonical.pop(key, None)
    return checkpoints.map_reference(canonical, reference_names(cfg), "Pi0.5", source)


def to_reference_state_dict(state: dict[str, torch.Tensor], cfg: Pi05Config, layout: str) -> dict:
    """Our state dict under the reference names of `layout`, as that layout's files hold it: the tied
    embedding as `lm_head` only for LeRobot (its hub files lack `embed_tokens`), as `embed_tokens` for openpi."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    out = {}
    for ours, ref in reference_names(cfg).items():
        if ref == EMBED_KEY and layout == "lerobot":
            ref = LM_HEAD_KEY
        out[("model." if layout == "lerobot" else "") + ref] = state[ours].contiguous()
    return out


def infer_size(shapes: dict[str, tuple], source: str = "checkpoint") -> str:
    """Which of our sizes has exactly these parameter shapes (our names)."""
    from .model import Pi05Model

    return checkpoints.infer_size(Pi05Model, SIZES, shapes, "Pi0.5", source)


def read_checkpoint(path) -> tuple[dict[str, torch.Tensor], str]:
    """Read a checkpoint folder (or .safetensors file): (our-named state dict, layout)."""
    path = Path(path)
    tensors = checkpoints.read_tensors(path)
    # The sizes differ in layer counts, so the names of one size fit a checkpoint of that size only.
    error = None
    for cfg in SIZES.values():
        try:
            return to_our_state_dict(tensors, cfg, str(path)), detect_layout(tensors)
        except CheckpointError as e:
            error = error or e  # report against the first (full) size
    raise error


def save_checkpoint(model: torch.nn.Module, folder, layout: str, config: dict | None = None) -> Path:
    """Write `model.safetensors` (and `config.json` if given) in a reference layout; for tests and exports."""
    from safetensors.torch import save_file

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = to_reference_state_dict(model.state_dict(), model.cfg, layout)
    save_file(tensors, str(folder / "model.safetensors"))
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config, indent=1) + "\n")
    return folder / "model.safetensors"


def load_pi05(path, device="cpu", dtype: torch.dtype = torch.float32):
    """Build the plain model of the checkpoint's size and load its weights: (model, size, layout)."""
    from .model import Pi05Model

    state, layout = read_checkpoint(path)
    size = infer_size({k: tuple(v.shape) for k, v in state.items()}, str(path))
    return checkpoints.load_plain(Pi05Model, SIZES[size], state, device, dtype), size, layout
