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


def floor_ops(cfg: Gr00tConfig, batch: int, cameras: int, vl_tokens: int, action_horizon: int):
    """Every forward GEMM and attention call of a training step (the kernel floor), with what runs backward:
    vision, `mlp1` and the bottom LLM layers are frozen and nothing before them trains, so they run forward only;
    the top LLM layers and the whole action head get both gradients (the first trainable layer's input too: its
    trainable RMSNorm needs it), except the layers on raw inputs (timestep sinusoid, state, noisy actions).
    The discarded lm_head is left out (a step need not compute it; `skip-lm-head` does not), so the floor's
    FLOPs are `train_flops_per_sample(..., lm_head=False)` less those three input gradients. The VL sequence
    is taken at `vl_tokens` as the analytic count takes it; the DiT's cross-attention reads all of it (the
    text/image key masks skip no work). The per-embodiment linears are one GEMM over the batch's rows (one
    embodiment per batch, as LIBERO's). FP8 may convert the DiT blocks' linears but their AdaLN (as `linear:
    fp8` does)."""
    from ..floor import Attention, Gemm

    v, c, d, h = cfg.vision, cfg.llm, cfg.dit, cfg.head
    images, dw = batch * cameras, d.width
    patches, tokens, actions = images * v.patches**2, batch * vl_tokens, batch * action_horizon
    dit_rows = batch * (1 + action_horizon)  # the state token and the actions
    q_out, kv_out = c.heads * c.head_dim, c.kv_heads * c.head_dim
    top, selfs = cfg.tune_top_llm_layers, d.layers // 2  # odd blocks self-attend, even ones cross-attend
    frozen = {"weight_grad": False, "input_grad": False, "fp8": False}
    head = {"fp8": False}

    def llm(name: str, layers: int, **grads) -> list:
        return [
            Gemm(f"{name} q", tokens, q_out, c.width, layers, **grads),
            Gemm(f"{name} k/v", tokens, kv_out, c.width, 2 * layers, **grads),
            Gemm(f"{name} o", tokens, c.width, q_out, layers, **grads),
            Gemm(f"{name} gate/up", tokens, c.mlp, c.width, 2 * layers, **grads),
            Gemm(f"{name} down", tokens, c.width, c.mlp, layers, **grads),
        ]

    layers = [
        Gemm("siglip patch embed", patches, v.width, 3 * v.patch_size**2, 1, **frozen),
        Gemm("siglip q/k/v", patches, v.width, v.width, 3 * v.layers, **frozen),
        Gemm("siglip out", patches, v.width, v.width, v.layers, **frozen),
        Gemm("siglip fc1", patches, v.mlp, v.width, v.layers, **frozen),
        Gemm("siglip fc2", patches, v.width, v.mlp, v.layers, **frozen),
        Gemm("mlp1 fc1", images * v.tokens, c.width, v.unshuffled_width, 1, **frozen),
        Gemm("mlp1 fc2", images * v.tokens, c.width, c.width, 1, **frozen),
        *llm("llm frozen", c.layers - top, **frozen),
        *llm("llm", top, fp8=False),
        Gemm("state encoder 1", batch, h.hidden, h.state_dim, 1, input_grad=False, **head),
        Gemm("state encoder 2", batch, dw, h.hidden, 1, **head),
        Gemm("action encoder W1", actions, dw, h.action_dim, 1, input_grad=False, **head),
        Gemm("action encoder W2", actions, dw, 2 * dw, 1, **head),
        Gemm("action encoder W3", actions, dw, dw, 1, **head),
        Gemm("timestep encoder 1", batch, dw, d.time_channels, 1, input_grad=False, **head),
        Gemm("timestep encoder 2", batch, dw, dw, 1, **head),
        Gemm("dit adaLN", batch, 2 * dw, dw, d.layers, **head),
        Gemm("dit q", dit_rows, dw, dw, d.layers),
        Gemm("dit self k/v", dit_rows, dw, dw, 2 * selfs),
        Gemm("dit cross k/v", tokens, dw, c.width, 2 * (d.layers - selfs)),
        Gemm("dit out", dit_rows, dw, dw, d.layers),
        Gemm("dit ff1", dit_rows, d.mlp, dw, d.layers),
        Gemm("dit ff2", dit_rows, dw, d.mlp, d.layers),
        Gemm("dit proj_out_1", batch, 2 * dw, dw, 1, **head),
        Gemm("dit proj_out_2", dit_rows, d.out, dw, 1, **head),
        Gemm("action decoder 1", dit_rows, h.hidden, d.out, 1, **head),
        Gemm("action decoder 2", dit_rows, h.action_dim, h.hidden, 1, **head),
    ]
    t = 1 + action_horizon
    attention = [
        Attention(
            "siglip attention",
            images,
            v.heads,
            v.heads,
            v.patches**2,
            v.patches**2,
            v.width // v.heads,
            v.layers,
            backward=False,
        ),
        Attention(
            "llm frozen attention",
            batch,
            c.heads,
            c.kv_heads,
            vl_tokens,
            vl_tokens,
            c.head_dim,
            c.layers - top,
            backward=False,
            mask="causal",
        ),
        Attention("llm attention", batch, c.heads, c.kv_heads, vl_tokens, vl_tokens, c.head_dim, top, mask="causal"),
        Attention("dit self-attention", batch, d.heads, d.heads, t, t, d.head_dim, selfs),
        Attention("dit cross-attention", batch, d.heads, d.heads, t, vl_tokens, d.head_dim, d.layers - selfs),
    ]
    return [g for g in layers if g.count], [a for a in attention if a.count]
