"""Data-parallel gradient averaging: the flags a rung declares (`DdpFlags`, a family's `ddp` option) and the bucketed
averaging they may ask for instead of torch's DistributedDataParallel. The harness owns the processes and applies
the flags (harness/ladder/rung.py wrap_ddp); a family's CUDA-graph step (models/gr00t/graphs.py) captures the
buckets' hooks into its graph, or averages after a replay in the same buckets (`split_buckets`).

`BucketedDataParallel` (`ddp: {implementation: buckets, bucket_cap_mb: 400, bucket_dtype: bf16}`, and
`bucket_order`) averages as LoongForge does for GR00T N1.6 (their `overlap-grad-comm` rung): the trainable parameters
in reverse order (roughly the order backward produces their gradients) are packed into contiguous buckets of at most
`bucket_mb`; as soon as backward has produced every gradient of a bucket, the bucket is cast to the communication
dtype (bf16) and all-reduced asynchronously, so communication overlaps the rest of backward. When backward ends,
every bucket is waited for, averaged and copied back into the gradients. It has DDP's `no_sync()` (for measuring
exposed communication).

With `order="arrival"` the first synchronised backward runs on those reverse-order buckets and records the order
its gradients arrived in; the buckets are then rebuilt in that order (torch DDP rebuilds its buckets after its
first iteration likewise). Reverse order misplaces a module registered late whose gradients come late: GR00T
registers its action and state encoders after the DiT they feed, so they share the first bucket with the action
decoder, and that bucket launches only when the DiT's backward is through (a bucket launches when its last gradient
arrives).

Given an event factory (the device's timing events), each synchronised backward also records when each bucket
was launched and when backward's last gradient arrived and when every bucket was back: `timings()` turns that
into how early each bucket's all-reduce started and how long the step waited for communication after backward.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Annotated, Literal

import torch
import torch.distributed as dist
from torch import nn

from .schema import POSITIVE, SchemaError, to_plain

CommHook = Literal["bf16_compress", "fp16_compress"]


@dataclass(frozen=True)
class DdpFlags:
    """How data-parallel processes average gradients: torch's DistributedDataParallel with the flags a rung
    sets (unset ones keep DDP's defaults) and a gradient compression hook, or `implementation: buckets` (the
    reverse-order contiguous buckets of `BucketedDataParallel`, one asynchronous all-reduce per bucket in
    `bucket_dtype`). The harness owns the processes and applies them; a family only declares them."""

    implementation: Literal["torch-ddp", "buckets"] = "torch-ddp"
    find_unused_parameters: bool | None = None
    static_graph: bool | None = None
    gradient_as_bucket_view: bool | None = None
    bucket_cap_mb: Annotated[float, POSITIVE] | None = None
    comm_hook: CommHook | None = None
    bucket_dtype: Literal["bf16", "fp32"] | None = None  # buckets only (default bf16)
    # buckets only: reverse parameter order (LoongForge's, the default), or the order the first synchronised
    # backward produced the gradients in (buckets rebuilt after it, as torch DDP rebuilds its own)
    bucket_order: Literal["reverse", "arrival"] | None = None

    def __post_init__(self):
        ddp_only = ("find_unused_parameters", "static_graph", "gradient_as_bucket_view", "comm_hook")
        if self.implementation == "buckets" and any(getattr(self, k) is not None for k in ddp_only):
            raise SchemaError(
                next(k for k in ddp_only if getattr(self, k) is not None),
                "no torch-ddp flag with implementation: buckets",
                "one",
            )
        if self.implementation == "torch-ddp" and self.bucket_dtype is not None:
            raise SchemaError("bucket_dtype", "implementation: buckets (DDP compresses with comm_hook)", "torch-ddp")
        if self.implementation == "torch-ddp" and self.bucket_order is not None:
            raise SchemaError("bucket_order", "implementation: buckets (DDP orders its own buckets)", "torch-ddp")

    def as_dict(self) -> dict:
        """DistributedDataParallel's keyword arguments and the hook (torch-ddp)."""
        return {
            k: v
            for k, v in to_plain(self).items()
            if v is not None and k not in ("implementation", "bucket_dtype", "bucket_order")
        }


BUCKET_MB = 400.0  # LoongForge's bucket size, the default of `implementation: buckets`
COMM_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def bucket_settings(flags: DdpFlags) -> tuple[float, str, str]:
    """`implementation: buckets`'s size (MB), communication dtype (a COMM_DTYPES key) and order, the unset flags at
    their defaults."""
    return flags.bucket_cap_mb or BUCKET_MB, flags.bucket_dtype or "bf16", flags.bucket_order or "reverse"


def split_buckets(tensors: list, bucket_mb: float, dtype: torch.dtype) -> list[list]:
    """`tensors` in their order as contiguous runs, each closed before its elements would pass `bucket_mb` in
    `dtype`."""
    limit = bucket_mb * 2**20 / torch.finfo(dtype).bits * 8  # elements per bucket
    buckets, current, size = [], [], 0
    for t in tensors:
        if current and size + t.numel() > limit:
            buckets.append(current)
            current, size = [], 0
        current.append(t)
        size += t.numel()
    if current:
        buckets.append(current)
    return buckets


class _Bucket:
    def __init__(self, index: int, params: list[nn.Parameter], dtype: torch.dtype):
        self.index = index  # its place in the reverse order
        self.params = params
        self.numel = sum(p.numel() for p in params)
        self.buffer = torch.zeros(self.numel, dtype=dtype, device=params[0].device)
        self.ready = 0
        self.work = None

    def pack(self) -> None:
        offset = 0
        for p in self.params:
            n = p.numel()
            piece = self.buffer[offset : offset + n]
            if p.grad is None:
                piece.zero_()  # a parameter the loss did not reach contributes nothing, on every rank alike
            else:
                piece.copy_(p.grad.reshape(-1))
            offset += n

    def unpack(self, world: int) -> None:
        self.buffer.div_(world)
        offset = 0
        for p in self.params:
            n = p.numel()
            averaged = self.buffer[offset : offset + n].view_as(p)
            if p.grad is None:
                p.grad = averaged.to(p.dtype).clone()
            else:
                p.grad.copy_(averaged)
            offset += n


class BucketedDataParallel(nn.Module):
    """`module` whose gradients are averaged over the process group in buckets (the module docstring)."""

    def __init__(
        self,
        module: nn.Module,
        bucket_mb: float = BUCKET_MB,
        dtype: str = "bf16",
        process_group=None,
        event=None,
        order: str = "reverse",
    ):
        super().__init__()
        if order not in ("reverse", "arrival"):
            raise ValueError(f"bucket order: expected reverse or arrival, got {order!r}")
        self.module = module
        self._event = event  # a factory of recordable timing events, or None: no timing
        self._steps: list[tuple[list, object, object]] = []  # (launch per bucket, backward end, all averaged)
        self._launched: list = []
        self.group = process_group
        self.world = dist.get_world_size(process_group)
        self._comm, self._mb = COMM_DTYPES[dtype], bucket_mb
        params = [p for p in module.parameters() if p.requires_grad][::-1]
        self._make_buckets(params)
        self._arrivals: list[nn.Parameter] | None = [] if order == "arrival" else None  # recorded once
        self.syncing = True  # False inside no_sync() (a CUDA-graph step reads it too: models/gr00t/graphs.py)
        self._pending = False
        # every rank starts from the same weights, as DDP makes sure of
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.data, src=0, group=process_group)
        for p in params:
            p.register_post_accumulate_grad_hook(self._grad_ready)

    @classmethod
    def from_flags(cls, module: nn.Module, flags: DdpFlags, event=None) -> BucketedDataParallel:
        """The wrapper that `flags` (implementation: buckets) ask for, in the default process group."""
        bucket_mb, dtype, order = bucket_settings(flags)
        return cls(module, bucket_mb, dtype, event=event, order=order)

    def _make_buckets(self, params: list[nn.Parameter]) -> None:
        """Contiguous buckets over `params` in that order, each closed before it would pass the size limit."""
        self.buckets = [
            _Bucket(i, run, self._comm) for i, run in enumerate(split_buckets(params, self._mb, self._comm))
        ]
        self._bucket_of = {id(p): b for b in self.buckets for p in b.params}

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside leave the gradients local (for measuring what communication adds)."""
        self.syncing = False
        try:
            yield
        finally:
            self.syncing = True

    @contextlib.contextmanager
    def untimed(self):
        """No timing events inside (a CUDA graph capture records the buckets' work, and events recorded for
        timing cannot be captured)."""
        event, self._event = self._event, None
        try:
            yield
        finally:
            self._event = event

    def _grad_ready(self, param: nn.Parameter) -> None:
        if not self.syncing:
            return
        if not self._pending:  # first gradient of this backward: wait for all buckets when backward ends
            self._pending = True
            torch.autograd.Variable._execution_engine.queue_callback(self._finish)
        if self._arrivals is not None:
            self._arrivals.append(param)
        bucket = self._bucket_of[id(param)]
        bucket.ready += 1
        if bucket.ready == len(bucket.params):
            self._launch(bucket)

    def _record(self):
        if self._event is None:
            return None
        event = self._event()
        event.record()
        return event

    def _launch(self, bucket: _Bucket) -> None:
        self._launched.append((bucket.index, self._record()))
        bucket.pack()
        bucket.work = dist.all_reduce(bucket.buffer, group=self.group, async_op=True)

    def _finish(self) -> None:
        backward_end = self._record()
        for bucket in self.buckets:
            if bucket.work is None:  # some of its parameters got no gradient this step
                self._launch(bucket)
        for bucket in self.buckets:
            bucket.work.wait()
            bucket.unpack(self.world)
            bucket.work, bucket.ready = None, 0
        self._pending = False
        if self._arrivals:  # the first synchronised backward's order, then the ones that got no gradient
            arrived = {id(p) for p in self._arrivals}
            rest = [p for b in self.buckets for p in b.params if id(p) not in arrived]
            self._make_buckets(self._arrivals + rest)
            self._arrivals = None
        if self._event is not None:
            launches = [event for _, event in sorted(self._launched, key=lambda item: item[0])]
            self._steps.append((launches, backward_end, self._record()))
        self._launched = []

    def reset_timings(self) -> None:
        self._steps = []

    def timings(self, elapsed_s) -> dict:
        """Per synchronised backward since the last reset (`elapsed_s(start, end)` reads two events): each
        bucket's lead (how long before backward's end its all-reduce was launched; 0 for a bucket launched only
        when backward ended) and the tail (from backward's end until every bucket was averaged back: the part
        of the communication that the step waited for)."""
        return {
            "bucket_lead_ms": [
                [max(0.0, 1000 * elapsed_s(launch, end)) for launch in launches] for launches, end, _ in self._steps
            ],
            "comm_tail_ms": [1000 * elapsed_s(end, done) for _, end, done in self._steps],
        }

    def bucket_sizes_mb(self) -> list[float]:
        return [b.buffer.numel() * b.buffer.element_size() / 2**20 for b in self.buckets]


__all__ = [
    "BUCKET_MB",
    "COMM_DTYPES",
    "BucketedDataParallel",
    "CommHook",
    "DdpFlags",
    "bucket_settings",
    "split_buckets",
]
