"""The optimization switches, each applied to the plain model after it is built, in a fixed order
(lm_head, VL padding, attention kernel, fc1's bias, FP8 linears, bf16 weight copies, compile, recompute), in the
manner of torchtitan's parallelize. The `cuda_graphs` switch changes how a step runs, not the model: the family's
make_step applies it (graphs.py)."""

from __future__ import annotations

import re

import torch
from torch import nn

from ..compile_units import compile_units
from ..family import Applied
from ..fp8 import MIN_FEATURES, apply_fp8, fp8_candidates
from ..recompute import apply_recompute, unwrapped_name
from ..schema import SchemaError
from ..siglip import set_fc1_bias
from ..weight_copies import copy_trainable_weights
from .checkpoint import reference_names
from .model import Gr00tModel
from .options import Gr00tOptions

# FP8 goes to the DiT blocks only: the backbone is frozen and large parts of it run once per image. Inside a
# block every projection and FeedForward GEMM qualifies by shape; the AdaLN modulation Linear runs on one
# timestep embedding per sample (B rows), where FP8's casts cost more than its GEMM saves, and it scales every
# block's activations, so it keeps full precision (as Pi0.5 keeps its adaRMS denses).
FP8_SKIP = ("*.norm1.linear",)


def fp8_linears(model: Gr00tModel, min_features: int = MIN_FEATURES) -> list[str]:
    """The linears `linear: fp8` converts (full names), without converting anything."""
    return ["dit.blocks." + n for n in fp8_candidates(model.dit.blocks, min_features, FP8_SKIP)]


def apply_linear(
    model: Gr00tModel, options: Gr00tOptions, min_features: int = MIN_FEATURES, emulate: bool = False
) -> list[str]:
    """torchao float8 training for the DiT blocks' large linears (`linear: fp8`); returns their full names.
    `emulate` casts to FP8 but multiplies in high precision (CPU tests)."""
    if options.linear != "fp8":
        return []
    names = apply_fp8(model.dit.blocks, options.fp8_recipe, min_features, FP8_SKIP, emulate)
    return ["dit.blocks." + n for n in names]


def apply_compile(model: Gr00tModel, mode: str, backend: str = "inductor") -> list[str]:
    """Compile units, compiled in place (models/compile_units.py); returns their names. per-block: each SigLIP2
    layer, LLM layer and DiT block (layers of a stack share code and shapes, so one graph serves them all; DiT self-
    and cross-attention blocks get one each)."""
    if mode == "none":
        return []
    if mode != "per-block":
        raise ValueError(f"unknown compile mode {mode!r}")
    units = {f"vision.layers.{i}": m for i, m in enumerate(model.vision.layers)}
    units.update({f"llm.layers.{i}": m for i, m in enumerate(model.llm.layers)})
    units.update({f"dit.blocks.{i}": m for i, m in enumerate(model.dit.blocks)})
    return compile_units(units, backend)


def apply_recompute_option(model: Gr00tModel, recompute) -> list[str]:
    """Checkpoint every module matching the option's patterns (after compile: a compiled unit runs inside its
    checkpoint), restoring the forward's RNG state for the recompute so that the DiT's dropout draws the
    forward's masks; returns the wrapped names."""
    if recompute == "none":
        return []
    return apply_recompute(model, recompute.patterns, preserve_rng_state=True)


def apply_options(model: Gr00tModel, options: Gr00tOptions, compile_backend: str = "inductor") -> Applied:
    """Apply every switch to the plain model, in place and in a fixed order; returns what was applied."""
    model.llm.lm_head = options.lm_head
    model.vl_pad = options.vl_pad
    model.reference_syncs = model.vision.reference_syncs = options.host_syncs == "reference"
    model.vision.reference_packing = options.vision_packing == "reference"
    model.set_attention(options.attention)
    set_fc1_bias(model.vision, options.vision_fc1_bias)
    fp8 = apply_linear(model, options)
    copied = apply_bf16_weights(model, options.bf16_weights)
    units = apply_compile(model, options.compile, compile_backend)
    recomputed = apply_recompute_option(model, options.recompute)
    return Applied(
        fp8_linears=tuple(fp8), recomputed=tuple(recomputed), compile_units=tuple(units), weight_copies=tuple(copied)
    )


def apply_bf16_weights(model: Gr00tModel, where: str) -> list[str]:
    """`bf16_weights: optimizer`: every trainable plain linear (not the FP8 ones) reads a bf16 copy of its weight
    that the optimizer writes (models/weight_copies.py); needs the bf16 workload's autocast."""
    if where == "autocast":
        return []
    if model.autocast_dtype is None:
        raise SchemaError(
            "bf16_weights", "autocast for an fp32 workload (the copies stand for autocast's bf16 casts)", where
        )
    return copy_trainable_weights(model, model.autocast_dtype)


# transformers' Trainer (get_decay_parameter_names): no weight decay for nn.LayerNorm parameters nor for names
# matching these patterns, matched on the reference's (lower-cased) parameter names.
NO_DECAY_PATTERNS = (r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)")


def weight_decay_groups(model: Gr00tModel, weight_decay: float) -> list[dict]:
    """The trainable parameters in two AdamW groups as the reference's Trainer splits them. The per-embodiment
    biases are named `b` there, so they are decayed like weights. Names are read without recompute wrappers."""
    ref = reference_names(model.cfg)
    layer_norms = {
        f"{m}.{p}" if m else p
        for m, mod in model.named_modules()
        if isinstance(mod, nn.LayerNorm)
        for p, _ in mod.named_parameters(recurse=False)
    }
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        plain = unwrapped_name(model, name)
        ref_name = ref.get(plain, plain).lower()
        if name in layer_norms or any(re.search(pattern, ref_name) for pattern in NO_DECAY_PATTERNS):
            no_decay.append(p)
        else:
            decay.append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def count_parameters(model: nn.Module, trainable: bool = False) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable)


def set_tf32(enabled: bool = True) -> None:
    """TF32 matmuls and convolutions (the reference's `tf32: True`); under bf16 autocast it touches only the
    few matmuls left in fp32."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
