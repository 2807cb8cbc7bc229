"""Attention kernels for the joint (prefix + suffix) attention and the vision tower.

Masks are boolean [B, Tq, Tk] with True = may attend. Each kind turns that into what its kernel
wants once per step (`prepare_mask`), so the 18 layers share one mask object.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import nn

# openpi's masked value: the most negative bf16-safe float, so masked scores vanish after softmax
# and a fully masked (padding) row stays finite (uniform) instead of NaN.
MASKED_VALUE = -2.3819763e38


def repeat_kv(x: torch.Tensor, n: int) -> torch.Tensor:
    """[B, Hkv, T, D] -> [B, Hkv * n, T, D]: the community path materialises MQA K/V per query head."""
    return x if n == 1 else x.repeat_interleave(n, dim=1)


def eager_attention(q, k, v, additive_mask, scale: float) -> torch.Tensor:
    """The community kernel: repeated K/V, materialised [B, H, Tq, Tk] scores, fp32 softmax."""
    k, v = repeat_kv(k, q.shape[1] // k.shape[1]), repeat_kv(v, q.shape[1] // v.shape[1])
    scores = torch.matmul(q, k.transpose(2, 3)) * scale
    if additive_mask is not None:
        scores = scores + additive_mask
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v)


def sdpa_attention(q, k, v, additive_mask, scale: float) -> torch.Tensor:
    """PyTorch SDPA (flash / memory-efficient / math as the backend picks), GQA without a K/V copy."""
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=additive_mask, scale=scale, enable_gqa=k.shape[1] != q.shape[1]
    )


# eager: the community kernel above; sdpa: SDPA everywhere; flex: FlexAttention with a BlockMask; fused: the
# vendor's fused kernel, npu_fusion_attention on an NPU and SDPA (flash or memory-efficient) elsewhere.
AttentionKind = Literal["eager", "sdpa", "flex", "fused"]
KINDS = get_args(AttentionKind)


class JointAttention(nn.Module):
    """softmax(QK^T / sqrt(d) + mask) V over the concatenated streams. Holds no parameters, so a
    recompute pattern (`backbone.layers.*.attention`) can target the attention core alone."""

    def __init__(self, kind: AttentionKind = "eager", scale: float = 1.0):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"unknown attention kind {kind!r}")
        self.kind, self.scale = kind, scale

    def forward(self, q, k, v, mask):
        if self.kind == "eager":
            return eager_attention(q, k, v, mask, self.scale)
        if self.kind == "sdpa" or (self.kind == "fused" and q.device.type != "npu"):
            return sdpa_attention(q, k, v, mask, self.scale)
        if self.kind == "fused":
            from ..npu import fusion_attention

            return fusion_attention(q, k, v, mask, self.scale)
        from .flex import flex_joint_attention  # imported lazily: flex needs a recent torch

        return flex_joint_attention(q, k, v, mask, self.scale)


def bool_mask(pad_q, cum_q, pad_k, cum_k) -> torch.Tensor:
    """The Pi0.5 mask, True = may attend, [B, Tq, Tk].

    `cum` is cumsum of the autoregressive flags (0 for prefix tokens, [1, 0, ...] for the action
    block): a query sees keys whose cum is <= its own, so the prefix is one bidirectional block that
    cannot see the suffix, and the actions see the prefix and each other. Padding neither sees nor is seen.
    """
    return (cum_k[:, None, :] <= cum_q[:, :, None]) & pad_q[:, :, None] & pad_k[:, None, :]


def prepare_mask(kind: str, pad_q, cum_q, pad_k, cum_k, dtype: torch.dtype):
    """The mask object an attention kind consumes, built once per step and shared by all layers."""
    if kind == "fused" and pad_q.device.type == "npu":
        return ~bool_mask(pad_q, cum_q, pad_k, cum_k)[:, None]  # npu_fusion_attention: True = masked
    if kind in ("eager", "sdpa", "fused"):
        allowed = bool_mask(pad_q, cum_q, pad_k, cum_k)
        zero = torch.zeros((), dtype=dtype, device=allowed.device)
        neg = torch.full((), MASKED_VALUE, dtype=dtype, device=allowed.device)
        return torch.where(allowed, zero, neg)[:, None]  # [B, 1, Tq, Tk], broadcast over heads
    from .flex import block_mask

    return block_mask(pad_q, cum_q, pad_k, cum_k)
