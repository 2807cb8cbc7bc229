"""Data-parallel gradient averaging as LoongForge does it for GR00T N1.6 (their `overlap-grad-comm` rung): the
trainable parameters in reverse order (roughly the order backward produces their gradients) are packed into
contiguous buckets of at most `bucket_mb`; as soon as backward has produced every gradient of a bucket, the bucket
is cast to the communication dtype (bf16) and all-reduced asynchronously, so communication overlaps the rest of
backward. When backward ends, every bucket is waited for, averaged and copied back into the gradients.

With `order="arrival"` the first synchronised backward runs on those reverse-order buckets and records the order
its gradients arrived in; the buckets are then rebuilt in that order (torch DDP rebuilds its buckets after its
first iteration likewise). Reverse order misplaces a module registered late whose gradients come late: GR00T registers
its action and state encoders after the DiT they feed, so they share the first bucket with the action decoder,
and that bucket launches only when the DiT's backward is through (a bucket launches when its last gradient
arrives).

Used in place of DistributedDataParallel (same `no_sync()` for measuring exposed communication), through the
rung option `ddp: {implementation: buckets, bucket_cap_mb: 400, bucket_dtype: bf16}` (and `bucket_order`).

Given an event factory (the device's timing events), each synchronised backward also records when each bucket
was launched and when backward's last gradient arrived and when every bucket was back: `timings()` turns that
into how early each bucket's all-reduce started and how long the step waited for communication after backward.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
from torch import nn

COMM_DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


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
    def __init__(
        self,
        module: nn.Module,
        bucket_mb: float = 400.0,
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
        self._comm = COMM_DTYPES[dtype]
        self._limit = bucket_mb * 2**20 / torch.finfo(self._comm).bits * 8  # elements per bucket
        params = [p for p in module.parameters() if p.requires_grad][::-1]
        self._make_buckets(params)
        self._arrivals: list[nn.Parameter] | None = [] if order == "arrival" else None  # recorded once
        self._syncing = True
        self._pending = False
        # every rank starts from the same weights, as DDP makes sure of
        for tensor in list(module.parameters()) + list(module.buffers()):
            dist.broadcast(tensor.data, src=0, group=process_group)
        for p in params:
            p.register_post_accumulate_grad_hook(self._grad_ready)

    def _make_buckets(self, params: list[nn.Parameter]) -> None:
        """Contiguous buckets over `params` in that order, each closed before it would pass the size limit."""
        self.buckets: list[_Bucket] = []
        current: list[nn.Parameter] = []
        for p in params:
            if current and sum(q.numel() for q in current) + p.numel() > self._limit:
                self.buckets.append(_Bucket(len(self.buckets), current, self._comm))
                current = []
            current.append(p)
        if current:
            self.buckets.append(_Bucket(len(self.buckets), current, self._comm))
        self._bucket_of = {id(p): b for b in self.buckets for p in b.params}

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside leave the gradients local (for measuring what communication adds)."""
        self._syncing = False
        try:
            yield
        finally:
            self._syncing = True

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
        if not self._syncing:
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
