"""Analytic useful FLOPs of Pi0.5 (2 FLOPs per multiply-add). Useful means: real cameras only (no
placeholder slots), no recompute; training = 3x forward (forward, grad of inputs, grad of weights)."""

from __future__ import annotations

from .config import GemmaConfig, Pi05Config


def _gemma_linear_macs_per_token(c: GemmaConfig) -> int:
    q_out, kv_out = c.heads * c.head_dim, c.kv_heads * c.head_dim
    return c.width * q_out + 2 * c.width * kv_out + q_out * c.width + 3 * c.width * c.mlp


def forward_flops_per_sample(cfg: Pi05Config, cameras: int, text_tokens: int, action_horizon: int) -> dict:
    v = cfg.vision
    n = v.tokens
    per_image = (
        n * 3 * v.patch_size**2 * v.width  # patch embedding
        + v.layers * n * (4 * v.width**2 + 2 * v.width * v.mlp)  # q, k, v, o, fc1, fc2
        + v.layers * 2 * n * n * v.width  # scores and weighted sum
        + n * v.width * cfg.llm.width
    )  # projector
    prefix = cameras * n + text_tokens
    total = prefix + action_horizon
    e = cfg.expert
    ada_norms = 2 * e.layers + 1
    macs = {
        "vision": cameras * per_image,
        "llm_linear": prefix * cfg.llm.layers * _gemma_linear_macs_per_token(cfg.llm),
        "expert_linear": action_horizon * e.layers * _gemma_linear_macs_per_token(e)
        + ada_norms * e.width * 3 * e.width,
        # Dense over the whole (unpadded-slot) sequence, as the published estimate counts it.
        "attention": cfg.llm.layers * 2 * total * total * cfg.llm.heads * cfg.llm.head_dim,
        "action_time": 2 * action_horizon * cfg.action_dim * e.width + 2 * e.width**2,
    }
    return {k: 2.0 * m for k, m in macs.items()}


def prefix_tail_flops_per_sample(cfg: Pi05Config, cameras: int, text_tokens: int) -> float:
    """Forward FLOPs of the last layer's prefix output projection and MLP (the `prefix_tail: false` option
    skips them: the loss never reads them)."""
    c = cfg.llm
    return 2.0 * (cameras * cfg.vision.tokens + text_tokens) * (c.heads * c.head_dim * c.width + 3 * c.width * c.mlp)


def train_flops_per_sample(cfg: Pi05Config, cameras: int, text_tokens: int, action_horizon: int) -> float:
    return 3.0 * sum(forward_flops_per_sample(cfg, cameras, text_tokens, action_horizon).values())


def floor_ops(cfg: Pi05Config, batch: int, cameras: int, text_tokens: int, action_horizon: int):
    """Every forward GEMM and attention call of a training step with real cameras only (the floor: no
    placeholder slot, no recompute); every weight trains. Only the work the loss needs: the last layer's prefix
    counts its keys and values alone, as its queries, their attention rows, output projection and MLP reach no
    loss (the actions read the prefix only through keys and values), as GR00T's floor leaves out its discarded
    lm_head. The analytic FLOPs (forward_flops_per_sample) count them, as the references compute them."""
    from ..floor import Attention, Gemm

    v, llm, e = cfg.vision, cfg.llm, cfg.expert
    img = batch * v.tokens  # rows per camera: every image of the batch, its tokens
    q_out, kv_out = llm.heads * llm.head_dim, llm.kv_heads * llm.head_dim
    prefix, suffix = batch * (cameras * v.tokens + text_tokens), batch * action_horizon
    queried = llm.layers - 1  # layers whose prefix queries, output projection and MLP the loss needs (not the last)
    layers = [
        Gemm("siglip patch embed", img, v.width, 3 * v.patch_size**2, cameras, input_grad=False),
        Gemm("siglip qkv", img, v.width, v.width, 3 * v.layers * cameras),
        Gemm("siglip out", img, v.width, v.width, v.layers * cameras),
        Gemm("siglip fc1", img, v.mlp, v.width, v.layers * cameras),
        Gemm("siglip fc2", img, v.width, v.mlp, v.layers * cameras),
        Gemm("projector", img, llm.width, v.width, cameras),
        Gemm("gemma q", prefix, q_out, llm.width, queried),
        Gemm("gemma kv", prefix, kv_out, llm.width, 2 * llm.layers),
        Gemm("gemma o", prefix, llm.width, q_out, queried),
        Gemm("gemma gate/up", prefix, llm.mlp, llm.width, 2 * queried),
        Gemm("gemma down", prefix, llm.width, llm.mlp, queried),
        Gemm("expert q", suffix, q_out, e.width, e.layers),
        Gemm("expert kv", suffix, kv_out, e.width, 2 * e.layers),
        Gemm("expert o", suffix, e.width, q_out, e.layers),
        Gemm("expert gate/up", suffix, e.mlp, e.width, 2 * e.layers),
        Gemm("expert down", suffix, e.width, e.mlp, e.layers),
        Gemm("adaRMS dense", batch, 3 * e.width, e.width, 2 * e.layers + 1),
        Gemm("time mlp", batch, e.width, e.width, 2),
        Gemm("action in", suffix, e.width, cfg.action_dim, 1, input_grad=False),
        Gemm("action out", suffix, cfg.action_dim, e.width, 1),
    ]
    total = cameras * v.tokens + text_tokens + action_horizon
    attention = [
        Attention(
            "siglip attention", batch * cameras, v.heads, v.heads, v.tokens, v.tokens, v.width // v.heads, v.layers
        ),
        Attention(
            "joint attention",
            batch,
            llm.heads,
            llm.kv_heads,
            total,
            total,
            llm.head_dim,
            queried,
            mask="prefix-suffix",
            prefix=cameras * v.tokens + text_tokens,
        ),
        # the last layer: the actions' queries over every key
        Attention("joint attention, last layer", batch, llm.heads, llm.kv_heads, action_horizon, total, llm.head_dim),
    ]
    return layers, attention
