"""Multi-process rungs under torchrun: process group, data shards and gathering per-rank measurements.

`vlabench run --nproc N` starts each rung with torchrun; every rank builds the same model (same seed),
takes its shard of the same global batch, and DDP averages the gradients, so N ranks train exactly
like one process on the global batch. Rank 0 gathers every rank's step times and writes the record.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch.distributed as dist

from ..machine.backends import BACKENDS, get_backend

# torch.distributed's backend per device type, as the backend table gives it
PROCESS_GROUP_BACKEND = {name: b.process_group for name, b in BACKENDS.items()}


@dataclass(frozen=True)
class DistContext:
    world_size: int = 1
    rank: int = 0
    local_rank: int = 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def context_from_env() -> DistContext:
    """torchrun's environment (WORLD_SIZE, RANK, LOCAL_RANK); one process when absent."""
    return DistContext(
        int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    )


def init_process_group(ctx: DistContext, device_type: str) -> None:
    if not dist.is_initialized():
        backend = get_backend(device_type)
        if backend.set_device_per_rank:
            backend.torch_api().set_device(ctx.local_rank)
        dist.init_process_group(backend.process_group, init_method="env://", world_size=ctx.world_size, rank=ctx.rank)


def shard(batch: dict, ctx: DistContext) -> dict:
    """This rank's contiguous slice of a global batch (every tensor's first dimension is the batch)."""
    out = {}
    for key, value in batch.items():
        per_rank = value.shape[0] // ctx.world_size
        out[key] = value[ctx.rank * per_rank : (ctx.rank + 1) * per_rank]
    return out


def gather(obj, ctx: DistContext) -> list:
    """Every rank's `obj` (a small picklable value), in rank order, on every rank."""
    if not ctx.distributed:
        return [obj]
    out = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out
