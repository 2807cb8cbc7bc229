"""Attention kernels and masks. Masks are boolean, True = may attend, broadcast over heads.

The reference runs flash-attention-2 (asserted for Eagle-Block2A-2B-v2; varlen over packed images and over
left-padded token sequences) and SDPA in the DiT (diffusers' AttnProcessor2_0). `sdpa` is the plain-PyTorch
equivalent everywhere; `eager` materialises the scores with an fp32 softmax (transformers' eager path).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F

AttentionKind = Literal["sdpa", "eager"]
KINDS = get_args(AttentionKind)


def attend(q, k, v, mask, kind: str, scale: float | None = None) -> torch.Tensor:
    """q [B, H, Tq, D], k/v [B, Hkv, Tk, D] (grouped-query when Hkv < H), mask bool broadcastable to
    [B, H, Tq, Tk] or None. Every query row must allow at least one key (no NaN rows)."""
    if kind == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=k.shape[1] != q.shape[1])
    if kind != "eager":
        raise ValueError(f"unknown attention kind {kind!r}")
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = torch.matmul(q, k.transpose(2, 3)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(probs, v)


def causal_padding_mask(valid: torch.Tensor) -> torch.Tensor:
    """[B, L] valid tokens -> [B, 1, L, L]: causal attention among valid tokens, as flash-attention's varlen
    path computes for a left-padded batch. A padding query attends to itself only, so its row stays finite
    (the reference leaves zeros there); no valid token reads it and the DiT masks it out."""
    length = valid.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=valid.device).tril()
    eye = torch.eye(length, dtype=torch.bool, device=valid.device)
    return ((causal & valid[:, None, :]) | eye)[:, None]


def key_mask(valid: torch.Tensor) -> torch.Tensor:
    """[B, S] keys a query may read -> [B, 1, 1, S] (diffusers repeats it per head: the same thing)."""
    return valid[:, None, None, :]
