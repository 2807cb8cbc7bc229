"""FlexAttention for the joint attention (the `attention: flex` option).

Eager attention materialises the [B, H, Tq, Tk] scores and probabilities and repeats the single
K/V head to all query heads. FlexAttention runs one fused kernel that skips fully masked 128x128
blocks, reads the one K/V head for every query head (`enable_gqa`) and keeps only the output and
the log-sum-exp for backward. The Pi0.5 mask depends only on per-token padding and block ids, so it
is expressed as a `mask_mod` over four small per-batch tensors.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

BLOCK_SIZE = 128  # the kernels' tile; a block fully outside the mask is skipped without being read


@functools.cache
def compiled_flex():
    """flex_attention compiled, made on first use: nothing may compile (or import triton) at import time,
    since importing triton in a process that already holds a Mesa EGL context crashes it.

    Called eagerly, flex_attention runs an unfused reference (scores materialised per head); compiling
    it generates the fused kernel. dynamic=False: the shapes of a training run are fixed, and static
    shapes give the best kernel (a new shape, e.g. inference, compiles once more)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def block_mask(pad_q: torch.Tensor, cum_q: torch.Tensor, pad_k: torch.Tensor, cum_k: torch.Tensor) -> BlockMask:
    """The Pi0.5 mask (same semantics as attention.bool_mask) as a BlockMask, built once per step.

    pad_q [B, Tq] / pad_k [B, Tk]: True for real tokens. cum_q / cum_k: cumsum of the autoregressive
    flags. Query i may attend key j iff cum_k[b, j] <= cum_q[b, i] and both are real tokens.
    """
    from torch.nn.attention.flex_attention import create_block_mask

    b, tq = pad_q.shape
    tk = pad_k.shape[1]

    def mask_mod(batch, head, q_idx, kv_idx):
        # Plain indexing of captured tensors: flex traces this into its kernel (and vmaps it here).
        return (cum_k[batch, kv_idx] <= cum_q[batch, q_idx]) & pad_q[batch, q_idx] & pad_k[batch, kv_idx]

    # H=None: the mask is the same for every head, so one head's block table is broadcast.
    return create_block_mask(mask_mod, B=b, H=None, Q_LEN=tq, KV_LEN=tk, device=pad_q.device, BLOCK_SIZE=BLOCK_SIZE)


def flex_joint_attention(q, k, v, mask: BlockMask, scale: float) -> torch.Tensor:
    """q [B, H, Tq, D], k/v [B, Hkv, Tk, D] -> [B, H, Tq, D].

    Query rows with no allowed key (padding tokens) come out as zeros, where eager attention gives a
    uniform average; padding rows never reach a real token, so the valid outputs are the same.
    """
    from torch.nn.attention.flex_attention import flex_attention

    if torch.compiler.is_compiling() or q.device.type == "cpu":
        # Inside a compiled region (compile: backbone / per-layer) the outer compile fuses it; on CPU
        # there is no backward anyway and the eager reference avoids a C++ compile per shape.
        attend = flex_attention
    else:
        attend = compiled_flex()
    return attend(q, k, v, block_mask=mask, scale=scale, enable_gqa=k.shape[1] != q.shape[1])


def eager_attention_activation_bytes(
    batch: int, heads: int, tq: int, tk: int, bytes_per_el: int, head_dim: int = 256, kv_heads: int = 1
) -> int:
    """Bytes that eager attention (attention.eager_attention) keeps for backward per layer, beyond
    what FlexAttention keeps; the defaults are Pi0.5's (Gemma: 8 heads, 1 KV head, head_dim 256).

        repeated K and V  2 * B * (H - Hkv) * Tk * D * bytes   (the Hkv originals exist either way)
        fp32 softmax      B * H * Tq * Tk * 4                  (softmax's backward needs its output)
        its bf16 copy     B * H * Tq * Tk * bytes              (probs @ V saves its left operand)

    The scores themselves (scale and mask applied, cast to fp32) are only transient: nothing saves
    them. FlexAttention saves q, k and v (as eager does), the output (o_proj saves it in both paths)
    and an fp32 log-sum-exp of B * H * Tq * 4 bytes, ~0.1% of the above, ignored here.
    Pi0.5 at micro-batch 32, 2 cameras (Tq = Tk = 762), bf16: 0.99 GiB per layer.
    """
    repeated_kv = 2 * batch * (heads - kv_heads) * tk * head_dim * bytes_per_el
    probs = batch * heads * tq * tk * (4 + bytes_per_el)
    return repeated_kv + probs
