"""GR00T N1.6 dimensions: `full` is the released model, `tiny` keeps every structure with small widths.

Sources (Isaac-GR00T at "GR00T N1.6 Release (#456)"): `gr00t/configs/model/gr00t_n1d6.py` (action head, DiT,
flow matching, trainable set), `gr00t/model/modules/nvidia/Eagle-Block2A-2B-v2/config.json` (SigLIP2 vision
tower, Qwen3-1.7B text config, image token id, pixel-shuffle ratio), `gr00t/model/modules/dit.py` (DiT
defaults the config does not set: biases, tanh-GELU, LayerNorm eps, 256-channel timestep sinusoid).
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class VisionConfig:
    """SigLIP2 (`siglip2_vision_model`) as Eagle-Block2A-2B-v2 configures it: no RoPE, no windowed attention
    (`use_rope: false`, `use_windows_attn: false`), so every layer attends over the whole image."""

    image_size: int = 224
    patch_size: int = 14
    width: int = 1152
    layers: int = 27
    heads: int = 16
    mlp: int = 4304
    position_grid: int = 16  # `num_patches: 256`: a learned 16x16 grid, resized to the image's patch grid
    unshuffle: int = 2  # `downsample_ratio: 0.5`: pixel-unshuffle 2x2 patches into one token
    window: int = 14  # `window_size`: the reference packs patches into 14x14 windows (no layer attends by window)
    eps: float = 1e-6

    @property
    def patches(self) -> int:  # per side
        return self.image_size // self.patch_size

    @property
    def tokens(self) -> int:  # LLM tokens per image after pixel-unshuffle
        return (self.patches // self.unshuffle) ** 2

    @property
    def unshuffled_width(self) -> int:
        return self.width * self.unshuffle**2


@dataclass(frozen=True)
class LLMConfig:
    """Qwen3-1.7B layout; the Eagle config builds 28 layers and GR00T keeps the first `layers`
    (`select_layer: 16`: the others are popped before the weights load)."""

    width: int = 2048
    layers: int = 16
    mlp: int = 6144
    heads: int = 16
    kv_heads: int = 8
    head_dim: int = 128
    vocab: int = 151680
    rope_theta: float = 1e6
    eps: float = 1e-6
    built_layers: int = 28  # Qwen3-1.7B; documentation only


@dataclass(frozen=True)
class DiTConfig:
    """AlternateVLDiT: odd blocks self-attention, even blocks cross-attention to the VL features; of those,
    index % (2 * attend_text_every_n_blocks) == 0 sees text tokens only, the others image tokens only."""

    layers: int = 32
    heads: int = 32
    head_dim: int = 48
    mlp: int = 6144  # diffusers FeedForward: 4 x width
    out: int = 1024  # `output_dim`: the action decoder's input width
    dropout: float = 0.2  # attention output, block output (`final_dropout`) and both FeedForward dropouts
    time_channels: int = 256  # diffusers Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=1)
    attend_text_every_n_blocks: int = 2
    eps: float = 1e-5  # block LayerNorms (no affine)
    out_eps: float = 1e-6  # output LayerNorm (no affine)

    @property
    def width(self) -> int:
        return self.heads * self.head_dim


@dataclass(frozen=True)
class HeadConfig:
    """Per-embodiment state/action encoders and decoder, flow matching and sampling."""

    state_dim: int = 128  # `max_state_dim` of the released checkpoint
    action_dim: int = 128  # `max_action_dim`
    hidden: int = 1024  # `hidden_size`: state encoder and action decoder hidden width
    embodiments: int = 32  # `max_num_embodiments`
    max_positions: int = 1024  # `max_seq_len`: learned action positions
    timestep_buckets: int = 1000
    noise_s: float = 0.999  # t = (1 - u) * noise_s, u ~ Beta(beta_alpha, beta_beta)
    beta_alpha: float = 1.5
    beta_beta: float = 1.0
    inference_steps: int = 4
    # Per-sample probability of replacing the state token by a learned mask token. 0 in the model config
    # and in LoongForge's run; Isaac-GR00T's LIBERO fine-tune scripts pass 0.8 (adds a 1,536-parameter token).
    state_dropout: float = 0.0


@dataclass(frozen=True)
class Gr00tConfig:
    vision: VisionConfig
    llm: LLMConfig
    dit: DiTConfig
    head: HeadConfig
    image_token_id: int = 151669  # <IMG_CONTEXT>
    pad_token_id: int = 151643  # <|endoftext|>, the Qwen tokenizer's pad token (left padding)
    tune_top_llm_layers: int = 4

    def __post_init__(self):
        if max(self.image_token_id, self.pad_token_id) >= self.llm.vocab:
            raise ValueError("special token ids must lie inside the vocabulary")
        if not 0 <= self.tune_top_llm_layers <= self.llm.layers:
            raise ValueError("tune_top_llm_layers must be between 0 and the number of LLM layers")
        if self.vision.patches % self.vision.unshuffle:
            raise ValueError("the patch grid must divide by the pixel-unshuffle factor")


FULL = Gr00tConfig(vision=VisionConfig(), llm=LLMConfig(), dit=DiTConfig(), head=HeadConfig())

TINY = Gr00tConfig(
    vision=VisionConfig(image_size=56, width=32, layers=2, heads=2, mlp=64, position_grid=4),
    llm=LLMConfig(width=64, layers=4, mlp=128, heads=4, kv_heads=2, head_dim=16, vocab=512, built_layers=6),
    dit=DiTConfig(layers=4, heads=4, head_dim=16, mlp=256, out=32),
    head=HeadConfig(state_dim=16, action_dim=16, hidden=32, embodiments=4, max_positions=64),
    image_token_id=511,
    pad_token_id=510,
    tune_top_llm_layers=2,
)

# The released model fed the views Isaac-GR00T's LIBERO fine-tuning feeds it: its transforms give 256x256 frames and
# Eagle's processor resizes them to the multiple of 28 below (`smart_resize`), 252: an 18x18 patch grid (the learned
# 16x16 position grid resized) and 81 LLM tokens per view. The same weights as `full`, whose 224 (64 tokens) is
# LoongForge's published workload; this size measures our step at the reference's input size.
FULL_252 = replace(FULL, vision=replace(FULL.vision, image_size=252))

SIZES = {"full": FULL, "full-252": FULL_252, "tiny": TINY}
