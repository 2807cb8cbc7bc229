"""What the CUDA-graph steps share (models/whole_step_graph.py, models/gr00t/graphs.py): the warm-up of torch's
capture recipe and the key a captured graph is kept under."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

WARMUP = 3  # eager forward/backward passes before a capture (torch's documented recipe; LoongForge's default)


def shape_key(batch: dict) -> tuple:
    """A batch's shapes, dtypes and devices (and its other entries' values): one graph is captured per key."""
    return tuple(
        (k, tuple(v.shape), v.dtype, v.device) if isinstance(v, torch.Tensor) else (k, repr(v))
        for k, v in sorted(batch.items())
    )


def drop_grads(params: list[torch.Tensor]) -> None:
    for p in params:
        p.grad = None


def warm_up(
    passes: int,
    loss_fn: Callable[[nn.Module, dict], torch.Tensor],
    model: nn.Module,
    inputs: dict,
    params: list[torch.Tensor],
    then: Callable[[], None] | None = None,
) -> None:
    """`passes` eager forward/backward passes on a side stream (lazy initialisation, cuBLAS workspaces and compiled
    units' first runs stay outside the capture), then `then` on that stream; the gradients are left unset, so that
    backward inside the capture allocates them in the graph's memory pool."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(passes):
            drop_grads(params)
            loss_fn(model, inputs).backward()
        if then is not None:
            then()
    torch.cuda.current_stream().wait_stream(side)
    drop_grads(params)
