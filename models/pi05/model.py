"""Pi0.5 in plain PyTorch: SigLIP + projector, Gemma-2B prefix stream, Gemma-300M action expert with
adaRMSNorm, joint attention per layer, flow-matching loss and Euler sampling (openpi and LeRobot agree on it).

Module names are part of the interface: recompute and compile patterns address them
(`vision.layers.*`, `backbone.layers.*.prefix.mlp`, `backbone.layers.*.attention`, ...).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..fp8_mlp import fp8_gated_mlp
from ..siglip import VisionLayer
from .attention import JointAttention, eager_attention, prepare_mask, sdpa_attention
from .config import GemmaConfig, Pi05Config, VisionConfig

# ----------------------------------------------------------------------------- vision (SigLIP)


def vision_kernel(q, k, v, kind: str) -> torch.Tensor:
    """SigLIP's attention over every patch: the eager kernel or SDPA (the model's vision_attention option)."""
    attend = eager_attention if kind == "eager" else sdpa_attention
    return attend(q, k, v, None, q.shape[-1] ** -0.5)


class ImageEmbedder(nn.Module):
    """SigLIP So400m/14 (no pooling) followed by PaliGemma's projector: one image -> LLM tokens."""

    def __init__(self, cfg: VisionConfig, out_width: int):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, cfg.width, cfg.patch_size, stride=cfg.patch_size)
        self.pos_embed = nn.Embedding(cfg.tokens, cfg.width)
        # "eager" until set_attention follows the model's vision_attention option
        self.layers = nn.ModuleList(VisionLayer(cfg, vision_kernel, "eager") for _ in range(cfg.layers))
        self.post_norm = nn.LayerNorm(cfg.width, eps=cfg.eps)
        self.projector = nn.Linear(cfg.width, out_width)

    def forward(self, images):  # [B, 3, H, W] in [-1, 1]
        # The embeddings run in their own dtype (openpi keeps them in fp32), the layers in theirs.
        x = self.patch_embed(images.to(self.patch_embed.weight.dtype)).flatten(2).transpose(1, 2)
        x = (x + self.pos_embed.weight).to(self.post_norm.weight.dtype)
        for layer in self.layers:
            x = layer(x)
        return self.projector(self.post_norm(x))  # image tokens are not scaled


# ----------------------------------------------------------------------------- Gemma streams


class RMSNorm(nn.Module):
    """Gemma RMSNorm `normed * (1 + weight)`; with `cond_dim` it is adaRMSNorm: scale, shift and a
    residual gate come from Dense(cond) and the output is `normed * (1 + scale) + shift`."""

    def __init__(self, width: int, eps: float, cond_dim: int | None = None):
        super().__init__()
        self.eps = eps
        if cond_dim is None:
            self.weight = nn.Parameter(torch.zeros(width))
            self.dense = None
        else:
            self.dense = nn.Linear(cond_dim, 3 * width)
            nn.init.zeros_(self.dense.weight)  # reference init: starts as plain RMSNorm with gate 0

    def forward(self, x, cond=None):
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.dense is None:
            return (normed * (1.0 + self.weight.float())).to(x.dtype), None
        # the condition and the modulation in the Dense layer's dtype (fp32 in openpi), the gate in the stream's
        scale, shift, gate = self.dense(cond.to(self.dense.weight.dtype))[:, None, :].chunk(3, dim=-1)
        return (normed * (1.0 + scale.float()) + shift.float()).to(x.dtype), gate.to(x.dtype)


def gated_residual(x, y, gate):
    return x + y if gate is None else x + y * gate


class GemmaMLP(nn.Module):
    def __init__(self, cfg: GemmaConfig):
        super().__init__()
        self.gate_up = None  # set by the fused-gate-up switch (techniques.fuse_gate_up): returns (gate, up)
        self.fp8_function = False  # set by the `fp8_mlp: triton` switch: the whole MLP as one FP8 function
        self.gate_proj = nn.Linear(cfg.width, cfg.mlp, bias=False)
        self.up_proj = nn.Linear(cfg.width, cfg.mlp, bias=False)
        self.down_proj = nn.Linear(cfg.mlp, cfg.width, bias=False)

    def forward(self, x):
        if self.fp8_function:
            return fp8_gated_mlp(x, self.gate_proj.weight, self.up_proj.weight, self.down_proj.weight)
        gate, up = self.gate_up(x) if self.gate_up is not None else (self.gate_proj(x), self.up_proj(x))
        return self.down_proj(F.gelu(gate, approximate="tanh") * up)


class GemmaBlock(nn.Module):
    """One stream's weights in a joint layer: its norms, Q/K/V/O projections and MLP."""

    def __init__(self, cfg: GemmaConfig, cond_dim: int | None):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = cfg.heads, cfg.kv_heads, cfg.head_dim
        self.qkv_proj = None  # set by the fused-qkv switch (techniques.fuse_qkv): splits into Q, K, V
        self.input_norm = RMSNorm(cfg.width, cfg.eps, cond_dim)
        self.q_proj = nn.Linear(cfg.width, cfg.heads * cfg.head_dim, bias=False)
        self.k_proj = nn.Linear(cfg.width, cfg.kv_heads * cfg.head_dim, bias=False)
        self.v_proj = nn.Linear(cfg.width, cfg.kv_heads * cfg.head_dim, bias=False)
        self.o_proj = nn.Linear(cfg.heads * cfg.head_dim, cfg.width, bias=False)
        self.post_norm = RMSNorm(cfg.width, cfg.eps, cond_dim)
        self.mlp = GemmaMLP(cfg)

    def qkv(self, x, cond):
        """Normalise and project: q [B, H, T, D], k and v [B, Hkv, T, D], plus the residual gate."""
        h, gate = self.input_norm(x, cond)
        b, t, _ = x.shape
        q, k, v = self.qkv_proj(h) if self.qkv_proj is not None else (self.q_proj(h), self.k_proj(h), self.v_proj(h))
        q = q.view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        return q, k, v, gate

    def finish(self, x, attn_out, attn_gate, cond):
        """o_proj, gated residual, post-attention norm, MLP, gated residual."""
        b, _, t, _ = attn_out.shape
        x = gated_residual(x, self.o_proj(attn_out.transpose(1, 2).reshape(b, t, -1)), attn_gate)
        h, gate = self.post_norm(x, cond)
        return gated_residual(x, self.mlp(h), gate)


def rope(x, cos, sin):
    """Rotary embedding over the full head dim (rotate-half convention), computed in fp32."""
    xf = x.float()
    half = xf.shape[-1] // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)
    return (xf * cos + rotated * sin).to(x.dtype)


def rope_tables(positions, head_dim: int, theta: float):
    """cos/sin [B, 1, T, D] for integer positions [B, T]."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)[:, None]
    return emb.cos(), emb.sin()


class JointLayer(nn.Module):
    """Both streams normalise and project their own Q/K/V; one attention runs over the concatenated
    sequence; the output is split back and each stream finishes with its own weights."""

    def __init__(self, cfg: Pi05Config):
        super().__init__()
        self.prefix = GemmaBlock(cfg.llm, cond_dim=None)
        self.suffix = GemmaBlock(cfg.expert, cond_dim=cfg.expert.width)
        self.attention = JointAttention("eager", scale=cfg.llm.head_dim**-0.5)
        # False on the last layer with the `prefix_tail: false` option: the prefix stream stops after attention
        # (no output projection, post-norm or MLP) and the layer returns None for it. Nothing after the last
        # layer reads the prefix: the actions see it only through each layer's keys and values.
        self.prefix_output = True

    def forward(self, prefix, suffix, cond, mask, cos, sin, past_kv=None):
        streams = [(blk, x) for blk, x in ((self.prefix, prefix), (self.suffix, suffix)) if x is not None]
        parts = [blk.qkv(x, cond if blk is self.suffix else None) for blk, x in streams]
        q = torch.cat([p[0] for p in parts], dim=2)
        k = torch.cat([p[1] for p in parts], dim=2)
        v = torch.cat([p[2] for p in parts], dim=2)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        new_kv = (k, v)
        if past_kv is not None:  # cached prefix keys/values for inference
            k, v = torch.cat([past_kv[0], k], dim=2), torch.cat([past_kv[1], v], dim=2)
        out = self.attention(q, k, v, mask)
        outs, start = [], 0
        for (blk, x), (_, _, _, gate) in zip(streams, parts):
            t = x.shape[1]
            if blk is self.prefix and not self.prefix_output:
                outs.append(None)
            else:
                outs.append(blk.finish(x, out[:, :, start : start + t], gate, cond if blk is self.suffix else None))
            start += t
        it = iter(outs)
        return (next(it) if prefix is not None else None), (next(it) if suffix is not None else None), new_kv


class JointBackbone(nn.Module):
    """The 18 joint layers and the two final norms: the fixed-shape part of the model."""

    def __init__(self, cfg: Pi05Config):
        super().__init__()
        self.layers = nn.ModuleList(JointLayer(cfg) for _ in range(cfg.llm.layers))
        self.prefix_norm = RMSNorm(cfg.llm.width, cfg.llm.eps)
        self.suffix_norm = RMSNorm(cfg.expert.width, cfg.expert.eps, cond_dim=cfg.expert.width)

    def forward(self, prefix, suffix, cond, mask, cos, sin, past_kv=None, collect_kv: bool = False):
        kv = []
        for i, layer in enumerate(self.layers):
            prefix, suffix, layer_kv = layer(
                prefix, suffix, cond, mask, cos, sin, None if past_kv is None else past_kv[i]
            )
            if collect_kv:
                kv.append(layer_kv)
        # The prefix's final norm only matters for inference outputs; training uses the suffix alone. (None when
        # the last layer skips the prefix's tail.)
        prefix = None if prefix is None else self.prefix_norm(prefix)[0]
        suffix = None if suffix is None else self.suffix_norm(suffix, cond)[0]
        return prefix, suffix, kv


# ----------------------------------------------------------------------------- small embedders


class TextEmbedder(nn.Module):
    def __init__(self, vocab: int, width: int):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, width)
        self.scale = math.sqrt(width)  # Gemma scales text embeddings (not image tokens)

    def forward(self, tokens):
        return self.embed_tokens(tokens) * self.scale


def time_embedding(t, dim: int, min_period: float, max_period: float):
    """Sinusoidal embedding of the flow time with periods from min_period to max_period."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    angle = (2 * math.pi / period)[None, :] * t.double()[:, None]
    return torch.cat([angle.sin(), angle.cos()], dim=-1)


class TimeMLP(nn.Module):
    """sinusoid -> Linear -> SiLU -> Linear -> SiLU: the adaRMS condition of the expert."""

    def __init__(self, cfg: Pi05Config):
        super().__init__()
        self.cfg = cfg
        self.time_mlp_in = nn.Linear(cfg.expert.width, cfg.expert.width)
        self.time_mlp_out = nn.Linear(cfg.expert.width, cfg.expert.width)

    def forward(self, t):
        emb = time_embedding(t, self.cfg.expert.width, self.cfg.time_min_period, self.cfg.time_max_period)
        emb = emb.to(self.time_mlp_in.weight.dtype)
        return F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(emb))))


# ----------------------------------------------------------------------------- the model


class SuffixEmbedder(nn.Module):
    """Noisy actions -> expert tokens, and flow time -> adaRMS condition (Pi0.5 adds no state token)."""

    def __init__(self, cfg: Pi05Config):
        super().__init__()
        self.action_in = nn.Linear(cfg.action_dim, cfg.expert.width)
        self.time_mlp = TimeMLP(cfg)

    def forward(self, x_t, t):
        return self.action_in(x_t.to(unwrapped(self.action_in).weight.dtype)), self.time_mlp(t)


class ActionOut(nn.Linear):
    """Linear(expert width -> action dim) on the suffix outputs. Its forward is written here, not
    inherited, because dynamo skips torch's own module frames: this makes it a compile unit of its own."""

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Pi05Model(nn.Module):
    def __init__(self, cfg: Pi05Config, camera_slots: int | str = 3):
        super().__init__()
        self.cfg = cfg
        self.camera_slots = camera_slots  # int: fixed slots with masked placeholders; "auto": on demand
        self.batch_cameras = False  # SigLIP once per camera (the references), or once over all of them
        self.attention_kind = "eager"
        self.vision = ImageEmbedder(cfg.vision, cfg.llm.width)
        self.text_embed = TextEmbedder(cfg.vocab, cfg.llm.width)
        self.suffix_embed = SuffixEmbedder(cfg)
        self.backbone = JointBackbone(cfg)
        self.action_out = ActionOut(cfg.expert.width, cfg.action_dim)

    # -- inputs
    def camera_slots_for(self, images, image_masks):
        """Fit the batch's cameras into the model's slots. Fixed slots pad absent cameras with a
        placeholder image (-1 everywhere) whose tokens are masked out; "auto" runs the cameras given."""
        n = images.shape[1]
        if self.camera_slots == "auto" or self.camera_slots == n:
            return images, image_masks
        if self.camera_slots < n:
            raise ValueError(f"batch has {n} cameras but the model has only {self.camera_slots} slots")
        missing = self.camera_slots - n
        b = images.shape[0]
        placeholder = torch.full((b, missing, *images.shape[2:]), -1.0, dtype=images.dtype, device=images.device)
        no_camera = torch.zeros((b, missing), dtype=torch.bool, device=images.device)
        return torch.cat([images, placeholder], dim=1), torch.cat([image_masks, no_camera], dim=1)

    def embed_prefix(self, batch):
        images, image_masks = self.camera_slots_for(batch["images"], batch["image_masks"])
        tokens_per_image = self.cfg.vision.tokens
        embs, pads = [], []
        if self.batch_cameras:  # one vision call over every camera: [B, N, ...] -> [B * N, ...] and back
            b, n = images.shape[:2]
            embs.append(self.vision(images.flatten(0, 1)).unflatten(0, (b, n)).flatten(1, 2))
            pads.append(image_masks[:, :, None].expand(-1, -1, tokens_per_image).flatten(1))
        else:
            for slot in range(images.shape[1]):  # one vision call per camera, as the references do
                embs.append(self.vision(images[:, slot]))
                pads.append(image_masks[:, slot, None].expand(-1, tokens_per_image))
        embs.append(self.text_embed(batch["tokens"]))
        pads.append(batch["token_masks"])
        return torch.cat(embs, dim=1), torch.cat(pads, dim=1)

    def _mask_and_rope(self, pad_q, cum_q, pad_k, cum_k, positions, dtype):
        mask = prepare_mask(self.attention_kind, pad_q, cum_q, pad_k, cum_k, dtype)
        cos, sin = rope_tables(positions, self.cfg.llm.head_dim, self.cfg.rope_theta)
        return mask, cos, sin

    def stream_dtype(self) -> torch.dtype:
        """The dtype of the joint layers' weights, in which the prefix and suffix streams run."""
        return unwrapped(self.backbone_layers()[0]).prefix.o_proj.weight.dtype

    def action_dtype(self) -> torch.dtype:
        """The dtype of the action projections, in which x_t and the Euler state are kept (fp32 in openpi)."""
        return unwrapped(self.suffix_embed.action_in).weight.dtype

    def velocity(self, batch, x_t, t):
        """Predicted flow velocity for noisy actions x_t at time t, given the observation."""
        prefix, prefix_pad = self.embed_prefix(batch)
        suffix, cond = self.suffix_embed(x_t, t)
        prefix, suffix = prefix.to(self.stream_dtype()), suffix.to(self.stream_dtype())
        b, h = x_t.shape[:2]
        suffix_pad = torch.ones((b, h), dtype=torch.bool, device=x_t.device)
        pad = torch.cat([prefix_pad, suffix_pad], dim=1)
        # cumsum of the autoregressive flags (a single 1 where the action block starts a new attention block),
        # built on the device without a host-to-device copy (the step may be captured in a CUDA graph)
        cum = (torch.arange(pad.shape[1], device=pad.device) >= prefix.shape[1]).to(torch.int32)[None].expand(b, -1)
        positions = pad.long().cumsum(1) - 1  # padding does not advance positions
        mask, cos, sin = self._mask_and_rope(pad, cum, pad, cum, positions, prefix.dtype)
        _, suffix_out, _ = self.backbone(prefix, suffix, cond, mask, cos, sin)
        return self.action_out(suffix_out.to(unwrapped(self.action_out).weight.dtype))

    # Where the flow time comes from: "harness" (drawn with the batch from the seed), or drawn inside the
    # step: "distributions" (torch.distributions.Beta, LeRobot's generic path) or "fast" (u ** (1/1.5)).
    time_sampling = "harness"

    def flow_time(self, batch):
        if self.time_sampling == "harness":
            return batch["time"]
        n, device = batch["actions"].shape[0], batch["actions"].device
        if self.time_sampling == "distributions":
            beta = torch.distributions.Beta(torch.tensor(1.5, device=device), torch.tensor(1.0, device=device))
            t = beta.sample((n,))
        else:  # Beta(a, 1) has CDF x**a, so its inverse CDF turns one uniform draw into one sample
            t = torch.rand(n, device=device) ** (1.0 / 1.5)
        return t * 0.999 + 0.001

    def loss(self, batch):
        """Flow matching: x_t = t*noise + (1-t)*actions, target u = noise - actions, MSE to the velocity."""
        actions, noise, t = batch["actions"], batch["noise"], self.flow_time(batch)
        # x_t in the action projection's dtype: fp32 where openpi keeps it in fp32, as openpi computes it
        work = self.action_dtype()
        actions, noise = actions.to(work), noise.to(work)
        tt = t[:, None, None].to(work)
        x_t = tt * noise + (1 - tt) * actions
        u = noise - actions
        v = self.velocity(batch, x_t, t)
        return F.mse_loss(v.float(), u.float())

    def forward(self, batch):
        """The training loss: forward is the loss so that a DDP wrapper (which hooks forward) sees it."""
        return self.loss(batch)

    def parameters_off_the_loss_path(self) -> list[str]:
        """Parameters the action loss never reaches: the actions read the prefix only through keys and
        values, so the last layer's prefix query, output projection, post-norm and MLP and the prefix's
        final norm only shape inference outputs (the reference computes them in training all the same; the
        `prefix_tail: false` option skips all but the query). DDP without find_unused_parameters needs them
        frozen."""
        last = unwrapped(self.backbone_layers()[-1]).prefix
        dead = [last.o_proj, last.post_norm, last.mlp, last.q_proj if last.qkv_proj is None else None]
        names = {id(p): n for n, p in self.named_parameters()}
        backbone = unwrapped(self.backbone)
        params = [p for m in dead if m is not None for p in m.parameters()] + list(backbone.prefix_norm.parameters())
        return [names[id(p)] for p in params]

    default_horizon = 50

    @torch.no_grad()
    def sample_actions(self, batch, noise=None, steps: int = 10, generator=None):
        """Inference: the prefix once into a KV cache, then `steps` Euler steps from t=1 to t=0."""
        b = batch["tokens"].shape[0]
        dtype = self.action_dtype()  # the Euler state's: fp32 where openpi keeps it so
        horizon = self.default_horizon if noise is None else noise.shape[1]
        if noise is None:
            noise = torch.randn(
                (b, horizon, self.cfg.action_dim),
                generator=generator,
                device=batch["tokens"].device,
                dtype=torch.float32,
            )
        noise = noise.to(dtype)
        prefix, prefix_pad = self.embed_prefix(batch)
        prefix = prefix.to(self.stream_dtype())
        zeros = torch.zeros_like(prefix_pad, dtype=torch.int32)
        positions = prefix_pad.long().cumsum(1) - 1
        mask, cos, sin = self._mask_and_rope(prefix_pad, zeros, prefix_pad, zeros, positions, prefix.dtype)
        _, _, kv = self.backbone(prefix, None, None, mask, cos, sin, collect_kv=True)

        suffix_pad = torch.ones((b, horizon), dtype=torch.bool, device=prefix.device)
        pad_k = torch.cat([prefix_pad, suffix_pad], dim=1)
        cum_k = torch.cat([zeros, torch.ones_like(suffix_pad, dtype=torch.int32)], dim=1)
        positions = prefix_pad.long().sum(1, keepdim=True) + torch.arange(horizon, device=prefix.device)
        mask, cos, sin = self._mask_and_rope(suffix_pad, cum_k[:, -horizon:], pad_k, cum_k, positions, prefix.dtype)

        x = noise
        dt = -1.0 / steps
        for i in range(steps):
            t = torch.full((b,), 1.0 + i * dt, device=prefix.device, dtype=torch.float32)
            suffix, cond = self.suffix_embed(x, t)
            _, suffix_out, _ = self.backbone(None, suffix.to(self.stream_dtype()), cond, mask, cos, sin, past_kv=kv)
            x = x + dt * self.action_out(suffix_out.to(unwrapped(self.action_out).weight.dtype)).to(x.dtype)
        return x

    def backbone_layers(self) -> nn.ModuleList:
        """The joint layers, whether or not the backbone is wrapped for recompute."""
        return unwrapped(self.backbone).layers

    def set_attention(self, kind: str, vision: str = "sdpa"):
        """Select the attention kernel of the joint layers, and eager or SDPA for the vision tower (both
        references build SigLIP with SDPA; only their joint attention is eager)."""
        self.attention_kind = kind
        for layer in self.backbone_layers():
            unwrapped(layer).attention.kind = kind
        for layer in self.vision.layers:
            layer.attn.kind = vision


def unwrapped(module: nn.Module) -> nn.Module:
    """The module inside a wrapper that holds it as `.module` (recompute, DDP), else the module itself."""
    return getattr(module, "module", module)


def init_weights(model: nn.Module, seed: int, std: float = 0.02):
    """Deterministic random init for measurement (real checkpoints load over it): matrices, convs and
    embeddings ~ N(0, std), biases 0, LayerNorm 1/0, RMSNorm weights 0 (= scale 1). The adaRMS denses
    get random weights too (the reference zero-inits them), so every expert weight carries gradient."""
    gens = {}
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                if isinstance(module, nn.LayerNorm):
                    p.fill_(1.0 if name == "weight" else 0.0)
                elif p.dim() >= 2:
                    gen = gens.setdefault(p.device, torch.Generator(device=p.device).manual_seed(seed))
                    p.normal_(0.0, std, generator=gen)
                else:
                    p.zero_()
