"""Synthetic GR00T N1.6 training batches shaped like LoongForge's LIBERO run: 2 views at 224x224, a chat-template
prompt with the image tokens in it, the state token, 50-step action chunks padded to 128 dimensions, embodiment
`libero_panda`. Everything random (images, prompt lengths, state, actions, noise and the flow-time draw) comes
from the seed on the CPU, so every rung and every device sees the same inputs.

Sequence layout, as Isaac-GR00T's processor builds it (`processing_gr00t_n1d6.py` puts the instruction before
the images; Eagle's chat template and `processing_eagle3_vl.py` expand each image to
`<image k><img><IMG_CONTEXT> x 64</img>`), left-padded to the longest sequence of the batch like the reference
collator (`padding_side = "left"`):
  `<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n<|im_start|>user\\n` (15 tokens)
  instruction (LIBERO: 7-20 tokens, lower-cased, punctuation removed)
  per view: `<image k>` (4 tokens) `<img>` 64 x `<IMG_CONTEXT>` `</img>`
  `<|im_end|>\\n` (2 tokens)
Token ids other than <IMG_CONTEXT> and padding are drawn at random: only their count matters for the compute.
"""

from __future__ import annotations

import torch

from .. import batches
from ..workload import Workload
from .config import Gr00tConfig

TEMPLATE_HEAD = 15
IMAGE_MARKER = 4  # `<image k>`, followed by <img> ... </img>
TEMPLATE_TAIL = 2
INSTRUCTION_TOKENS = (7, 20)
STATE_DIMS = 8  # LIBERO: x, y, z, roll, pitch, yaw, 2 gripper joints (examples/LIBERO/modality.json)
ACTION_DIMS = 7  # x, y, z, roll, pitch, yaw, gripper
LIBERO_PANDA = 2  # EMBODIMENT_TAG_TO_PROJECTOR_INDEX["libero_panda"]


def non_image_tokens(cameras: int, instruction: int) -> int:
    return TEMPLATE_HEAD + instruction + cameras * (IMAGE_MARKER + 2) + TEMPLATE_TAIL


def instruction_range(cameras: int, text_tokens: int) -> tuple[int, int]:
    """Instruction lengths that fit a budget of `text_tokens` non-image tokens."""
    room = text_tokens - non_image_tokens(cameras, 0)
    lo, hi = min(INSTRUCTION_TOKENS[0], room), min(INSTRUCTION_TOKENS[1], room)
    if lo < 1:
        raise ValueError(
            f"text_tokens={text_tokens} leaves no room for an instruction next to the chat template "
            f"and {cameras} image markers ({non_image_tokens(cameras, 0)} tokens)"
        )
    return lo, hi


def prompt_ids(cfg: Gr00tConfig, cameras: int, instruction: int, gen: torch.Generator) -> torch.Tensor:
    text_vocab = min(cfg.image_token_id, cfg.pad_token_id)

    def text(n):
        return torch.randint(0, text_vocab, (n,), generator=gen)

    parts = [text(TEMPLATE_HEAD + instruction)]
    for _ in range(cameras):
        parts += [text(IMAGE_MARKER + 1), torch.full((cfg.vision.tokens,), cfg.image_token_id), text(1)]
    parts.append(text(TEMPLATE_TAIL))
    return torch.cat(parts)


def sample_beta(n: int, gen: torch.Generator, alpha: float = 1.5, beta: float = 1.0) -> torch.Tensor:
    """u ~ Beta(alpha, 1): its CDF is x ** alpha, so u = U ** (1 / alpha) for U ~ U(0, 1)."""
    if beta != 1.0:
        raise ValueError("only Beta(alpha, 1) is drawn by inverse CDF here (N1.6 uses Beta(1.5, 1))")
    return batches.beta_draw(n, gen, alpha).float()


def make_batch(
    cfg: Gr00tConfig,
    batch_size: int,
    cameras: int,
    text_tokens: int,
    action_horizon: int,
    gen: torch.Generator,
    embodiment_id: int = LIBERO_PANDA,
) -> dict:
    h, size = cfg.head, cfg.vision.image_size
    lo, hi = instruction_range(cameras, text_tokens)
    lengths = torch.randint(lo, hi + 1, (batch_size,), generator=gen)
    prompts = [prompt_ids(cfg, cameras, int(n), gen) for n in lengths]
    longest = max(len(p) for p in prompts)
    input_ids = torch.full((batch_size, longest), cfg.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((batch_size, longest), dtype=torch.bool)
    for i, p in enumerate(prompts):  # left padding
        input_ids[i, longest - len(p) :] = p
        attention_mask[i, longest - len(p) :] = True

    state = torch.zeros((batch_size, 1, h.state_dim))
    state[..., :STATE_DIMS] = torch.randn((batch_size, 1, min(STATE_DIMS, h.state_dim)), generator=gen)
    actions = torch.zeros((batch_size, action_horizon, h.action_dim))
    dims = min(ACTION_DIMS, h.action_dim)
    actions[..., :dims] = torch.randn((batch_size, action_horizon, dims), generator=gen)
    action_mask = torch.zeros_like(actions)
    action_mask[..., :dims] = 1.0
    return {
        "images": torch.rand((batch_size, cameras, 3, size, size), generator=gen) * 2 - 1,  # mean 0.5, std 0.5
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "state": state,
        "actions": actions,
        "action_mask": action_mask,
        "embodiment_id": torch.full((batch_size,), min(embodiment_id, h.embodiments - 1), dtype=torch.long),
        # the reference draws these inside the step; here they come with the batch, the same for every rung
        "noise": torch.randn((batch_size, action_horizon, h.action_dim), generator=gen),
        "beta_sample": sample_beta(batch_size, gen, h.beta_alpha, h.beta_beta),
    }


def to_device(batch: dict, device, dtype: torch.dtype) -> dict:
    """Floating inputs in the model's input dtype (the reference casts them to its first parameter's dtype:
    bf16), except the Beta draw, which the model casts itself."""
    return batches.to_device(batch, device, dtype, keep=("beta_sample",))


def make_batches(cfg: Gr00tConfig, workload: Workload, n: int, device, dtype: torch.dtype, seed: int) -> list[dict]:
    def one(gen):
        return make_batch(
            cfg, workload.batch_size, workload.cameras, workload.text_tokens, workload.action_horizon, gen
        )

    return batches.seeded_batches(one, n, device, dtype, seed, keep=("beta_sample",))
