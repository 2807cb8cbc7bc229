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

import torch
from torch.utils.data import DataLoader

from models.processing import stack_frames

ROWS_PER_READ = 128  # contiguous rows per decode task: one seek, then the decoder runs forward


class FramesInMemory:
    """A dataset's camera frames as uint8 [rows, cameras, H, W, 3] on `device`."""

    def __init__(self, dataset, cameras: tuple[str, ...], device: torch.device, workers: int, report=print):
        from functools import partial

        start = time.perf_counter()
        n = len(dataset)
        first = dataset[0]
        shape = (n, len(cameras), *torch.as_tensor(first[cameras[0]]).shape)
        self.frames = torch.empty(shape, dtype=torch.uint8, device=device)
        reads = DataLoader(
            dataset,
            batch_size=ROWS_PER_READ,
            shuffle=False,
            num_workers=workers,
            collate_fn=partial(stack_frames, cameras=cameras),
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
        fields_dataset,
        order: Iterator[int],
        batch_size: int,
        raw_frames: Callable[[torch.Tensor], torch.Tensor],
        collate_fields: Callable[[list[dict]], dict],
    ) -> Iterator[dict]:
        """Raw batches in `order` (the loaders' seeded permutation): frames gathered here, the other fields of
        each row read from `fields_dataset` (the dataset without cameras) and collated by the family."""
        while True:
            rows = [next(order) for _ in range(batch_size)]
            index = torch.tensor(rows, device=self.frames.device)
            yield {"frames": raw_frames(self.frames[index]), **collate_fields([fields_dataset[i] for i in rows])}

    def describe(self) -> dict:
        return {"decode_s": round(self.decode_s, 2), "bytes": self.bytes, "device": str(self.frames.device)}
