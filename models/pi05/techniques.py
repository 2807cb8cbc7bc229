"""The optimization switches, each one function applied to the plain model in a fixed order
(attention kernel, FP8 linears, recompute, compile), in the manner of torchtitan's parallelize."""

from __future__ import annotations

import torch
from torch import nn

from ..compile_units import CompileTuning, compile_units
from ..family import Applied
from ..fp8 import apply_fp8, fp8_filter
from ..fused import fuse_linears
from ..npu import NpuGateUp
from ..recompute import apply_recompute
from ..siglip import VisionMLP, set_fc1_bias
from .model import GemmaBlock, GemmaMLP, Pi05Model, RMSNorm, unwrapped
from .options import Pi05Options

# openpi's gradient checkpointing, nested: each image embedding (its SigLIP layers do not checkpoint on their
# own), the text embedding, the time MLP, action in/out, the whole joint forward and each joint layer again.
NESTED_FULL = (
    "vision",
    "text_embed",
    "suffix_embed.time_mlp",
    "suffix_embed.action_in",
    "action_out",
    "backbone",
    "backbone.layers.*",
)

# What openpi keeps in fp32 when it trains in bf16 (PaliGemmaWithExpertModel.to_bfloat16_for_selected_params,
# and the action/time projections it never converts): every RMSNorm (adaRMS Dense included) is added below.
OPENPI_FP32 = (
    "vision.patch_embed",
    "vision.pos_embed",
    "suffix_embed.action_in",
    "suffix_embed.time_mlp",
    "action_out",
)

# Linears that run once per sample on the flow-time condition, not per token: B-row GEMMs gain nothing
# from FP8, and the adaRMS scale/shift/gate modulate every expert layer, so they keep full precision.
FP8_SKIP = ("suffix_embed.time_mlp.*", "backbone.layers.*.suffix.*.dense", "backbone.suffix_norm.dense")
# The vision tower runs eagerly unless `compile_vision` (its loop follows the cameras), and eager FP8 linears pay
# for unfused amax/scale/cast kernels around each GEMM: measured on the H200, converting an eager SigLIP made the
# whole step 2.3x slower. FP8 therefore goes only where a compile unit fuses those casts: the backbone, and
# SigLIP's layers when they are compiled (its projector, after the loop, stays eager and bf16).
FP8_SKIP_EAGER_VISION = ("vision.layers.*.attn.*", "vision.layers.*.mlp.*", "vision.projector")
FP8_SKIP_COMPILED_VISION = ("vision.projector",)


def apply_attention(model: Pi05Model, kind: str, vision: str = "sdpa") -> None:
    model.set_attention(kind, vision)


def apply_precision(model: Pi05Model, precision: str) -> list[str]:
    """openpi's mixed precision: the modules it keeps in fp32 go back to fp32 in a bf16 model; returns them."""
    if precision != "openpi" or model.stream_dtype() != torch.bfloat16:
        return []
    names = [n for n, m in model.named_modules() if n in OPENPI_FP32 or isinstance(m, RMSNorm)]
    for name in names:
        model.get_submodule(name).float()
    return names


def fuse_qkv(model: Pi05Model) -> None:
    """Q, K and V of every Gemma block (both streams) as one Linear, split after the GEMM."""
    for block in model.modules():
        if isinstance(block, GemmaBlock):
            block.qkv_proj = fuse_linears(block, ["q_proj", "k_proj", "v_proj"], "qkv_proj")


def fuse_gate_up(model: Pi05Model) -> None:
    """Gate and up projections of every Gemma MLP as one GEMM: npu_grouped_matmul (hand-written backward)
    on an NPU, one concatenated Linear elsewhere."""
    for mlp in model.modules():
        if isinstance(mlp, GemmaMLP):
            if mlp.gate_proj.weight.device.type == "npu":
                mlp.gate_up = NpuGateUp(mlp.gate_proj, mlp.up_proj)
                del mlp.gate_proj, mlp.up_proj  # now held by the NpuGateUp module (mlp.gate_up.*)
            else:
                mlp.gate_up = fuse_linears(mlp, ["gate_proj", "up_proj"], "gate_up")


def apply_linear(model: Pi05Model, options: Pi05Options) -> list[str]:
    """FP8 training linears (`linear: fp8`); returns the names of the linears that run in FP8."""
    if options.linear != "fp8":
        return []
    skip = FP8_SKIP + (FP8_SKIP_COMPILED_VISION if options.compile_vision else FP8_SKIP_EAGER_VISION)
    mlp_linears = apply_fp8_mlp(model, options, skip)
    return mlp_linears + apply_fp8(
        model, options.fp8_recipe, min_features=model.cfg.fp8_min_features, skip=skip + tuple(mlp_linears)
    )


def apply_fp8_mlp(model: Pi05Model, options: Pi05Options, skip: tuple[str, ...]) -> list[str]:
    """`fp8_mlp: triton` (every Gemma MLP, both streams) and `fp8_vision_mlp: triton` (every SigLIP MLP): each MLP
    whose linears torchao would convert runs as one FP8 function (models/fp8_mlp.py) instead of torchao's linears;
    returns their names, which torchao then skips."""
    switches = {
        "fp8_mlp": (GemmaMLP, ("gate_proj", "up_proj", "down_proj")),
        "fp8_vision_mlp": (VisionMLP, ("fc1", "fc2")),
    }
    chosen = dict(kind for option, kind in switches.items() if getattr(options, option) == "triton")  # MLP: linears
    if chosen and options.fp8_recipe != "tensorwise":
        raise ValueError(
            f"fp8_mlp and fp8_vision_mlp: triton implement torchao's tensorwise recipe; this rung has fp8_recipe: "
            f"{options.fp8_recipe} (use fp8_recipe: tensorwise, or fp8_mlp and fp8_vision_mlp: torchao)"
        )
    if GemmaMLP in chosen and options.fused_gate_up:
        raise ValueError(
            "fp8_mlp: triton takes separate gate and up projections; this rung has fused_gate_up: true "
            "(use fused_gate_up: false, or fp8_mlp: torchao)"
        )
    if VisionMLP in chosen and not options.compile_vision:
        raise ValueError(
            "fp8_vision_mlp: triton needs compile_vision: true (SigLIP's layers train in FP8 only when compiled); "
            "this rung has compile_vision: false"
        )
    keep, names = fp8_filter(model.cfg.fp8_min_features, skip), []
    for name, mlp in model.named_modules():
        if type(mlp) not in chosen:
            continue
        linears = [f"{name}.{linear}" for linear in chosen[type(mlp)]]
        if all(keep(model.get_submodule(n), n) for n in linears):
            mlp.fp8_function = True
            names += linears
    return names


def apply_recompute_option(model: Pi05Model, recompute) -> list[str]:
    if recompute == "none":
        return []
    return apply_recompute(model, NESTED_FULL if recompute == "nested-full" else recompute.patterns)


def apply_compile(
    model: Pi05Model, mode: str, backend: str = "inductor", vision: bool = False, tuning: CompileTuning = "default"
) -> list[str]:
    """Compile units, compiled in place (models/compile_units.py); returns their names.

    backbone: one unit for the fixed-shape joint layers and final norms, fullgraph so that a graph
      break is an error. The vision loop and prefix assembly stay eager (their shapes and Python
      control flow follow the cameras in the batch).
    per-layer: each joint layer its own unit (one graph, reused by every layer since the layers share
      code and shapes), plus small units for the final norms, action-in + time MLP and action-out.
      Backward then finishes each layer's gradients separately, which lets DDP all-reduce them while
      the layers below still run backward.
    vision: also each SigLIP layer its own unit (with its recompute wrapper, as the joint layers).
    tuning: inductor's options for every unit (models/compile_units.py COMPILE_TUNING).
    """
    units: dict[str, nn.Module] = {}
    if vision:
        units.update({f"vision.layers.{i}": layer for i, layer in enumerate(unwrapped(model.vision).layers)})
    if mode == "backbone":
        units["backbone"] = model.backbone
    elif mode == "per-layer":
        layers = model.backbone_layers()
        backbone = unwrapped(model.backbone)
        units.update({f"backbone.layers.{i}": layer for i, layer in enumerate(layers)})
        units.update(
            {
                "backbone.prefix_norm": backbone.prefix_norm,
                "backbone.suffix_norm": backbone.suffix_norm,
                "suffix_embed": model.suffix_embed,
                "action_out": model.action_out,
            }
        )
    elif mode != "none":
        raise ValueError(f"unknown compile mode {mode!r}")
    return compile_units(units, backend, tuning)


def apply_options(model: Pi05Model, options: Pi05Options, compile_backend: str = "inductor") -> Applied:
    """Apply every switch to the plain model, in place and in a fixed order; returns what was applied."""
    model.camera_slots = options.camera_slots
    model.time_sampling = options.time_sampling
    model.batch_cameras = options.batch_cameras
    fp32 = apply_precision(model, options.precision)
    apply_attention(model, options.attention, options.vision_attention)
    if options.fused_qkv:
        fuse_qkv(model)
    if options.fused_gate_up:
        fuse_gate_up(model)
    fp8 = apply_linear(model, options)
    set_fc1_bias(unwrapped(model.vision), options.vision_fc1_bias)
    unwrapped(model.backbone_layers()[-1]).prefix_output = options.prefix_tail
    recomputed = apply_recompute_option(model, options.recompute)
    units = apply_compile(
        model, options.compile, compile_backend, vision=options.compile_vision, tuning=options.compile_tuning
    )
    return Applied(
        fp8_linears=tuple(fp8), recomputed=tuple(recomputed), compile_units=tuple(units), fp32_modules=tuple(fp32)
    )


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
