"""Pi0.5 dimensions: `full` is the real model (openpi/LeRobot dimensions), `small` keeps every structure at a size
that trains LIBERO from scratch on one GPU (docs/training.md), `tiny` keeps every structure with widths for CPU tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VisionConfig:
    image_size: int = 224
    patch_size: int = 14
    width: int = 1152
    layers: int = 27
    heads: int = 16
    mlp: int = 4304
    eps: float = 1e-6

    @property
    def tokens(self) -> int:  # image tokens per camera
        return (self.image_size // self.patch_size) ** 2


@dataclass(frozen=True)
class GemmaConfig:
    width: int
    layers: int
    mlp: int
    heads: int = 8
    kv_heads: int = 1
    head_dim: int = 256
    eps: float = 1e-6


@dataclass(frozen=True)
class Pi05Config:
    vision: VisionConfig
    llm: GemmaConfig  # Gemma-2B: the prefix (images + text) stream
    expert: GemmaConfig  # Gemma-300M action expert: the suffix (actions) stream
    vocab: int = 257152
    action_dim: int = 32
    rope_theta: float = 10000.0
    time_min_period: float = 4e-3
    time_max_period: float = 4.0
    # FP8 converts a linear only when both its sides have at least this many features (models/fp8.py explains
    # the default); a small model lowers it so that the fp8 rung still trains its linears in FP8
    fp8_min_features: int = 1024

    def __post_init__(self):
        if self.llm.layers != self.expert.layers:
            raise ValueError("joint attention pairs each LLM layer with one expert layer")
        if (self.llm.heads, self.llm.kv_heads, self.llm.head_dim) != (
            self.expert.heads,
            self.expert.kv_heads,
            self.expert.head_dim,
        ):
            raise ValueError("both streams must share attention heads and head_dim")


FULL = Pi05Config(
    vision=VisionConfig(),
    llm=GemmaConfig(width=2048, layers=18, mlp=16384),
    expert=GemmaConfig(width=1024, layers=18, mlp=4096),
)

TINY = Pi05Config(
    vision=VisionConfig(image_size=56, width=32, layers=2, heads=2, mlp=64),
    llm=GemmaConfig(width=64, layers=3, mlp=128, heads=2, kv_heads=1, head_dim=16),
    expert=GemmaConfig(width=32, layers=3, mlp=64, heads=2, kv_heads=1, head_dim=16),
    vocab=512,
)

# Every Pi0.5 structure (SigLIP/14 on 112x112 images, 64 tokens per camera; a Gemma prefix stream with MQA and
# the task prompt with the discretised state; the action expert with adaRMS; flow matching) at ~30M parameters.
# Every linear dimension is a multiple of 16 (FP8 GEMMs), heads of 64 (FlashAttention, FlexAttention), and the
# byte vocabulary (UTF-8 bytes from 3; the byte tokenizer needs 259) rounded up to 512.
SMALL = Pi05Config(
    vision=VisionConfig(image_size=112, width=384, layers=4, heads=6, mlp=1536),
    llm=GemmaConfig(width=512, layers=4, mlp=2048, heads=8, kv_heads=1, head_dim=64),
    expert=GemmaConfig(width=256, layers=4, mlp=1024, heads=8, kv_heads=1, head_dim=64),
    vocab=512,
    fp8_min_features=256,
)

SIZES = {"full": FULL, "small": SMALL, "tiny": TINY}
