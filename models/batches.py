"""What the families' synthetic batches share: a seeded CPU generator for every random input (so every rung and
every device sees the same batches), the Beta(alpha, 1) draw of flow-matching time, and the move to the device
in the model dtype with the tensors that must stay fp32 left alone."""

from __future__ import annotations

from collections.abc import Callable

import torch


def beta_draw(n: int, gen: torch.Generator, alpha: float = 1.5) -> torch.Tensor:
    """n draws of Beta(alpha, 1) in float64: its CDF is x ** alpha, so U ** (1 / alpha) for U ~ U(0, 1)."""
    return torch.rand(n, generator=gen, dtype=torch.float64) ** (1.0 / alpha)


def to_device(batch: dict, device, dtype: torch.dtype, keep: tuple[str, ...] = ()) -> dict:
    """Floating tensors in the model dtype, except those named in `keep`; everything on `device`."""
    out = {}
    for key, value in batch.items():
        if value.is_floating_point() and key not in keep:
            value = value.to(dtype)
        out[key] = value.to(device, non_blocking=True)
    return out


def seeded_batches(
    make_batch: Callable[[torch.Generator], dict],
    n: int,
    device,
    dtype: torch.dtype,
    seed: int,
    keep: tuple[str, ...] = (),
) -> list[dict]:
    """`n` batches of `make_batch(generator)`, all drawn from one generator seeded with `seed`."""
    gen = torch.Generator().manual_seed(seed)
    return [to_device(make_batch(gen), device, dtype, keep) for _ in range(n)]
