"""Making a dataset folder: the synthetic episodes (or another source's) written as a LeRobotDataset v3.0 folder
with progress lines (`vlabench make-dataset`, harness/commands/make_dataset.py), and a workload's missing dataset
made as its `data.make` says (`make_missing`, before a ladder or a train-ladder reads it)."""

from __future__ import annotations

import contextlib
import faulthandler
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from models.schema import parse

from .errors import DatasetError
from .lerobot_format import libero_features
from .pipeline import DataSpec

DEFAULTS = {"seed": 0, "fps": 10, "image_size": 256}  # make-dataset's defaults, left out of the command it prints


def check_sizes(episodes: int, fps: int, image_size: int) -> None:
    if episodes < 1:
        raise DatasetError("--episodes", None, "a positive number of episodes", str(episodes))
    if fps < 1:
        raise DatasetError("--fps", None, "a positive number of frames per second", str(fps))
    # yuv420p halves the chroma planes, so sizes must be even.
    if image_size < 16 or image_size % 2 or image_size > 4096:
        raise DatasetError("--image-size", None, "an even size from 16 to 4096 pixels", str(image_size))


def make_missing(spec, say: Callable[[str], None] = print) -> bool:
    """Make the dataset of a workload's `data:` (a `DataSpec` or its plain form) when its folder does not exist
    and the spec says how (`make:`), exactly as `vlabench make-dataset` with the same flags; returns whether it
    made one."""
    if isinstance(spec, dict):
        spec = parse(DataSpec, spec)
    make, out = spec.make, Path(spec.dataset)
    if make is None or out.exists():
        return False
    check_sizes(make.episodes, make.fps, make.image_size)
    flags = [f"--source {make.source} --episodes {make.episodes}"]
    flags += [
        f"--{k.replace('_', '-')} {v}"
        for k, v in (("seed", make.seed), ("fps", make.fps), ("image_size", make.image_size))
        if v != DEFAULTS[k]
    ]
    say(
        f"{out}: no dataset there yet; making it as data.make says: vlabench make-dataset {' '.join(flags)} --out {out}"
    )
    write_episodes(out, make.source, make.episodes, make.fps, make.image_size, make.seed, False, None, say)
    return True


# No episode written for this long: every thread of this process prints its stack to stderr (the run's log),
# again each time as long as none comes, and the run goes on waiting. A LIBERO episode takes about a second.
STALL_DUMP_S = 300.0


@contextlib.contextmanager
def stall_dumps(after_s: float) -> Iterator[Callable[[], None]]:
    """Within the block, every thread's stack goes to stderr each `after_s` without a call of the function it
    yields (call it on progress): a run that hangs says where."""

    def arm() -> None:  # the process's own stderr (fd 2): a replaced sys.stderr may have no file descriptor
        faulthandler.dump_traceback_later(after_s, repeat=True, file=sys.__stderr__)

    arm()
    try:
        yield arm
    finally:
        faulthandler.cancel_dump_traceback_later()


def write_episodes(
    out: Path,
    source: str,
    count: int,
    fps: int,
    image_size: int,
    seed: int,
    overwrite: bool,
    episodes: Iterable | None = None,
    say: Callable[[str], None] | None = None,
    encoders: int = 0,
) -> dict:
    """Write `count` episodes (the synthetic ones of `seed` unless `episodes` is given) to `out`, atomically,
    printing progress about once a second; returns the dataset's info.json content."""
    # here, not at the top: the writer imports pyarrow and PyAV (0.1 s), and a ladder imports this module
    from .synthetic import synthetic_episodes
    from .writer import Progress, WriteSettings, write_dataset

    say = say or (lambda line: print(line, flush=True))
    if episodes is None:
        episodes = synthetic_episodes(count, seed=seed, image_size=image_size)
    last_print, last = [0.0], [Progress(0, 0, 0.0)]

    def progress(p: Progress) -> None:
        alive()
        now, last[0] = time.perf_counter(), p
        if p.episodes == count or now - last_print[0] >= 1.0:
            last_print[0] = now
            say(f"  {p.episodes}/{count} episodes, {p.frames} frames, {p.frames / max(p.elapsed_s, 1e-9):.0f} frames/s")

    coders = f", {encoders} encoder processes" if encoders else ""
    say(f"writing {count} {source} episodes ({image_size}x{image_size}, {fps} fps{coders}) to {out}")
    start = time.perf_counter()
    with stall_dumps(STALL_DUMP_S) as alive:
        info = write_dataset(
            out,
            episodes,
            libero_features(image_size),
            WriteSettings(fps=fps),
            overwrite=overwrite,
            progress=progress,
            encoders=encoders,
        )
    # where the time went: writing (encoding the videos, the files) or waiting for the episodes (their source)
    p = last[0]
    say(
        f"wrote {info['total_episodes']} episodes, {info['total_frames']} frames, {info['total_tasks']} tasks "
        f"in {time.perf_counter() - start:.1f} s ({p.writing_s:.1f} s writing, {p.elapsed_s - p.writing_s:.1f} s "
        f"waiting for the episodes): {out}"
    )
    return info
