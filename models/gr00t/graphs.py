"""Per-micro-batch CUDA graphs for the training step (the `cuda_graphs` option), as LoongForge runs GR00T N1.6
(`per_microbatch_cuda_graph.py`: `--cuda-graph-scope per_microbatch`, 3 warm-up iterations, the VL sequence
padded to 220, gradient sync outside the graph in coalesced 400 MB bf16 buckets).

One graph holds a micro-batch's forward and backward. The step pads the VL tokens to `vl_pad`, copies the batch
into the graph's static input buffers and replays; the all-reduce, gradient clipping and the optimizer step run
after the replay: eagerly, or (`graph_optimizer`) the clipping and a capturable AdamW step replayed from a
second graph per shape, captured after the first (the optimizer's state made beforehand by a zero update). A
graph is captured on the first batch of each distinct shape (a few eager forward/backward iterations on a side
stream first, so lazy initialisation happens outside the capture) and kept: later batches of that shape only
replay it.

Random draws: the flow-matching noise and Beta draw are batch inputs (drawn on the host), so a replay never
repeats them. The DiT's dropout stays inside the graph: torch's CUDA generator is graph-safe (Philox): a
captured kernel reads its seed and offset from device memory that each replay fills from the generator's state
at launch, and the replay advances the generator by the graph's whole consumption, so a seeded replay draws the
masks an eager step would (see the note "CUDA Graph-safe RNG states" in ATen/cuda/CUDAGeneratorImpl.h).

Gradients and data parallelism: a replay runs no Python and no autograd engine, so no autograd hook fires, not
DDP's reducer nor the bucketed wrapper's hooks (models/ddp.py). By default (`grad_sync: after-graph`, LoongForge's
`--no-cuda-graph-ddp-sync-in-graph`) the capture therefore runs the unwrapped module under the wrapper's
`no_sync()` (no collective is captured), and after each replay the step averages the gradients itself, in
reverse-order buckets of the rung's bucket size and communication dtype. That all-reduce is exposed: it no
longer overlaps backward. With `grad_sync: in-graph` (the bucketed wrapper only) the capture lets the bucket
hooks fire: each bucket's pack, asynchronous all-reduce (NCCL, which CUDA graphs can capture) and unpack are
recorded into the graph, so a replay runs each bucket's all-reduce beside the rest of backward, as the eager
step does. The wrapper's timing events are off while capturing, and a step under `no_sync()` (the harness's
exposed-communication measurement) replays a graph of its own, captured without the collectives. Each shape's
graph owns its gradient tensors; the step points `.grad` at the replayed graph's.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from ..ddp import COMM_DTYPES, BucketedDataParallel, DdpFlags, bucket_settings, split_buckets
from ..family import clip_and_step
from ..graph_capture import (
    WARMUP,
    check_learning_rates,
    learning_rates,
    prepare_optimizer,
    shape_key,
    warm_up,
)
from .model import pad_vl


@dataclass
class Captured:
    graph: torch.cuda.CUDAGraph
    inputs: dict  # static input buffers, copied into before each replay
    loss: torch.Tensor  # the graph's output
    grads: list  # the gradient tensors the graph writes, one per trainable parameter (None if it gets none)
    optimizer_graph: torch.cuda.CUDAGraph | None = None  # clipping and the optimizer step on those gradients
    lrs: tuple[float, ...] = ()  # the learning rates the optimizer graph was captured with


def comm_settings(flags: DdpFlags | None) -> tuple[float, torch.dtype]:
    """Bucket size (MB) and communication dtype of the out-of-graph all-reduce, from the rung's DDP flags:
    the bucketed wrapper's (models/ddp.py: 400 MB, bf16 by default), or DDP's 25 MB with its compression hook's
    dtype."""
    if flags is not None and flags.implementation == "buckets":
        bucket_mb, dtype, _ = bucket_settings(flags)
        return bucket_mb, COMM_DTYPES[dtype]
    hook = flags.comm_hook if flags is not None else None
    dtype = {"bf16_compress": torch.bfloat16, "fp16_compress": torch.float16}.get(hook, torch.float32)
    return (flags.bucket_cap_mb if flags is not None and flags.bucket_cap_mb else 25.0), dtype


def average_gradients(grads: list[torch.Tensor], bucket_mb: float, dtype: torch.dtype, group=None) -> None:
    """Average gradients over the process group in place: reverse order (the order backward produced them),
    packed into contiguous buckets of at most `bucket_mb` in `dtype` (the bucketed wrapper's split), one
    asynchronous all-reduce per bucket."""
    world = dist.get_world_size(group)
    pending = []
    for bucket in split_buckets(grads[::-1], bucket_mb, dtype):
        flat = torch.cat([g.reshape(-1).to(dtype) for g in bucket])
        pending.append((dist.all_reduce(flat, group=group, async_op=True), flat, bucket))
    for work, flat, bucket in pending:
        work.wait()
        flat.div_(world)
        offset = 0
        for g in bucket:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()


def _syncing(wrapper: nn.Module) -> bool:
    """False inside the wrapper's no_sync() (torch DDP's flag, or the bucketed wrapper's)."""
    return bool(getattr(wrapper, "require_backward_grad_sync", getattr(wrapper, "syncing", True)))


@contextlib.contextmanager
def _autocast_cache_off():
    """Autocast's weight-cast cache off while capturing (make_graphed_callables requires it; every weight is
    cast once per forward here, so the cache saved nothing)."""
    before = torch.is_autocast_cache_enabled()
    torch.set_autocast_cache_enabled(False)
    try:
        yield
    finally:
        torch.set_autocast_cache_enabled(before)


class GraphedStep:
    """A training step that replays one CUDA graph per batch shape (see the module docstring)."""

    def __init__(
        self,
        loss_fn,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        vl_pad: int,
        pad_id: int,
        flags: DdpFlags | None = None,
        clip: float = 1.0,
        warmup: int = WARMUP,
        graph_optimizer: bool = False,
        grad_sync: str = "after-graph",
    ):
        self.wrapper = model
        self.module = getattr(model, "module", model)  # a DDP or bucketed wrapper holds the model as .module
        if grad_sync not in ("after-graph", "in-graph"):
            raise ValueError(f"grad_sync: expected after-graph or in-graph, got {grad_sync!r}")
        # in-graph: only with a wrapper (one process has nothing to synchronise), and only the bucketed one
        self.in_graph = grad_sync == "in-graph" and model is not self.module
        if self.in_graph and not isinstance(model, BucketedDataParallel):
            raise ValueError("grad_sync: in-graph needs the gradient buckets of ddp implementation: buckets")
        if graph_optimizer and not all(group.get("capturable") for group in optimizer.param_groups):
            raise ValueError("graph_optimizer: needs an optimizer made with capturable=True")
        self.loss_fn, self.optimizer, self.clip, self.warmup = loss_fn, optimizer, clip, warmup
        self.graph_optimizer = graph_optimizer
        self.params = [p for p in self.module.parameters() if p.requires_grad]
        self.vl_pad, self.pad_id = vl_pad, pad_id
        self.bucket_mb, self.comm_dtype = comm_settings(flags)
        self.graphs: dict[tuple, Captured] = {}
        self.captures = self.replays = 0

    def __call__(self, batch: dict) -> torch.Tensor:
        entry = self._replay(batch)
        loss = entry.loss.detach().clone()  # the graph overwrites its output on the next replay
        if (
            not self.in_graph
            and dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size() > 1
            and _syncing(self.wrapper)
        ):
            average_gradients([p.grad for p in self.params if p.grad is not None], self.bucket_mb, self.comm_dtype)
        if self.graph_optimizer:
            if entry.optimizer_graph is None:
                entry.optimizer_graph, entry.lrs = self._capture_optimizer(), learning_rates(self.optimizer)
            check_learning_rates(self.optimizer, entry.lrs, "graph_optimizer")
            entry.optimizer_graph.replay()
        else:
            self._optimizer_step()
        # no zero_grad: the next replay overwrites the graph's gradient tensors
        return loss

    def _optimizer_step(self) -> None:
        clip_and_step(self.optimizer, self.params, self.clip)

    def _capture_optimizer(self) -> torch.cuda.CUDAGraph:
        """The clipping and optimizer step on the current shape's gradient tensors, as a graph. Outside the capture
        first: the optimizer's state made by a zero update (once: a later shape keeps the state), or a compiled
        update compiled (graph_capture.prepare_optimizer)."""
        grads = [p.grad for p in self.params]
        prepare_optimizer(self.optimizer, self.params)
        for p, g in zip(self.params, grads):  # making the state may have zeroed them
            p.grad = g
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self._optimizer_step()
        return graph

    def forward_backward(self, batch: dict) -> torch.Tensor:
        """Replay (capturing first if the shape is new) and leave the gradients in `.grad`; the loss, detached."""
        return self._replay(batch).loss.detach().clone()  # the graph overwrites its output on the next replay

    def _replay(self, batch: dict) -> Captured:
        """The forward/backward graph of the batch's shape replayed (captured first if new); its entry."""
        ids, mask = pad_vl(batch["input_ids"], batch["attention_mask"], self.vl_pad, self.pad_id)
        batch = {**batch, "input_ids": ids, "attention_mask": mask}
        for key, value in batch.items():
            if not isinstance(value, torch.Tensor) or value.device.type != "cuda":
                raise ValueError(
                    f"cuda_graphs: every batch entry must be a CUDA tensor, {key!r} is "
                    f"{value.device if isinstance(value, torch.Tensor) else type(value).__name__}"
                )
        # in-graph sync: a graph with the collectives, and one without them for steps under no_sync()
        shape = (shape_key(batch), self.in_graph and _syncing(self.wrapper))
        entry = self.graphs.get(shape)
        if entry is None:
            entry = self.graphs[shape] = self._capture(batch)
        else:
            for key, value in batch.items():
                entry.inputs[key].copy_(value)
        entry.graph.replay()
        self.replays += 1
        if any(p.grad is not g for p, g in zip(self.params, entry.grads)):  # another shape's graph ran last
            for p, g in zip(self.params, entry.grads):
                p.grad = g
        return entry

    def _capture(self, batch: dict) -> Captured:
        device = next(iter(batch.values())).device
        inputs = {k: v.clone() for k, v in batch.items()}
        if self.wrapper is self.module:
            comm = contextlib.nullcontext()
        elif self.in_graph:  # the bucket hooks fire as they are (or stay off under the caller's no_sync())
            comm = self.wrapper.untimed()
        else:
            comm = self.wrapper.no_sync()
        # The warm-up draws dropout masks; fork_rng puts the generator back, so the replay below draws what an
        # eager step would.
        with torch.cuda.device(device), torch.random.fork_rng(devices=[device]), comm, _autocast_cache_off():
            warm_up(self.warmup, self.loss_fn, self.module, inputs, self.params)
            graph = torch.cuda.CUDAGraph()
            # thread_local: the async input pipeline's thread may copy the next batch to the device meanwhile
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                loss = self.loss_fn(self.module, inputs)
                loss.backward()
        self.captures += 1
        return Captured(graph, inputs, loss, [p.grad for p in self.params])
