"""What the CUDA-graph steps share (models/whole_step_graph.py, models/gr00t/graphs.py): the warm-up of torch's
capture recipe, the key a captured graph is kept under, and what a captured optimizer step needs."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .clipped_adamw import ClippedAdamW
from .family import forward_backward, split_batch
from .triton_adamw import TritonClippedAdamW

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
    micro_batches: int = 1,
) -> None:
    """`passes` eager forward/backward passes on a side stream (lazy initialisation, cuBLAS workspaces and compiled
    units' first runs stay outside the capture), then `then` on that stream; the gradients are left unset, so that
    backward inside the capture allocates them in the graph's memory pool. With micro-batches each pass runs the
    batch in slices, as the captured step will (the whole batch at once may not fit)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(passes):
            drop_grads(params)
            forward_backward(loss_fn, model, split_batch(inputs, micro_batches))
        if then is not None:
            then()
    torch.cuda.current_stream().wait_stream(side)
    drop_grads(params)


def prepare_optimizer(optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> None:
    """What an optimizer step needs before its capture: a compiled update (ClippedAdamW) compiled by a warm-up
    that moves nothing; otherwise the state made once (init_optimizer_state), leaving zero gradients. Triton's
    AdamW makes its state at construction, and the same zero step compiles its kernels and makes its tables, for
    the parameters the warm-up's backward gave gradients (the ones the captured step will have)."""
    if isinstance(optimizer, ClippedAdamW):
        optimizer.warm_up()
    elif isinstance(optimizer, TritonClippedAdamW):
        if not optimizer.stepped:
            init_optimizer_state(optimizer, [p for p in params if p.grad is not None])
    elif not optimizer.state:
        init_optimizer_state(optimizer, params)


def init_optimizer_state(optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> None:
    """Create the optimizer's state outside a capture, so the graph does not re-create it on every replay: one
    step on all-zero gradients with weight decay off (an update of exactly zero), then the state reset to the
    zeros a fresh optimizer starts from, so the first replayed step is the eager first step. Leaves the
    gradients set to those zeros."""
    for p in params:
        p.grad = torch.zeros_like(p)
    decays = [group.get("weight_decay", 0.0) for group in optimizer.param_groups]
    for group in optimizer.param_groups:
        group["weight_decay"] = 0.0
    optimizer.step()
    for group, decay in zip(optimizer.param_groups, decays):
        group["weight_decay"] = decay
    with torch.no_grad():
        for state in optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor):
                    value.zero_()


def learning_rates(optimizer: torch.optim.Optimizer) -> tuple:
    """The groups' learning rates as a captured optimizer step holds them: a float is baked into the graph; a
    device tensor (harness/train/recipe.py set_lr) is read by every replay, so the tensor itself is kept."""
    return tuple(g["lr"] if isinstance(g["lr"], torch.Tensor) else float(g["lr"]) for g in optimizer.param_groups)


def check_learning_rates(optimizer: torch.optim.Optimizer, captured: tuple, option: str) -> None:
    """Refuse to replay a captured optimizer step after a baked-in learning rate changed (a schedule of floats),
    or after a group's device-tensor rate was replaced by another tensor: the graph would silently keep applying
    the old one. A device tensor written in place is what a schedule needs (no host sync here)."""
    now = learning_rates(optimizer)
    for before, after in zip(captured, now):
        tensor = isinstance(before, torch.Tensor) or isinstance(after, torch.Tensor)
        if not (before is after if tensor else before == after):
            raise ValueError(
                f"{option}: the learning rate changed from {_shown(captured)} to {_shown(now)} after the optimizer "
                "step was captured; a schedule needs the rate in a device tensor written in place (capturable "
                "optimizer) or the optimizer step outside the graph"
            )


def _shown(rates: tuple) -> tuple:
    return tuple("a device tensor" if isinstance(x, torch.Tensor) else x for x in rates)
