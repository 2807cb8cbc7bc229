"""Synthetic Pi0.5 training batches. Everything random (images, prompt lengths, actions, noise and
flow time) is drawn on the CPU from the seed, so every rung and every device sees the same inputs."""

from __future__ import annotations

import torch

from .. import batches
from ..workload import Workload
from .config import Pi05Config

# LIBERO prompts in the Pi0.5 format ("Task: ..., State: <8 discretised values>;\nAction: ") take
# roughly 48-80 Gemma tokens; the rest of the 200-token text budget is padding.
PROMPT_TOKENS = (48, 80)


def sample_flow_time(n: int, gen: torch.Generator) -> torch.Tensor:
    """t = Beta(1.5, 1) * 0.999 + 0.001. Beta(a, 1) is u ** (1 / a) for u ~ U(0, 1)."""
    return (batches.beta_draw(n, gen, 1.5) * 0.999 + 0.001).float()


def make_batch(
    cfg: Pi05Config, batch_size: int, cameras: int, text_tokens: int, action_horizon: int, gen: torch.Generator
) -> dict:
    size = cfg.vision.image_size
    lo, hi = min(PROMPT_TOKENS[0], text_tokens), min(PROMPT_TOKENS[1], text_tokens)
    lengths = torch.randint(lo, hi + 1, (batch_size,), generator=gen)
    token_masks = torch.arange(text_tokens)[None, :] < lengths[:, None]
    tokens = torch.randint(1, cfg.vocab, (batch_size, text_tokens), generator=gen) * token_masks
    return {
        "images": torch.rand((batch_size, cameras, 3, size, size), generator=gen) * 2 - 1,
        "image_masks": torch.ones((batch_size, cameras), dtype=torch.bool),
        "tokens": tokens,
        "token_masks": token_masks,
        # Pi0.5 reads the state discretised inside the prompt; the raw vector is kept for policies.
        "state": torch.randn((batch_size, cfg.action_dim), generator=gen),
        "actions": torch.randn((batch_size, action_horizon, cfg.action_dim), generator=gen),
        "noise": torch.randn((batch_size, action_horizon, cfg.action_dim), generator=gen),
        "time": sample_flow_time(batch_size, gen),
    }


def to_device(batch: dict, device, dtype: torch.dtype) -> dict:
    """Floating tensors go to the model dtype, except the flow time which stays fp32."""
    return batches.to_device(batch, device, dtype, keep=("time",))


def make_batches(cfg: Pi05Config, workload: Workload, n: int, device, dtype: torch.dtype, seed: int) -> list[dict]:
    def one(gen):
        return make_batch(
            cfg, workload.batch_size, workload.cameras, workload.text_tokens, workload.action_horizon, gen
        )

    return batches.seeded_batches(one, n, device, dtype, seed, keep=("time",))
