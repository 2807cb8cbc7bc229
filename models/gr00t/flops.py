"""Analytic FLOPs of a GR00T N1.6 training step per sample (2 FLOPs per multiply-add).

Forward of everything the step computes (frozen vision, `mlp1`, all 16 LLM layers, the discarded lm_head unless
it is skipped, the DiT and the per-embodiment encoders/decoder); backward (2x forward: input and weight
gradients) of the trainable parts only: the DiT with its encoders/decoder and the top LLM layers. The lm_head's
logits never reach the loss, so it has no backward. The LLM's causal attention counts the L(L+1)/2 query-key
pairs it needs; the DiT's cross-attention is dense over the whole VL sequence (masking does not skip keys).
Counted at the VL length given (LoongForge pads it to 220), so every rung of a ladder shares one figure.
"""

from __future__ import annotations

from .config import Gr00tConfig


def llm_layer_macs(cfg: Gr00tConfig, tokens: int) -> int:
    c = cfg.llm
    q, kv = c.heads * c.head_dim, c.kv_heads * c.head_dim
    linear = tokens * (c.width * q + 2 * c.width * kv + q * c.width + 3 * c.width * c.mlp)
    return linear + 2 * (tokens * (tokens + 1) // 2) * q  # scores and weighted sum over causal pairs


def forward_flops_per_sample(
    cfg: Gr00tConfig, cameras: int, vl_tokens: int, action_horizon: int, lm_head: bool = True
) -> dict[str, float]:
    v, d, h = cfg.vision, cfg.dit, cfg.head
    n, w = v.patches**2, v.width
    per_image = (
        n * 3 * v.patch_size** 2 * w  # Linear patch embedding
        + v.layers * (n * (4 * w * w + 2 * w * v.mlp) + 2 * n * n * w)
    )  # q, k, v, o, MLP; attention
    frozen_layers = cfg.llm.layers - cfg.tune_top_llm_layers
    t, s, dw = 1 + action_horizon, vl_tokens, d.width  # DiT tokens: the state token and the actions
    self_block = t * (4 * dw * dw + 2 * dw * d.mlp) + 2 * t * t * dw
    cross_block = t * (2 * dw * dw + 2 * dw * d.mlp) + s * 2 * cfg.llm.width * dw + 2 * t * s * dw
    blocks = [self_block if i % 2 else cross_block for i in range(d.layers)]
    macs = {
        "vision": cameras * per_image,
        "mlp1": cameras * v.tokens * (v.unshuffled_width * cfg.llm.width + cfg.llm.width**2),
        "llm_frozen": frozen_layers * llm_layer_macs(cfg, vl_tokens),
        "llm_trainable": cfg.tune_top_llm_layers * llm_layer_macs(cfg, vl_tokens),
        "lm_head": vl_tokens * cfg.llm.width * cfg.llm.vocab if lm_head else 0,
        "dit": (
            d.time_channels * dw
            + dw * dw  # timestep encoder
            + sum(blocks)
            + d.layers * dw * 2 * dw  # blocks and their AdaLN modulation
            + dw * 2 * dw
            + t * dw * d.out
        ),  # output modulation and projection
        "action_io": (
            h.state_dim * h.hidden
            + h.hidden * dw  # state encoder
            + action_horizon * (h.action_dim * dw + 2 * dw * dw + dw * dw)  # action encoder
            + t * (d.out * h.hidden + h.hidden * h.action_dim)
        ),  # action decoder
    }
    return {k: 2.0 * m for k, m in macs.items()}


TRAINABLE_PARTS = ("llm_trainable", "dit", "action_io")


def train_flops_per_sample(
    cfg: Gr00tConfig, cameras: int, vl_tokens: int, action_horizon: int, lm_head: bool = True
) -> float:
    fwd = forward_flops_per_sample(cfg, cameras, vl_tokens, action_horizon, lm_head)
    return sum(fwd.values()) + 2.0 * sum(fwd[k] for k in TRAINABLE_PARTS)
