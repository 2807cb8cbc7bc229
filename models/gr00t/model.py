"""GR00T N1.6 in plain PyTorch: the Eagle-Block2A-2B-v2 backbone as N1.6 runs it (SigLIP2 vision, pixel-unshuffle,
`mlp1` connector, the first 16 Qwen3-1.7B layers), `vlln`, the 32-block AlternateVLDiT, the per-embodiment
state/action encoders and action decoder, the flow-matching loss and Euler sampling.

Sources, Isaac-GR00T at "GR00T N1.6 Release (#456)": `gr00t/model/gr00t_n1d6/gr00t_n1d6.py` (action head,
flow matching, sampling), `gr00t/model/modules/eagle_backbone.py` (layer cut, trainable set, fp32 trainables),
`gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2/modeling_eagle3_vl.py` and `modeling_siglip2.py` (vision tower,
pixel-unshuffle, `mlp1`, image tokens in the LLM sequence), `gr00t/model/modules/dit.py` (DiT, diffusers 0.35.1
Attention / FeedForward / Timesteps), `gr00t/model/modules/embodiment_conditioned_mlp.py`.

Module names are part of the interface (compile units, checkpoint mapping): `vision.layers.*`, `mlp1`,
`llm.layers.*`, `vlln`, `dit.blocks.*`, `state_encoder`, `action_encoder`, `action_pos`, `action_decoder`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..siglip import VisionLayer
from .attention import attend, causal_padding_mask, key_mask
from .config import DiTConfig, Gr00tConfig, LLMConfig, VisionConfig
from .window_packing import image_lengths, pack_windows, unpacking_index, window_rope_table

# ----------------------------------------------------------------------------- vision (SigLIP2)


def vision_kernel(q, k, v, kind: str) -> torch.Tensor:
    """SigLIP2's attention over every patch of the image, no windows (use_windows_attn: false)."""
    return attend(q, k, v, None, kind)


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """[N, C, H, W] -> [N, (H/p)(W/p), p*p*C], patches in raster order, each flattened as (row, column,
    channel): the order SigLIP2's Linear patch embedding was trained on."""
    n, c, h, w = images.shape
    x = images.reshape(n, c, h // patch, patch, w // patch, patch).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(n, (h // patch) * (w // patch), patch * patch * c)


def resize_position_grid(pos: torch.Tensor, grid: int, rows: int, cols: int) -> torch.Tensor:
    """[grid*grid, C] learned positions -> [rows*cols, C]: antialiased bilinear resize in fp32, as SigLIP2's
    `resize_positional_embeddings` does for images whose patch grid differs from the learned one."""
    g = pos.reshape(grid, grid, -1).permute(2, 0, 1)[None].float()
    g = F.interpolate(g, size=(rows, cols), mode="bilinear", align_corners=False, antialias=True)
    return g[0].reshape(pos.shape[1], rows * cols).t().to(pos.dtype)


def unused_pooling_head_parameters(cfg: VisionConfig) -> int:
    """Parameters of SigLIP2's attention-pooling head, which the reference builds and never runs: probe,
    nn.MultiheadAttention (packed in-projection with bias, out-projection), LayerNorm and MLP."""
    w = cfg.width
    return w + (3 * w * w + 3 * w) + (w * w + w) + 2 * w + (w * cfg.mlp + cfg.mlp + cfg.mlp * w + w)


class SiglipVision(nn.Module):
    """SigLIP2 vision tower up to `post_layernorm` (Eagle's `select_layer: -1`). The pooling head the reference
    builds (`vision_use_head` unset) is never called, so it is not built here; its checkpoint keys are dropped."""

    def __init__(self, cfg: VisionConfig):
        super().__init__()
        self.cfg = cfg
        self.patch_embed = nn.Linear(3 * cfg.patch_size**2, cfg.width)
        self.pos_embed = nn.Embedding(cfg.position_grid**2, cfg.width)
        self.layers = nn.ModuleList(VisionLayer(cfg, vision_kernel, "sdpa") for _ in range(cfg.layers))
        self.post_norm = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.reference_syncs = False  # the `host_syncs: reference` option (models/gr00t/options.py)
        self.reference_packing = False  # the `vision_packing: reference` option
        self._rope_table: torch.Tensor | None = None  # the reference's 2D-RoPE table, which no layer reads

    def forward(self, images):  # [N, 3, H, W] in [-1, 1] -> [N, patches, width]
        if self.reference_packing:
            return self.forward_packed(images)
        p, grid = self.cfg.patch_size, self.cfg.position_grid
        rows, cols = images.shape[2] // p, images.shape[3] // p
        x = self.patch_embed(patchify(images, p))
        pos = self.pos_embed.weight
        # At 224x224 the patch grid is the learned 16x16 grid and the reference's resize is the identity.
        x = x + (pos if (rows, cols) == (grid, grid) else resize_position_grid(pos, grid, rows, cols))
        if self.reference_syncs:  # the reference packs its patches into windows in an order sorted on the host
            x = x[:, host_index(range(x.shape[1]), x.device)]
        for layer in self.layers:
            x = layer(x)
        x = self.post_norm(x)
        if self.reference_syncs:  # ... and puts them back with a host-made reverse mapping
            x = x[:, host_index(range(x.shape[1]), x.device)]
        return x

    def forward_packed(self, images):
        """The same values by the reference's path (window_packing.py): patchified and position-resized image
        by image, the tokens packed window by window and back, the unused RoPE table built per window, the
        per-image lengths recomputed in every layer."""
        n, p = images.shape[0], self.cfg.patch_size
        x = self.patch_embed(torch.cat([patchify(image[None], p)[0] for image in images]))
        grids = torch.tensor([(images.shape[2] // p, images.shape[3] // p)] * n)  # on the host, as theirs
        grid = self.cfg.position_grid
        x = x + torch.cat([resize_position_grid(self.pos_embed.weight, grid, int(r), int(c)) for r, c in grids])
        grid_list = [tuple(rc) for rc in grids.tolist()]
        x, windows = pack_windows(x[None], grid_list, self.cfg.window)
        window_rope_table(windows, self.rope_table(grid_list[0], x.device))
        per_image = grid_list[0][0] * grid_list[0][1]
        x = x.view(n, per_image, -1)
        for layer in self.layers:
            image_lengths(windows)  # the reference's attention recomputes them in every layer (all per_image here)
            x = layer(x)
        x = self.post_norm(x)
        return x.reshape(1, n * per_image, -1)[:, unpacking_index(windows, grid_list)].view(n, per_image, -1)

    def rope_table(self, grid: tuple[int, int], device) -> torch.Tensor:
        """A table of the reference's layout (complex64, head_dim/2 per patch position), made once. It holds
        zeros: the reference builds 2D-RoPE angles there, and no layer reads them."""
        shape = (*grid, self.cfg.width // self.cfg.heads // 2)
        if self._rope_table is None or self._rope_table.shape != shape or self._rope_table.device != device:
            self._rope_table = torch.zeros(shape, dtype=torch.complex64, device=device)
        return self._rope_table


def host_index(order, device) -> torch.Tensor:
    """An index made from a host list, as the reference's window packing indexes with Python lists: torch copies
    it from pageable host memory, which waits for the device's queued work (here the identity order, so the
    values do not change)."""
    return torch.tensor(list(order), dtype=torch.long, device=device)


def pixel_unshuffle_tokens(x: torch.Tensor, rows: int, cols: int, factor: int) -> torch.Tensor:
    """[N, rows*cols, C] raster tokens -> [N, (rows/f)(cols/f), C*f*f]: each f x f block of patches becomes one
    token (F.pixel_unshuffle channel order, as the reference's `pixel_shuffle_back`)."""
    n, _, c = x.shape
    x = F.pixel_unshuffle(x.transpose(1, 2).reshape(n, c, rows, cols), factor)
    return x.flatten(2).transpose(1, 2)


class Connector(nn.Module):
    """Eagle's `mlp1`: LayerNorm(4608) -> Linear -> GELU (exact) -> Linear."""

    def __init__(self, in_width: int, out_width: int):
        super().__init__()
        self.norm = nn.LayerNorm(in_width)
        self.fc1 = nn.Linear(in_width, out_width)
        self.fc2 = nn.Linear(out_width, out_width)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(self.norm(x))))


# ----------------------------------------------------------------------------- LLM (Qwen3 layout)


class RMSNorm(nn.Module):
    """Qwen3 RMSNorm: normalise in fp32, back to the input dtype, then `weight *` (a fp32 weight of a
    trainable layer therefore makes the output fp32, as in the reference)."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * normed.to(x.dtype)


def rope_tables(length: int, head_dim: int, theta: float, device, dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [L, D] for positions 0..L-1, computed in fp32 and cast to the hidden dtype (transformers does
    both). Positions count padding too, as transformers' training forward does (position_ids = arange): with
    left padding that shifts every valid token by the same amount, which RoPE's relative scores ignore."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.int64).float() / head_dim)
    freqs = torch.arange(length, device=device).float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


class LLMAttention(nn.Module):
    """GQA with per-head RMSNorm on q and k before RoPE; no biases."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.head_dim = cfg.head_dim
        self.q_proj = nn.Linear(cfg.width, cfg.heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.width, cfg.kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.width, cfg.kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.heads * cfg.head_dim, cfg.width, bias=False)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.eps)
        self.kind = "sdpa"

    def forward(self, x, mask, cos, sin):
        b, t, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(b, t, -1, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(b, t, -1, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(b, t, -1, self.head_dim).transpose(1, 2)
        out = attend(rope(q, cos, sin), rope(k, cos, sin), v, mask, self.kind)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))


class LLMMLP(nn.Module):
    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.width, cfg.mlp, bias=False)
        self.up_proj = nn.Linear(cfg.width, cfg.mlp, bias=False)
        self.down_proj = nn.Linear(cfg.mlp, cfg.width, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LLMLayer(nn.Module):
    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.input_norm = RMSNorm(cfg.width, cfg.eps)
        self.attn = LLMAttention(cfg)
        self.post_norm = RMSNorm(cfg.width, cfg.eps)
        self.mlp = LLMMLP(cfg)

    def forward(self, x, mask, cos, sin):
        x = x + self.attn(self.input_norm(x), mask, cos, sin)
        return x + self.mlp(self.post_norm(x))


class QwenLM(nn.Module):
    """Token embedding, the kept decoder layers and the final norm. With `lm_head` set it also computes the
    vocabulary logits with the tied embedding, as Qwen3ForCausalLM does on every call, and returns them for the
    caller to drop: the reference pays for that GEMM in every training step."""

    def __init__(self, cfg: LLMConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab, cfg.width)
        self.layers = nn.ModuleList(LLMLayer(cfg) for _ in range(cfg.layers))
        self.norm = RMSNorm(cfg.width, cfg.eps)
        self.lm_head = True

    def forward(self, embeds, valid):
        """embeds [B, L, W], valid [B, L] -> (final-normed hidden states, logits or None)."""
        mask = causal_padding_mask(valid)
        cos, sin = rope_tables(embeds.shape[1], self.cfg.head_dim, self.cfg.rope_theta, embeds.device, embeds.dtype)
        x = embeds
        for layer in self.layers:
            x = layer(x, mask, cos, sin)
        x = self.norm(x)  # hidden_states[-1] of a transformers model is the final-normed output
        return x, (F.linear(x, self.embed_tokens.weight) if self.lm_head else None)


# ----------------------------------------------------------------------------- DiT (AlternateVLDiT)


def timestep_sinusoid(t: torch.Tensor, channels: int, max_period: float = 10000.0) -> torch.Tensor:
    """diffusers `Timesteps(channels, flip_sin_to_cos=True, downscale_freq_shift=1)`: [cos, sin] of t times
    frequencies exp(-ln(max_period) * i / (channels/2 - 1)), in fp32."""
    half = channels // 2
    exponent = -math.log(max_period) * torch.arange(half, dtype=torch.float32, device=t.device) / (half - 1)
    angle = t[:, None].float() * torch.exp(exponent)[None, :]
    return torch.cat([angle.cos(), angle.sin()], dim=-1)


class TimestepEncoder(nn.Module):
    """256-channel sinusoid of the timestep bucket -> Linear -> SiLU -> Linear (diffusers TimestepEmbedding)."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.channels = cfg.time_channels
        self.linear_1 = nn.Linear(cfg.time_channels, cfg.width)
        self.linear_2 = nn.Linear(cfg.width, cfg.width)

    def forward(self, buckets):
        emb = timestep_sinusoid(buckets, self.channels).to(self.linear_1.weight.dtype)
        return self.linear_2(F.silu(self.linear_1(emb)))


class AdaLayerNorm(nn.Module):
    """LayerNorm without affine, modulated by Linear(SiLU(temb)) -> (scale, shift), scale first."""

    def __init__(self, width: int, eps: float):
        super().__init__()
        self.linear = nn.Linear(width, 2 * width)
        self.norm = nn.LayerNorm(width, eps=eps, elementwise_affine=False)

    def forward(self, x, temb):
        scale, shift = self.linear(F.silu(temb)).chunk(2, dim=1)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


class DiTAttention(nn.Module):
    """diffusers Attention with biases; K/V read the VL features (width 2048) in cross-attention blocks. The
    attention probabilities get no dropout (SDPA with dropout_p=0); the output does (`to_out[1]`)."""

    def __init__(self, cfg: DiTConfig, kv_width: int):
        super().__init__()
        self.heads, self.head_dim = cfg.heads, cfg.head_dim
        self.to_q = nn.Linear(cfg.width, cfg.width)
        self.to_k = nn.Linear(kv_width, cfg.width)
        self.to_v = nn.Linear(kv_width, cfg.width)
        self.to_out = nn.Linear(cfg.width, cfg.width)
        self.out_dropout = nn.Dropout(cfg.dropout)
        self.kind = "sdpa"

    def forward(self, x, context=None, mask=None):
        b, t, _ = x.shape
        kv = x if context is None else context
        q = self.to_q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = self.to_k(kv).view(b, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.to_v(kv).view(b, -1, self.heads, self.head_dim).transpose(1, 2)
        out = attend(q, k, v, mask, self.kind)
        return self.out_dropout(self.to_out(out.transpose(1, 2).reshape(b, t, -1)))


class FeedForward(nn.Module):
    """diffusers FeedForward("gelu-approximate", final_dropout=True): Linear, tanh-GELU, dropout, Linear, dropout."""

    def __init__(self, cfg: DiTConfig):
        super().__init__()
        self.fc1 = nn.Linear(cfg.width, cfg.mlp)
        self.act_dropout = nn.Dropout(cfg.dropout)
        self.fc2 = nn.Linear(cfg.mlp, cfg.width)
        self.out_dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        return self.out_dropout(self.fc2(self.act_dropout(F.gelu(self.fc1(x), approximate="tanh"))))


class DiTBlock(nn.Module):
    """AdaLN -> attention -> residual, LayerNorm -> FeedForward -> residual. `reads` is what the attention
    reads: "self" (the DiT tokens), or the VL features masked to "text" or "image" tokens."""

    def __init__(self, cfg: DiTConfig, reads: str, vl_width: int):
        super().__init__()
        self.reads = reads
        self.norm1 = AdaLayerNorm(cfg.width, cfg.eps)
        self.attn = DiTAttention(cfg, cfg.width if reads == "self" else vl_width)
        # `final_dropout=True`: the block drops the attention output again after `to_out`'s dropout.
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.norm3 = nn.LayerNorm(cfg.width, eps=cfg.eps, elementwise_affine=False)
        self.ff = FeedForward(cfg)

    def forward(self, x, temb, context=None, mask=None):
        x = x + self.attn_dropout(self.attn(self.norm1(x, temb), context, mask))
        return x + self.ff(self.norm3(x))


def block_reads(index: int, attend_text_every_n_blocks: int) -> str:
    if index % 2 == 1:
        return "self"
    return "text" if index % (2 * attend_text_every_n_blocks) == 0 else "image"


class AlternateVLDiT(nn.Module):
    def __init__(self, cfg: DiTConfig, vl_width: int):
        super().__init__()
        self.time_embed = TimestepEncoder(cfg)
        # what each block attends to, kept here too: a block wrapped for recompute hides its own `reads`
        self.reads = tuple(block_reads(i, cfg.attend_text_every_n_blocks) for i in range(cfg.layers))
        self.blocks = nn.ModuleList(DiTBlock(cfg, reads, vl_width) for reads in self.reads)
        self.norm_out = nn.LayerNorm(cfg.width, eps=cfg.out_eps, elementwise_affine=False)
        self.proj_out_1 = nn.Linear(cfg.width, 2 * cfg.width)
        self.proj_out_2 = nn.Linear(cfg.width, cfg.out)

    def forward(self, x, buckets, vl, text_valid, image_valid):
        """x [B, T, width] DiT tokens, buckets [B] timestep buckets, vl [B, S, vl_width] with text/image
        validity masks [B, S] -> [B, T, out]."""
        temb = self.time_embed(buckets)
        masks = {"text": key_mask(text_valid), "image": key_mask(image_valid)}
        for block, reads in zip(self.blocks, self.reads):
            if reads == "self":
                x = block(x, temb)
            else:
                x = block(x, temb, vl, masks[reads])
        shift, scale = self.proj_out_1(F.silu(temb)).chunk(2, dim=1)  # shift first here, unlike AdaLayerNorm
        return self.proj_out_2(self.norm_out(x) * (1 + scale[:, None]) + shift[:, None])


# ----------------------------------------------------------------------------- per-embodiment encoders


class EmbodimentLinear(nn.Module):
    """One Linear per embodiment: each sample's weights are gathered by its id and applied with a batched matmul."""

    def __init__(self, embodiments: int, in_width: int, out_width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(embodiments, in_width, out_width))
        self.bias = nn.Parameter(torch.zeros(embodiments, out_width))

    def forward(self, x, ids):  # x [B, T, in], ids [B]
        return torch.bmm(x, self.weight[ids]) + self.bias[ids].unsqueeze(1)


class EmbodimentMLP(nn.Module):
    def __init__(self, embodiments: int, in_width: int, hidden: int, out_width: int):
        super().__init__()
        self.layer1 = EmbodimentLinear(embodiments, in_width, hidden)
        self.layer2 = EmbodimentLinear(embodiments, hidden, out_width)

    def forward(self, x, ids):
        return self.layer2(F.relu(self.layer1(x, ids)), ids)


def action_time_sinusoid(t: torch.Tensor, width: int) -> torch.Tensor:
    """[B, T] timestep buckets -> [B, T, width]: [sin, cos] with frequencies exp(-i ln(10000) / (width/2))."""
    half = width // 2
    # fp32 log, as the reference rounds it; made on the device (no host copy: the step may be graph-captured)
    log_period = torch.full((), 10000.0, device=t.device).log()
    exponent = -torch.arange(half, dtype=torch.float32, device=t.device) * (log_period / half)
    freqs = t.float().unsqueeze(-1) * exponent.exp()
    return torch.cat([freqs.sin(), freqs.cos()], dim=-1)


class ActionEncoder(nn.Module):
    """W1 (actions) ++ sinusoid(time) -> W2 -> swish -> W3, every Linear per embodiment."""

    def __init__(self, embodiments: int, action_dim: int, width: int):
        super().__init__()
        self.width = width
        self.W1 = EmbodimentLinear(embodiments, action_dim, width)
        self.W2 = EmbodimentLinear(embodiments, 2 * width, width)
        self.W3 = EmbodimentLinear(embodiments, width, width)

    def forward(self, actions, buckets, ids):
        a = self.W1(actions, ids)
        tau = action_time_sinusoid(buckets[:, None].expand(-1, actions.shape[1]), self.width).to(a.dtype)
        return self.W3(F.silu(self.W2(torch.cat([a, tau], dim=-1), ids)), ids)  # swish = SiLU


# ----------------------------------------------------------------------------- the model


class VL(NamedTuple):
    """The backbone's output as the DiT reads it: features after `vlln`, and which tokens are valid text
    (everything but <IMG_CONTEXT>, padding excluded) and valid image tokens."""

    features: torch.Tensor
    text: torch.Tensor
    image: torch.Tensor


def pad_vl(input_ids, valid, length: int, pad_id: int):
    """Left-pad the token sequence to a fixed length (LoongForge's `--cuda-graph-pad-length`, padding side left
    as the reference's collator pads)."""
    missing = length - input_ids.shape[1]
    if missing < 0:
        raise ValueError(f"the VL sequence has {input_ids.shape[1]} tokens, more than vl_pad={length}")
    if missing == 0:
        return input_ids, valid
    b = input_ids.shape[0]
    ids = torch.cat([input_ids.new_full((b, missing), pad_id), input_ids], dim=1)
    return ids, torch.cat([valid.new_zeros((b, missing)), valid], dim=1)


class Gr00tModel(nn.Module):
    def __init__(self, cfg: Gr00tConfig):
        super().__init__()
        self.cfg = cfg
        v, h, d = cfg.vision, cfg.head, cfg.dit
        self.vision = SiglipVision(v)
        self.mlp1 = Connector(v.unshuffled_width, cfg.llm.width)
        self.llm = QwenLM(cfg.llm)
        self.vlln = nn.LayerNorm(cfg.llm.width)
        self.dit = AlternateVLDiT(d, cfg.llm.width)
        self.state_encoder = EmbodimentMLP(h.embodiments, h.state_dim, h.hidden, d.width)
        self.action_encoder = ActionEncoder(h.embodiments, h.action_dim, d.width)
        self.action_pos = nn.Embedding(h.max_positions, d.width)
        self.action_decoder = EmbodimentMLP(h.embodiments, d.out, h.hidden, h.action_dim)
        self.state_mask_token = nn.Parameter(torch.zeros(1, 1, d.width)) if h.state_dropout > 0 else None
        self.vl_pad: int | None = None  # pad the VL sequence to this many tokens (fixed shapes)
        self.reference_syncs = False  # the `host_syncs: reference` option (models/gr00t/options.py)
        self.autocast_dtype: torch.dtype | None = None  # set by apply_mixed_precision
        self.default_horizon = 50

    # -- backbone
    def embed_images(self, images):
        """[B, V, 3, H, W] -> [B*V, tokens, LLM width], images in batch order then view order."""
        v = self.cfg.vision
        x = self.vision(images.flatten(0, 1))
        rows, cols = images.shape[-2] // v.patch_size, images.shape[-1] // v.patch_size
        return self.mlp1(pixel_unshuffle_tokens(x, rows, cols, v.unshuffle))

    def encode_vl(self, batch) -> VL:
        input_ids, valid = batch["input_ids"], batch["attention_mask"]
        if self.vl_pad is not None:
            input_ids, valid = pad_vl(input_ids, valid, self.vl_pad, self.cfg.pad_token_id)
        image = input_ids == self.cfg.image_token_id
        embeds = self.llm.embed_tokens(input_ids)
        vit = self.embed_images(batch["images"])
        # The image features replace the <IMG_CONTEXT> embeddings in order (sample, then position).
        if self.reference_syncs:  # the reference's boolean-index assignment: each boolean index waits for the device
            flat, selected = embeds.reshape(-1, embeds.shape[-1]), image.reshape(-1)
            flat[selected] = flat[selected] * 0.0 + vit.reshape(-1, vit.shape[-1]).to(flat.dtype)
            embeds = flat.reshape(embeds.shape)
            bool(valid.all())  # then transformers asks the host whether the mask can be dropped (all tokens valid)
        else:
            embeds = embeds.masked_scatter(image[..., None], vit.to(embeds.dtype))
        hidden, _logits = self.llm(embeds, valid)  # the logits are dropped, as the reference drops them
        return VL(self.vlln(hidden), valid & ~image, valid & image)

    # -- action head
    def encode_state(self, state, ids, drop: bool = False):
        features = self.state_encoder(state, ids)
        if drop and self.state_mask_token is not None:  # per-sample state dropout (training only)
            dropped = torch.rand(features.shape[0], device=features.device) < self.cfg.head.state_dropout
            dropped = dropped[:, None, None].to(features.dtype)
            features = features * (1 - dropped) + self.state_mask_token * dropped
        return features

    def velocity(self, vl: VL, state_features, x_t, buckets, ids):
        """Predicted velocity [B, T, action_dim] for noisy actions x_t [B, T, action_dim] at timestep buckets [B]."""
        horizon = x_t.shape[1]
        actions = self.action_encoder(x_t, buckets, ids) + self.action_pos.weight[:horizon]
        x = self.dit(torch.cat([state_features, actions], dim=1), buckets, vl.features, vl.text, vl.image)
        return self.action_decoder(x, ids)[:, -horizon:]  # decoded for every token, the state token dropped

    def flow_time(self, batch, dtype):
        """t = (1 - u) * 0.999 from the batch's Beta(1.5, 1) draw u, in the actions' dtype as the reference
        computes it (bf16 in mixed precision)."""
        u = batch["beta_sample"]
        if self.reference_syncs:  # the reference draws u on the host and copies it in
            u = u.cpu().to(u.device)
        return (1 - u.to(dtype)) * self.cfg.head.noise_s

    def loss(self, batch):
        """Flow matching: x_t = (1 - t) noise + t actions, target actions - noise, MSE masked to real action
        steps and dimensions, normalised by the mask's sum."""
        with self.autocast():
            vl = self.encode_vl(batch)
            ids = batch["embodiment_id"]
            state = self.encode_state(batch["state"], ids, drop=self.training)
            actions, noise = batch["actions"], batch["noise"]
            t = self.flow_time(batch, actions.dtype)[:, None, None]
            x_t = (1 - t) * noise + t * actions
            buckets = (t[:, 0, 0] * self.cfg.head.timestep_buckets).long()
            pred = self.velocity(vl, state, x_t, buckets, ids)
            mask = batch["action_mask"]
            return (F.mse_loss(pred, actions - noise, reduction="none") * mask).sum() / (mask.sum() + 1e-6)

    def forward(self, batch):
        """The training loss: forward is the loss so that a DDP wrapper (which hooks forward) sees it."""
        return self.loss(batch)

    @torch.no_grad()
    def sample_actions(self, batch, noise=None, steps: int | None = None, generator=None):
        """Inference: the backbone once, then `steps` Euler steps from t=0 (noise) towards t=1 (actions)."""
        steps = steps or self.cfg.head.inference_steps
        with self.autocast():
            vl = self.encode_vl(batch)
            ids = batch["embodiment_id"]
            state = self.encode_state(batch["state"], ids)
            b, device = ids.shape[0], ids.device
            if noise is None:
                noise = torch.randn(
                    (b, self.default_horizon, self.cfg.head.action_dim),
                    generator=generator,
                    device=device,
                    dtype=vl.features.dtype,
                )
            x = noise
            for i in range(steps):
                bucket = int(i / steps * self.cfg.head.timestep_buckets)
                buckets = torch.full((b,), bucket, device=device, dtype=torch.long)
                x = x + (1.0 / steps) * self.velocity(vl, state, x, buckets, ids)
        return x

    # -- switches
    def autocast(self):
        return torch.autocast(
            self.vlln.weight.device.type,
            dtype=self.autocast_dtype or torch.bfloat16,
            enabled=self.autocast_dtype is not None,
        )

    def set_attention(self, kind: str):
        for layer in self.vision.layers:
            layer.attn.kind = kind
        for layer in self.llm.layers:
            layer.attn.kind = kind
        for block in self.dit.blocks:
            block.attn.kind = kind


# ----------------------------------------------------------------------------- training setup


def set_trainable(
    model: Gr00tModel,
    tune_llm: bool = False,
    tune_visual: bool = False,
    tune_top_llm_layers: int | None = None,
    tune_projector: bool = True,
    tune_diffusion_model: bool = True,
    tune_vlln: bool = True,
) -> list[str]:
    """N1.6 fine-tuning's trainable set (Gr00tN1d6Config defaults): vision and `mlp1` frozen, the LLM frozen
    except its top `tune_top_llm_layers` layers (4; the final norm stays frozen), and the whole action head
    trainable. Returns the trainable parameter names."""
    top = model.cfg.tune_top_llm_layers if tune_top_llm_layers is None else tune_top_llm_layers
    model.requires_grad_(True)
    if not tune_llm:
        model.llm.requires_grad_(False)
    if not tune_visual:
        model.vision.requires_grad_(False)
        model.mlp1.requires_grad_(False)
    if top > 0:
        for layer in model.llm.layers[-top:]:
            layer.requires_grad_(True)
    projector = [model.state_encoder, model.action_encoder, model.action_decoder, model.action_pos]
    for module in projector:
        module.requires_grad_(tune_projector)
    if model.state_mask_token is not None:
        model.state_mask_token.requires_grad_(tune_projector)
    model.dit.requires_grad_(tune_diffusion_model)
    model.vlln.requires_grad_(tune_vlln)
    return [n for n, p in model.named_parameters() if p.requires_grad]


def apply_mixed_precision(model: Gr00tModel, dtype: torch.dtype) -> None:
    """The reference's precision: frozen parameters in bf16 (`load_bf16`), trainable ones in fp32
    (`backbone_trainable_params_fp32`; the action head is built in fp32), the forward under bf16 autocast
    (`bf16: True`). fp32 means everything fp32 without autocast. Call after `set_trainable`."""
    if dtype == torch.float32:
        model.float()
        model.autocast_dtype = None
        return
    with torch.no_grad():
        for p in model.parameters():
            p.data = p.data.to(torch.float32 if p.requires_grad else dtype)
    model.autocast_dtype = dtype


def init_weights(model: nn.Module, seed: int, std: float = 0.02):
    """Deterministic random init for measurement (real checkpoints load over it): matrices, embeddings and
    per-embodiment weights ~ N(0, std), biases 0, LayerNorm 1/0, RMSNorm 1."""
    gens = {}
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                if isinstance(module, (nn.LayerNorm, RMSNorm)):
                    p.fill_(1.0 if name == "weight" else 0.0)
                elif p.dim() >= 2 and not (isinstance(module, EmbodimentLinear) and name == "bias"):
                    gen = gens.setdefault(p.device, torch.Generator(device=p.device).manual_seed(seed))
                    p.normal_(0.0, std, generator=gen)
                else:
                    p.zero_()
