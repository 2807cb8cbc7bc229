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


def train_flops_per_sample(cfg: Pi05Config, cameras: int, text_tokens: int, action_horizon: int) -> float:
    return 3.0 * sum(forward_flops_per_sample(cfg, cameras, text_tokens, action_horizon).values())
