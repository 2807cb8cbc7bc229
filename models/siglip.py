"""The SigLIP encoder layer both families' vision towers stack (Pi0.5's SigLIP So400m/14, GR00T N1.6's SigLIP2), and
its names in the released checkpoints (transformers' `SiglipEncoderLayer` / `Siglip2EncoderLayer`: the same).

A layer is pre-LayerNorm attention over every patch (no mask), then a tanh-GELU MLP, all Linears with biases.
The attention kernel is the family's (`kernel(q, k, v, kind)`, q/k/v [N, heads, patches, head_dim]), since each
family selects its kernels its own way and their SDPA calls differ in how the scale is passed; `kind` is the
layer's switch that a family's `set_attention` writes. Module names are part of the interface (checkpoint mapping,
recompute and compile patterns): `norm1`, `attn.{q,k,v,out}_proj`, `norm2`, `mlp.fc{1,2}`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

import torch
import torch.nn.functional as F
from torch import nn

from .fp8_mlp import fp8_bias_gelu_mlp

Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, str], torch.Tensor]
# Where fc1 adds its bias (both families' `vision_fc1_bias` option): in the GEMM (nn.Linear, as the references), or in
# the GELU's kernel after a GEMM without bias (VisionMLP.bias_in_gelu says why)
Fc1Bias = Literal["gemm", "gelu"]


class LayerShape(Protocol):
    """What a layer reads from a family's vision config."""

    width: int
    heads: int
    mlp: int
    eps: float


class VisionAttention(nn.Module):
    def __init__(self, cfg: LayerShape, kernel: Kernel, kind: str):
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.width // cfg.heads
        self.q_proj = nn.Linear(cfg.width, cfg.width)
        self.k_proj = nn.Linear(cfg.width, cfg.width)
        self.v_proj = nn.Linear(cfg.width, cfg.width)
        self.out_proj = nn.Linear(cfg.width, cfg.width)
        self.kernel = kernel
        self.kind = kind

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (
            p(x).view(b, t, self.heads, self.head_dim).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj)
        )
        out = self.kernel(q, k, v, self.kind)  # every patch of the image: no mask, no windows
        return self.out_proj(out.transpose(1, 2).reshape(b, t, -1))


class VisionMLP(nn.Module):
    def __init__(self, cfg: LayerShape):
        super().__init__()
        self.fp8_function = False  # set by Pi0.5's `fp8_vision_mlp: triton` switch: the MLP as one FP8 function
        # set by the families' `vision_fc1_bias: gelu` switch (set_fc1_bias; a plain Linear fc1 only): fc1 a GEMM
        # without bias, its bias added in the GELU's kernel. At fc1's shape aten's addmm does not take cuBLASLt's bias
        # epilogue and first copies the bias, broadcast, into the whole output, a strided copy of [tokens, mlp] (0.11
        # ms a layer at Pi0.5's batch 32 on an H200, scripts/siglip_layer_kernels.py). The GEMM's output is then
        # rounded to the model's dtype before the bias is added.
        self.bias_in_gelu = False
        self.fc1 = nn.Linear(cfg.width, cfg.mlp)
        self.fc2 = nn.Linear(cfg.mlp, cfg.width)

    def forward(self, x):
        if self.fp8_function:
            return fp8_bias_gelu_mlp(x, self.fc1.weight, self.fc1.bias, self.fc2.weight, self.fc2.bias)
        if self.bias_in_gelu:  # in 2-D, the GEMM's own shape, so the bias gradient can sum the GELU's gradient
            rows = x.reshape(-1, x.shape[-1])
            h = F.gelu(F.linear(rows, self.fc1.weight) + self.fc1.bias, approximate="tanh")
            return self.fc2(h).reshape(*x.shape[:-1], -1)
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))  # gelu_pytorch_tanh


def set_fc1_bias(tower: nn.Module, where: Fc1Bias) -> None:
    """Every VisionMLP of `tower` whose fc1 is a plain nn.Linear (not a torchao Float8Linear, which adds its own bias)
    adds fc1's bias where `where` says."""
    for mlp in tower.modules():
        if isinstance(mlp, VisionMLP) and type(mlp.fc1) is nn.Linear:
            mlp.bias_in_gelu = where == "gelu"


class VisionLayer(nn.Module):
    """Pre-LayerNorm transformer block with biases."""

    def __init__(self, cfg: LayerShape, kernel: Kernel, kind: str):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.attn = VisionAttention(cfg, kernel, kind)
        self.norm2 = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.mlp = VisionMLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


# (our name in a layer, the reference's name in `encoder.layers.N`), each with a weight and a bias
LAYER_NAMES = (
    ("norm1", "layer_norm1"),
    ("norm2", "layer_norm2"),
    ("attn.q_proj", "self_attn.q_proj"),
    ("attn.k_proj", "self_attn.k_proj"),
    ("attn.v_proj", "self_attn.v_proj"),
    ("attn.out_proj", "self_attn.out_proj"),
    ("mlp.fc1", "mlp.fc1"),
    ("mlp.fc2", "mlp.fc2"),
)


def layer_rules(ours: str, ref: str) -> list[tuple[str, str]]:
    """(our name, reference name) patterns of every layer parameter, `{n}` the layer index: `ours` is the
    tower's module (e.g. `vision`), `ref` the reference's `vision_model` (its encoder holds the layers)."""
    return [
        (f"{ours}.layers.{{n}}.{o}.{p}", f"{ref}.encoder.layers.{{n}}.{r}.{p}")
        for o, r in LAYER_NAMES
        for p in ("weight", "bias")
    ]


def embedding_rules(ours: str, ref: str) -> list[tuple[str, str]]:
    """(our name, reference name) of the patch and position embeddings and the post-LayerNorm."""
    both = ("weight", "bias")
    rules = [(f"{ours}.patch_embed.{p}", f"{ref}.embeddings.patch_embedding.{p}") for p in both]
    rules += [(f"{ours}.pos_embed.weight", f"{ref}.embeddings.position_embedding.weight")]
    rules += [(f"{ours}.post_norm.{p}", f"{ref}.post_layernorm.{p}") for p in both]
    return rules


__all__ = ["LAYER_NAMES", "VisionAttention", "VisionLayer", "VisionMLP", "embedding_rules", "layer_rules"]
