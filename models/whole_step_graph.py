"""A whole training step as one CUDA graph: forward, backward, gradient clipping and the optimizer step
captured once and replayed, so that a step launches no kernel from Python (a family's `cuda_graphs:
whole-step` option; GR00T's per-micro-batch graphs in models/gr00t/graphs.py keep the optimizer outside).

Capture follows torch's whole-network recipe: a few eager forward/backward passes on a side stream first (lazy
initialisation, cuBLAS workspaces and compiled units' first runs stay outside the capture), the optimizer's
state created before the capture so that the graph does not re-create it on every replay, and gradients left
unset so that backward allocates them in the graph's memory pool. Each replay then overwrites them.

The math is the eager step's: the warm-up passes update nothing, and the optimizer's state is made by one step
on all-zero gradients with weight decay off (an update of exactly zero) and then reset to its initial zeros. Random draws inside the step come from torch's CUDA
generator, which is graph-safe: a replay reads the generator's seed and offset at launch, so a seeded replay
draws what an eager step would.

Requirements: a CUDA device, a fixed batch shape (a new shape captures a graph of its own), an optimizer made
with `capturable=True` (its step counter lives on the device), no host synchronisation inside the step, and one
process: a data-parallel wrapper's gradient hooks never fire in a replay.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .family import clip_and_step, forward_backward, split_batch
from .graph_capture import WARMUP, check_learning_rates, learning_rates, prepare_optimizer, shape_key, warm_up


@dataclass
class _Graph:
    graph: torch.cuda.CUDAGraph
    inputs: dict  # static buffers the batch is copied into before each replay
    loss: torch.Tensor  # written by each replay
    lrs: tuple[float, ...]  # the learning rates the optimizer step was captured with


class WholeStepGraph:
    """step(batch) -> detached loss, replaying one captured step per batch shape (see the module docstring)."""

    def __init__(
        self,
        loss_fn: Callable[[nn.Module, dict], torch.Tensor],
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        clip: float = 1.0,
        warmup: int = WARMUP,
        micro_batches: int = 1,
    ):
        if hasattr(model, "module"):
            raise ValueError(
                "cuda_graphs: whole-step needs one process (a data-parallel wrapper's all-reduce hooks never fire "
                "inside a replayed graph)"
            )
        if not all(group.get("capturable") for group in optimizer.param_groups):
            raise ValueError("cuda_graphs: whole-step needs an optimizer made with capturable=True")
        self.loss_fn, self.model, self.optimizer, self.clip, self.warmup = loss_fn, model, optimizer, clip, warmup
        self.micro_batches = micro_batches  # the batch's slices run one after another inside the one graph
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.graphs: dict[tuple, _Graph] = {}
        self.captures = self.replays = 0

    def __call__(self, batch: dict) -> torch.Tensor:
        key = shape_key(batch)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs[key] = self._capture(batch)
        else:
            for name, value in batch.items():
                if isinstance(value, torch.Tensor):
                    entry.inputs[name].copy_(value, non_blocking=True)
        check_learning_rates(self.optimizer, entry.lrs, "cuda_graphs: whole-step")
        entry.graph.replay()
        self.replays += 1
        return entry.loss.detach().clone()  # the next replay overwrites the graph's output

    def _step(self, inputs: dict) -> torch.Tensor:
        loss = forward_backward(self.loss_fn, self.model, split_batch(inputs, self.micro_batches))
        clip_and_step(self.optimizer, self.params, self.clip)
        return loss

    def _capture(self, batch: dict) -> _Graph:
        for name, value in batch.items():
            if isinstance(value, torch.Tensor) and value.device.type != "cuda":
                raise ValueError(
                    f"cuda_graphs: every batch tensor must be on a CUDA device, {name!r} is on {value.device}"
                )
        inputs = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        warm_up(
            self.warmup,
            self.loss_fn,
            self.model,
            inputs,
            self.params,
            then=lambda: prepare_optimizer(self.optimizer, self.params),
            micro_batches=self.micro_batches,
        )
        graph = torch.cuda.CUDAGraph()
        # thread_local: a loader thread may copy the next batch to the device meanwhile
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            loss = self._step(inputs)
        self.captures += 1
        return _Graph(graph, inputs, loss, learning_rates(self.optimizer))
