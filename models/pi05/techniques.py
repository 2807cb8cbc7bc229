"""The optimization switches, each one function applied to the plain model in a fixed order
(attention kernel, FP8 linears, recompute, compile), in the manner of torchtitan's parallelize."""
from __future__ import annotations

import torch
from torch import nn

from ..recompute import apply_recompute
from .model import Pi05Model
from .options import Pi05Options

# openpi's gradient checkpointing, nested: each image embedding (and each SigLIP layer inside it),
# the text embedding, the time MLP, action in/out, the whole joint forward and each joint layer again.
NESTED_FULL = ("vision", "vision.layers.*", "text_embed", "time_mlp", "action_in", "action_out",
               "backbone", "backbone.layers.*")


def apply_attention(model: Pi05Model, kind: str) -> None:
    model.set_attention(kind)


def apply_recompute_option(model: Pi05Model, recompute) -> list[str]:
    if recompute == "none":
        return []
    return apply_recompute(model, NESTED_FULL if recompute == "nested-full" else recompute)


def apply_compile(model: Pi05Model, mode: str) -> None:
    """`backbone`: one compile unit for the fixed-shape joint layers and final norms; the vision loop
    and prefix assembly stay eager (their shapes and Python control flow vary with the cameras)."""
    if mode == "none":
        return
    if mode == "backbone":
        model.backbone = torch.compile(model.backbone, fullgraph=True)
        return
    raise ValueError(f"compile mode {mode!r} is not implemented yet")


def apply_options(model: Pi05Model, options: Pi05Options) -> Pi05Model:
    model.camera_slots = options.camera_slots
    apply_attention(model, options.attention)
    apply_recompute_option(model, options.recompute)
    apply_compile(model, options.compile)
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
