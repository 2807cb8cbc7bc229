"""openpi's Pi0.5 fine-tuning recipe: AdamW, linear warm-up then cosine decay, gradient clipping at 1.0, and an
exponential moving average of the weights, with the values of openpi's `pi05_libero` training config.

Sources (Physical-Intelligence/openpi, commit 15a9616a0094):
- src/openpi/training/optimizer.py: `AdamW` b1 0.9, b2 0.95, eps 1e-8, weight_decay 1e-10, clip_gradient_norm 1.0
  (a global-norm clip chained before optax.adamw); `CosineDecaySchedule.create` is optax's
  warmup_cosine_decay_schedule from init_value peak_lr / (warmup_steps + 1).
- src/openpi/training/config.py, TrainConfig `pi05_libero`: batch_size 256, CosineDecaySchedule(warmup_steps
  10_000, peak_lr 5e-5, decay_steps 1_000_000, decay_lr 5e-5), AdamW(clip_gradient_norm=1.0), ema_decay 0.999,
  num_train_steps 30_000 (pi05_base weights; action_horizon 10, discrete_state_input False).
- scripts/train.py: the EMA update `ema_decay * old + (1 - ema_decay) * new` after every optimizer step, from the
  initial weights; src/openpi/training/checkpoints.py saves the EMA weights as the checkpoint's params.
- scripts/train_pytorch.py: the same schedule written out for PyTorch (`lr_schedule(step)`, set before each step)
  and torch.optim.AdamW with the config's betas, eps and weight decay; it has no EMA ("EMA is not supported for
  PyTorch training"). We keep openpi's EMA, as its JAX trainer does.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

OPENPI_SOURCE = "Physical-Intelligence/openpi@15a9616a0094: src/openpi/training/config.py (pi05_libero), optimizer.py"


@dataclass(frozen=True)
class Recipe:
    """The optimisation of a training run. The defaults are openpi's pi05_libero values."""

    peak_lr: float = 5e-5
    warmup_steps: int = 10_000
    decay_steps: int = 1_000_000
    decay_lr: float = 5e-5
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    weight_decay: float = 1e-10
    clip_norm: float = 1.0
    ema_decay: float | None = 0.999
    # what openpi's pi05_libero trains for (global batch and steps); a run sets its own with --batch-size/--steps
    batch_size: int = 256
    steps: int = 30_000

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "betas": list(self.betas), "source": OPENPI_SOURCE}

    def changed(self) -> dict:
        """The values that differ from openpi's pi05_libero, as {name: [openpi's, this run's]}."""
        openpi = Recipe()
        return {
            f.name: [getattr(openpi, f.name), getattr(self, f.name)]
            for f in dataclasses.fields(self)
            if f.name not in ("batch_size", "steps") and getattr(openpi, f.name) != getattr(self, f.name)
        }


OPENPI_PI05_LIBERO = Recipe()


def lr_at(recipe: Recipe, step: int) -> float:
    """The learning rate of optimizer step `step` (0-based): optax's warmup_cosine_decay_schedule as openpi
    builds it, i.e. linear from peak/(warmup+1) to peak over the warm-up, then cosine to decay_lr at decay_steps
    (counted from step 0), then decay_lr."""
    if step < recipe.warmup_steps:
        start = recipe.peak_lr / (recipe.warmup_steps + 1)
        return start + (recipe.peak_lr - start) * step / recipe.warmup_steps
    progress = min(1.0, (step - recipe.warmup_steps) / max(1, recipe.decay_steps - recipe.warmup_steps))
    return recipe.decay_lr + (recipe.peak_lr - recipe.decay_lr) * 0.5 * (1 + math.cos(math.pi * progress))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """The schedule's rate for this step. A group whose step may be captured in a CUDA graph (`capturable`) keeps
    its rate in a device tensor, written in place: a replayed step reads it there, where a float would stay the one
    it was captured with."""
    for group in optimizer.param_groups:
        if not group.get("capturable"):
            group["lr"] = lr
        elif isinstance(group["lr"], torch.Tensor):
            group["lr"].fill_(lr)
        else:
            group["lr"] = torch.tensor(lr, dtype=torch.float32, device=group["params"][0].device)


def optimizer_mismatch(optimizer: torch.optim.Optimizer, recipe: Recipe) -> str | None:
    """Why the family's optimizer is not the recipe's AdamW (None when it is)."""
    group = optimizer.param_groups[0]
    if not isinstance(optimizer, torch.optim.AdamW):
        return f"the family's optimizer is {type(optimizer).__name__}, the recipe's AdamW"
    found = (tuple(group["betas"]), group["eps"], group["weight_decay"])
    wanted = (tuple(recipe.betas), recipe.eps, recipe.weight_decay)
    if found != wanted:
        return f"the family's AdamW has betas, eps, weight decay {found}, the recipe's {wanted}"
    return None


class Ema:
    """An fp32 exponential moving average of parameters, updated after each optimizer step as openpi does:
    ema = decay * ema + (1 - decay) * param, starting from the initial weights."""

    def __init__(self, named: dict[str, torch.Tensor], decay: float):
        self.decay = decay
        self.names = list(named)
        self.params = [named[n] for n in self.names]
        self.shadow = [p.detach().float().clone() for p in self.params]

    CHUNK = 64  # tensors per fused update: bounds the fp32 copies of bf16 parameters alive at once

    @torch.no_grad()
    def update(self) -> None:
        for i in range(0, len(self.params), self.CHUNK):
            current = [p.detach().float() for p in self.params[i : i + self.CHUNK]]  # fp32 ones are not copied
            torch._foreach_lerp_(self.shadow[i : i + self.CHUNK], current, 1.0 - self.decay)

    def tensors(self) -> dict[str, torch.Tensor]:
        return dict(zip(self.names, self.shadow))

    def load(self, tensors: dict[str, torch.Tensor]) -> None:
        missing = [n for n in self.names if n not in tensors]
        if missing:
            raise ValueError(f"EMA weights missing for {len(missing)} parameters (e.g. {missing[0]})")
        with torch.no_grad():
            for name, shadow in zip(self.names, self.shadow):
                shadow.copy_(tensors[name])
