"""The memory loader (`loader: {kind: memory}`): every camera frame of the dataset decoded once, before the first
step, into one uint8 tensor on the training device; a batch gathers its frames there and reads its other fields
(state, actions, task) from the dataset's tables, which needs no video. The decode is the dataset's own reader run
over the rows in order, so a frame is the same pixels the per-sample loaders decode. What it costs: the decode
(seconds to a minute, printed) and the frames' bytes on the device (33,108 frames of two 256x256 cameras take
13 GB); what it saves: decoding each sample again in every epoch, which bounds the per-sample loaders.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from functools import partial

import torch

from models.processing import stack_frames

from .worker_loader import started_loader

ROWS_PER_READ = 128  # contiguous rows per decode task: one seek, then the decoder runs forward
ROWS_PER_PREPARE = 1024  # rows collated (and their row fields derived) at once by RowsInMemory


class FramesInMemory:
    """A dataset's camera frames as uint8 [rows, cameras, H, W, 3] on `device`."""

    def __init__(self, dataset, cameras: tuple[str, ...], device: torch.device, workers: int, report=print):
        start = time.perf_counter()
        n = len(dataset)
        first = dataset[0]
        shape = (n, len(cameras), *torch.as_tensor(first[cameras[0]]).shape)
        self.frames = torch.empty(shape, dtype=torch.uint8, device=device)
        _, reads = started_loader(
            dataset, workers, batch_size=ROWS_PER_READ, shuffle=False, collate_fn=partial(stack_frames, cameras=cameras)
        )
        done, every = 0, max(1, n // 10)
        for chunk in reads:  # in order: chunk k holds rows [k * ROWS_PER_READ, ...)
            self.frames[done : done + len(chunk)].copy_(chunk)
            if done // every != (done + len(chunk)) // every:
                report(f"  decoding frames into memory: {done + len(chunk):,}/{n:,}")
            done += len(chunk)
        self.decode_s = time.perf_counter() - start
        self.bytes = self.frames.numel()
        report(
            f"  {n:,} frames of {len(cameras)} camera(s) decoded in {self.decode_s:.1f} s, "
            f"{self.bytes / 2**30:.2f} GiB on {device}"
        )

    def batches(
        self,
        order: Iterator[int],
        batch_size: int,
        raw_frames: Callable[[torch.Tensor], torch.Tensor],
        fields_of: Callable[[list[int]], dict],
    ) -> Iterator[dict]:
        """Raw batches in `order` (the loaders' seeded permutation): frames gathered here, the other fields of
        the rows from `fields_of` (read and collated per batch, or gathered from RowsInMemory)."""
        while True:
            rows = [next(order) for _ in range(batch_size)]
            index = torch.tensor(rows, device=self.frames.device)
            yield {"frames": raw_frames(self.frames[index]), **fields_of(rows)}

    def describe(self) -> dict:
        return {"decode_s": round(self.decode_s, 2), "bytes": self.bytes, "device": str(self.frames.device)}


def read_fields(fields_dataset, collate_fields: Callable[[list[dict]], dict], rows: list[int]) -> dict:
    """The rows' fields read from the tables and collated by the family, per batch."""
    return collate_fields([fields_dataset[i] for i in rows])


class RowsInMemory:
    """Every row's other fields (state, actions, task...) collated once before the first step, with what the
    family's processor derives from a row alone (`row_fields`, e.g. Pi0.5's prompt tokens): a batch then gathers
    them by index instead of reading and tokenising its rows on the host while the step runs. The fields are
    the ones the per-batch path gives, so the batches are the same (tested)."""

    def __init__(self, fields_dataset, collate_fields, row_fields=None, report=print):
        start = time.perf_counter()
        n, parts = len(fields_dataset), []
        for first in range(0, n, ROWS_PER_PREPARE):
            raw = read_fields(fields_dataset, collate_fields, list(range(first, min(n, first + ROWS_PER_PREPARE))))
            parts.append({**raw, **(row_fields(raw) if row_fields is not None else {})})
        self.fields = {
            k: torch.cat([p[k] for p in parts]) if isinstance(v, torch.Tensor) else [x for p in parts for x in p[k]]
            for k, v in parts[0].items()
        }
        self.derived = sorted(set(parts[0]) - set(raw))  # the keys row_fields added to the collated ones
        self.prepare_s = time.perf_counter() - start
        derived = ", ".join(self.derived) or "nothing derived"
        report(f"  {n:,} rows' fields (with {derived}) prepared in {self.prepare_s:.1f} s")

    def gather(self, rows: list[int]) -> dict:
        index = torch.tensor(rows)
        return {k: v[index] if isinstance(v, torch.Tensor) else [v[i] for i in rows] for k, v in self.fields.items()}

    def describe(self) -> dict:
        return {"prepare_s": round(self.prepare_s, 2), "derived": self.derived}
