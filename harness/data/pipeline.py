"""The input pipeline of a rung that trains on a dataset: from frames on disk to a batch on the device, inside
the timed step. Two loaders, a rung option each (`loader:` in the scenario):

torch (the community path, as LeRobot's train script builds it): a DataLoader whose worker processes read and
  decode samples and collate them; the training process then runs the family's host-side preprocessing
  (normalisation, tokenisation) and copies the batch to the device, all while the device waits.
async (LoongForge's 3-level pipeline): the same worker prefetch (level 1), a daemon thread that runs the
  host-side preprocessing ahead of the step into a double buffer (level 2), and pinned, non-blocking copies
  to the device on a side stream (level 3), so the step finds its batch on the device.
memory: every frame decoded once before the first step and held on the device (harness/data/memory.py); the
  async path's thread gathers a batch's frames there and reads its other fields from the tables (or, with
  `prepared_rows`, gathers them too, prepared once with what the family derives from a row alone). For training
  runs whose input a per-sample decode cannot feed; no reference trains so.

With `preprocess: workers` the family's host-side preprocessing (and the CPU part of its device-side finish) runs
in the torch or async loader's worker processes instead, as Isaac-GR00T's collator does it (WorkerPreprocess).

Both draw the same batches: the sample order is a seeded permutation (a new one per epoch) and the random
draws of each batch (flow-matching noise and time) come from a generator seeded by the batch's index. A
per-sample transform in the workers (`augment:`, the family's training augmentation) draws from a generator
seeded by the sample's position in the stream, so a batch is the same whatever the worker count. The time a
step waited for its batch is measured on the host around fetching it.
"""

from __future__ import annotations

import dataclasses
import queue
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import Annotated, Literal

import torch
from torch.utils.data import Sampler

from models.schema import AT_LEAST_ONE, NON_NEGATIVE, Bounds, SchemaError, describe
from models.workload import Workload

from .errors import DatasetError
from .fingerprint import dataset_fingerprint
from .lerobot_format import LIBERO_CAMERAS
from .memory import FramesInMemory, RowsInMemory, read_fields
from .worker_loader import started_loader

# synthetic: batches made up front on the device from the seed (no data path); torch, async, memory: see above
LoaderKind = Literal["synthetic", "torch", "async", "memory"]
# the training augmentation the workers apply per sample: none, or a reference's (a family's processor names the
# ones it has: models/gr00t/augment.py)
Augment = Literal["none", "isaac-gr00t"]
# where the family's preprocessing runs: host (in the training process: the step's thread with the torch loader, the
# level-2 thread with async; images finished on the device) or workers (in the DataLoader's worker processes,
# images to the model's float32 input too, as Isaac-GR00T's collator does: the batch arrives ready but for its copy)
Preprocess = Literal["host", "workers"]


@dataclass(frozen=True)
class MakeSpec:
    """How to make a workload's dataset when its folder is missing: `vlabench make-dataset` with these flags."""

    source: Literal["synthetic"]  # procedural episodes (harness/data/synthetic.py), made in seconds
    episodes: Annotated[int, AT_LEAST_ONE]
    seed: Annotated[int, NON_NEGATIVE] = 0
    fps: Annotated[int, AT_LEAST_ONE] = 10
    image_size: Annotated[int, Bounds(16, 4096)] = 256

    def __post_init__(self):
        if self.image_size % 2:  # yuv420p halves the chroma planes
            raise SchemaError("image_size", "an even size from 16 to 4096 pixels", describe(self.image_size))


@dataclass(frozen=True)
class DataSpec:
    """A workload's `data:` when it is a dataset on disk (else `data: synthetic`)."""

    dataset: str  # a LeRobotDataset v3.0 folder (`vlabench make-dataset` writes one)
    # made as `vlabench make-dataset` would when `dataset` does not exist yet (a fresh clone's first run);
    # without it a missing dataset stops the run in one line
    make: MakeSpec | None = None
    cameras: tuple[str, ...] = LIBERO_CAMERAS  # the dataset's camera keys, in the model's slot order
    # a SentencePiece tokenizer (file or Hub id) for families with one; without it a stand-in of the same
    # vocabulary size and cost per prompt, recorded as a stand-in
    tokenizer: str | None = None
    shuffle: bool = True


def reading(data: Literal["synthetic"] | DataSpec, dataset: str, **fields) -> DataSpec:
    """A workload's `data` reading the dataset folder `dataset` instead (and `fields`), never made: a dataset named
    on the command line that is missing stays an error. A DataSpec keeps its other fields."""
    if isinstance(data, DataSpec):
        return dataclasses.replace(data, dataset=dataset, make=None, **fields)
    return DataSpec(dataset=dataset, **fields)


@dataclass(frozen=True)
class LoaderOptions:
    """A rung's `loader:` options (cumulative down the ladder, like model options)."""

    kind: LoaderKind | None = None  # default: torch when the workload reads a dataset, else synthetic
    workers: Annotated[int, NON_NEGATIVE] = 4  # LeRobot's default num_workers (memory: the decode's)
    pin_memory: bool = False
    prefetch_factor: Annotated[int, AT_LEAST_ONE] = 2  # batches each worker keeps ready (DataLoader's default)
    buffers: Annotated[int, AT_LEAST_ONE] = 2  # async: batches prepared ahead on the device (double buffering)
    augment: Augment = "none"  # per-sample training augmentation in the workers
    preprocess: Preprocess = "host"
    # memory: every row's other fields (and what the family derives from a row alone, e.g. Pi0.5's prompt tokens)
    # prepared once before the first step, so that a batch gathers them instead of reading and tokenising its rows
    # on the host, in a thread that shares the interpreter with the step's kernel launches
    prepared_rows: bool = False

    def __post_init__(self):
        if self.kind == "memory" and self.augment != "none":  # the memory loader has no per-sample workers
            raise SchemaError("augment", "none with the memory loader", describe(self.augment))
        if self.kind == "memory" and self.preprocess != "host":
            raise SchemaError("preprocess", "host with the memory loader", describe(self.preprocess))
        if self.prepared_rows and self.kind != "memory":
            raise SchemaError("prepared_rows", "false unless the loader is the memory loader", describe(self.kind))


class EpochPermutations(Sampler):
    """Indices of every epoch in a fresh permutation drawn from one seeded generator, for as many epochs as
    asked: the same order for every loader and every rung of a seed."""

    def __init__(self, n: int, seed: int, shuffle: bool = True, skip: int = 0):
        self.n, self.seed, self.shuffle, self.skip = n, seed, shuffle, skip  # skip: indices already consumed

    def __iter__(self) -> Iterator[int]:
        gen = torch.Generator().manual_seed(self.seed)
        skip = self.skip
        while True:
            order = torch.randperm(self.n, generator=gen).tolist() if self.shuffle else range(self.n)
            yield from order[skip:]  # an epoch consumed whole is drawn (the generator moves on) and yields nothing
            skip = max(0, skip - self.n)

    def __len__(self) -> int:  # endless; DataLoader asks only when it must
        return 2**62


def batch_generator(seed: int, index: int) -> torch.Generator:
    """The generator of batch `index`'s random draws, whichever loader and worker made the batch."""
    return torch.Generator().manual_seed(seed * 1_000_003 + index)


SAMPLE_STREAM = 0x5A3D_0000_0000  # keeps the per-sample seeds away from the per-batch ones


def sample_generator(seed: int, position: int) -> torch.Generator:
    """The generator of the per-sample transform of the sample at `position` in the stream (batch index x
    batch size + its slot in the batch), in whichever worker reads it."""
    return torch.Generator().manual_seed((seed * 1_000_003 + position) ^ SAMPLE_STREAM)


class Numbered(Sampler):
    """A sampler's indices with their positions in the stream, from `first` on: (position, index) pairs."""

    def __init__(self, sampler: Sampler, first: int = 0):
        self.sampler, self.first = sampler, first

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return enumerate(self.sampler, start=self.first)

    def __len__(self) -> int:
        return len(self.sampler)


POSITION = "__position__"  # a sample's position in the stream, for the worker that collates its batch


class PerSample:
    """A dataset read by (position, index) whose samples go through `transform(sample, generator)` (if any) in
    the worker that reads them, the generator seeded by the position (sample_generator); each sample keeps its
    position under POSITION."""

    def __init__(self, dataset, transform: Callable[[dict, torch.Generator], dict] | None, seed: int):
        self.dataset, self.transform, self.seed = dataset, transform, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]) -> dict:
        position, index = key
        sample = self.dataset[index]
        if self.transform is not None:
            sample = self.transform(sample, sample_generator(self.seed, position))
        return {**sample, POSITION: position}


class WorkerPreprocess:
    """The collate_fn of `preprocess: workers`: in the worker process, the samples collated, then the family's
    host-side preprocessing with the batch's own generator (batch_generator of the batch index, from the first
    sample's position), then the part of its device-side finish that runs on the CPU (`host_finish`): the batch
    the training process gets is the one `preprocess: host` would have made before its copy."""

    def __init__(self, collate: Callable[[list], dict], prepare, host_finish, seed: int, batch_size: int):
        self.collate, self.prepare, self.host_finish = collate, prepare, host_finish
        self.seed, self.batch_size = seed, batch_size

    def __call__(self, samples: list[dict]) -> dict:
        index = samples[0][POSITION] // self.batch_size
        return self.host_finish(self.prepare(self.collate(samples), batch_generator(self.seed, index)))


def _unchanged(batch: dict) -> dict:
    return batch


def _to_device(batch: dict, device: torch.device, non_blocking: bool) -> dict:
    return {k: v.to(device, non_blocking=non_blocking) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def _pinned(batch: dict) -> dict:  # host tensors pinned (the memory loader's frames are on the device already)
    return {
        k: v.pin_memory() if isinstance(v, torch.Tensor) and v.device.type == "cpu" else v for k, v in batch.items()
    }


@dataclass
class Fetched:
    batch: dict  # on the device, ready for the step
    wait_s: float  # how long the training loop waited for it


class BatchSource:
    """Batches of a dataset for a rung's steps: `next()` returns the next one on the device and how long the
    step waited for it. `prepare(raw, generator)` is the family's host-side preprocessing, `finish(batch)` its
    device-side part (run inside the step by the caller)."""

    def __init__(
        self,
        dataset,
        batch_size: int,
        options: LoaderOptions,
        collate: Callable[[list], dict],
        prepare: Callable[[dict, torch.Generator], dict],
        device: torch.device,
        seed: int,
        shuffle: bool = True,
        start: int = 0,
        transform: Callable[[dict, torch.Generator], dict] | None = None,
        raw_batches: Callable[[Iterator[int]], Iterator[dict]] | None = None,
        host_finish: Callable[[dict], dict] | None = None,
    ):
        """`start`: the index of the first batch (a resumed training run): the batches before it are skipped
        without being read, and every later batch is the one an uninterrupted run would have drawn.
        `transform(sample, generator)`: a per-sample step in the workers (the training augmentation), its
        generator seeded by the sample's position in the stream. `raw_batches(order)`: the memory loader's raw
        batches in the sampler's order, instead of a DataLoader's. `host_finish(batch)`: with `preprocess:
        workers`, the part of the family's finish the workers run after `prepare` (WorkerPreprocess)."""
        self.options, self.prepare, self.device, self.seed = options, prepare, torch.device(device), seed
        workers = options.workers
        sampler = EpochPermutations(len(dataset), seed, shuffle, skip=start * batch_size)
        self.loader = None
        if raw_batches is not None:
            self._raw = raw_batches(iter(sampler))
        else:
            in_workers = options.preprocess == "workers"
            if transform is not None or in_workers:
                dataset, sampler = PerSample(dataset, transform, seed), Numbered(sampler, start * batch_size)
            if in_workers:
                collate = WorkerPreprocess(collate, prepare, host_finish or _unchanged, seed, batch_size)
                self.prepare = None  # done in the workers
            # the worker processes start now, in this thread (fork before threads)
            self.loader, self._raw = started_loader(
                dataset,
                workers,
                batch_size=batch_size,
                sampler=sampler,
                collate_fn=collate,
                drop_last=True,
                pin_memory=options.pin_memory and self.device.type == "cuda" and options.kind == "torch",
                prefetch_factor=options.prefetch_factor if workers else None,
                persistent_workers=workers > 0,
            )
        self.index = start
        # host seconds of the family's preprocessing per batch (in the step, or in the level-2 thread, where it
        # holds the GIL that the training thread's kernel launches also need)
        self.prepare_s: list[float] = []
        self._thread = None
        if options.kind in ("async", "memory"):
            self._ready: queue.Queue = queue.Queue(maxsize=options.buffers)
            self._stop = threading.Event()
            cuda = self.device.type == "cuda"
            self._stream = torch.cuda.Stream(self.device) if cuda else None
            self._thread = threading.Thread(target=self._fill, name="vlabench-input-pipeline", daemon=True)
            self._thread.start()

    # -- the community path: everything in the training loop
    def _sync_next(self) -> dict:
        raw = next(self._raw)
        batch = self._timed_prepare(raw, self.index)
        return _to_device(batch, self.device, non_blocking=self.loader is not None and self.loader.pin_memory)

    def _timed_prepare(self, raw: dict, index: int) -> dict:
        if self.prepare is None:  # preprocess: workers
            return raw
        start = time.perf_counter()
        batch = self.prepare(raw, batch_generator(self.seed, index))
        self.prepare_s.append(time.perf_counter() - start)
        return batch

    # -- the async path: a thread prepares and copies ahead
    def _fill(self) -> None:
        index = self.index
        try:
            while not self._stop.is_set():
                batch = self._timed_prepare(next(self._raw), index)
                event = None
                if self._stream is not None:
                    batch = _pinned(batch)
                    with torch.cuda.stream(self._stream):
                        batch = _to_device(batch, self.device, non_blocking=True)
                        event = torch.cuda.Event()
                        event.record(self._stream)
                index += 1
                while not self._stop.is_set():
                    try:
                        self._ready.put((batch, event, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # handed to the training loop, which raises it
            self._ready.put((None, None, exc))

    def _async_next(self) -> dict:
        batch, event, error = self._ready.get()
        if error is not None:
            raise error
        if event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)  # the copy is done before the step reads the batch
            for t in batch.values():
                if isinstance(t, torch.Tensor):
                    t.record_stream(current)  # the side stream's memory is not reused while the step runs
        return batch

    def next(self) -> Fetched:
        start = time.perf_counter()
        batch = self._async_next() if self._thread is not None else self._sync_next()
        self.index += 1
        return Fetched(batch, time.perf_counter() - start)

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            while self._thread.is_alive():  # let a thread blocked on a full buffer see the stop
                try:
                    self._ready.get_nowait()
                except queue.Empty:
                    pass
                self._thread.join(timeout=0.1)
        # End the worker processes now, not whenever the iterator is collected: a persistent worker left behind
        # outlives the rung process (torch's iterator has no public way to do this)
        shutdown = getattr(self._raw, "_shutdown_workers", None)
        if shutdown is not None:
            shutdown()
        del self._raw


__all__ = [
    "BatchSource",
    "DataSpec",
    "DatasetFeed",
    "EpochPermutations",
    "Fetched",
    "LoaderOptions",
    "Numbered",
    "PerSample",
    "WorkerPreprocess",
    "SyntheticFeed",
    "batch_generator",
    "feed_kind",
    "reading",
    "sample_generator",
]


class SyntheticFeed:
    """Batches made up front on the device from the seed: no data path in the step (data-wait 0)."""

    def __init__(self, batches: list[dict]):
        self.batches = batches

    def fetch(self, i: int) -> tuple[dict, float]:
        return self.batches[i % len(self.batches)], 0.0

    def describe(self) -> dict:
        return {"data": "synthetic"}

    def close(self) -> None:
        pass


class DatasetFeed:
    """Batches read from a dataset inside the step: the loader's batch, then the family's device-side finish."""

    def __init__(
        self,
        spec: DataSpec,
        options: LoaderOptions,
        family,
        size: str,
        workload: Workload,
        device: torch.device,
        dtype: torch.dtype,
        seed: int,
        shard: tuple[int, int] = (0, 1),
        start: int = 0,
    ):
        from .dataset import LeRobotV3Dataset  # here: the reader imports pyarrow and PyAV (0.1 s)

        cameras = tuple(spec.cameras)
        if len(cameras) != workload.cameras:
            raise DatasetError(
                "data.cameras",
                None,
                f"{workload.cameras} camera keys (the workload's cameras)",
                f"{len(cameras)}: {', '.join(cameras)}",
            )
        self.dataset = LeRobotV3Dataset(spec.dataset, action_horizon=workload.action_horizon, cameras=list(cameras))
        stats_file = self.dataset.root / "meta" / "stats.json"
        try:
            self.processor = family.data_processor(size, workload, self.dataset.stats or {}, spec.tokenizer)
        except SchemaError:  # a workload the family cannot read: its key says which
            raise
        except ValueError as e:
            raise DatasetError(stats_file, None, "statistics the model's preprocessing can use", str(e)) from None
        rank, world = shard
        self.dtype = dtype
        self.augment = self._augment(options, cameras, family)
        self.memory = self._frames_in_memory(options, cameras, device)
        self.rows = None
        raw_batches = None
        if self.memory is not None:
            raw_batches = partial(
                self.memory.batches,
                batch_size=workload.batch_size,
                raw_frames=type(self.processor).raw_frames,
                fields_of=self._fields_of(options),
            )
        self.source = BatchSource(
            self.dataset,
            workload.batch_size,
            options,
            partial(type(self.processor).collate, cameras=cameras),
            self.processor.prepare,
            device,
            seed + 7919 * rank,
            spec.shuffle,
            start,
            self.augment,
            raw_batches,
            self.processor.host_finish,
        )
        self.spec, self.options, self.world = spec, options, world

    def _augment(self, options: LoaderOptions, cameras: tuple[str, ...], family):
        """The worker-side training augmentation (`augment:`) the family's processor makes (None: `augment: none`)."""
        if options.augment == "none":
            return None
        make = getattr(self.processor, "sample_transform", None)
        try:
            augment = make(options.augment, cameras) if make is not None else None
        except ImportError as e:  # a library the augmentation runs in (OpenCV for isaac-gr00t)
            raise DatasetError("loader.augment", None, "an augmentation whose library is installed", str(e)) from None
        if augment is None:
            raise DatasetError(
                "loader.augment", None, f"an augmentation {family.name}'s processor has", options.augment
            )
        return augment

    def _frames_in_memory(self, options: LoaderOptions, cameras: tuple[str, ...], device: torch.device):
        """The memory loader's frames, decoded now (None for the other loaders)."""
        if options.kind != "memory":
            return None
        print(f"memory loader: decoding {len(self.dataset):,} frames with {options.workers} worker(s)", flush=True)
        return FramesInMemory(self.dataset, cameras, device, options.workers, report=lambda s: print(s, flush=True))

    def _fields_of(self, options: LoaderOptions):
        """The memory loader's source of a batch's other fields: read per batch, or prepared once (RowsInMemory)."""
        fields, collate = self.dataset.without_cameras(), type(self.processor).collate_fields
        if not options.prepared_rows:
            return partial(read_fields, fields, collate)
        row_fields = getattr(self.processor, "row_fields", None)
        self.rows = RowsInMemory(fields, collate, row_fields, report=lambda s: print(s, flush=True))
        return self.rows.gather

    def fetch(self, i: int) -> tuple[dict, float]:
        got = self.source.next()
        return self.processor.finish(got.batch, self.dtype), got.wait_s

    def describe(self) -> dict:
        return {
            "data": {
                "dataset": str(self.dataset.root),
                "frames": len(self.dataset),
                "episodes": len(self.dataset.meta.episodes),
                "cameras": list(self.spec.cameras),
                "content": dataset_fingerprint(self.dataset.root),
            },
            "loader": {
                "kind": self.options.kind,
                "workers": self.options.workers,
                "pin_memory": self.options.pin_memory,
                "prefetch_factor": self.options.prefetch_factor,
                "preprocess": self.options.preprocess,
                **({"buffers": self.options.buffers} if self.options.kind in ("async", "memory") else {}),
                **({"memory": self.memory.describe()} if self.memory is not None else {}),
                **({"prepared_rows": self.rows.describe()} if self.rows is not None else {}),
                **({"augment": self.augment.describe()} if self.augment is not None else {}),
            },
            "processor": self.processor.describe(),
            **({"prepare_ms": 1000 * statistics.median(self.source.prepare_s)} if self.source.prepare_s else {}),
            **({"data_note": "each process reads its own seeded order of the dataset"} if self.world > 1 else {}),
        }

    def close(self) -> None:
        self.source.close()
        self.dataset.close()


def feed_kind(data, loader: dict | None) -> str:
    """synthetic, torch or async: what a rung with these `loader` options reads on a workload with `data`."""
    kind = (loader or {}).get("kind")
    if kind is not None:
        return kind
    return "synthetic" if data in (None, "synthetic") else "torch"
