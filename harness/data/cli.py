"""`vlabench make-dataset`: write a LeRobotDataset v3.0 folder from a source of episodes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .errors import DatasetError

SOURCES = ("synthetic",)  # libero (rollouts of the LIBERO simulator) comes later


def add_make_dataset_arguments(p) -> None:
    p.add_argument("--source", required=True, help="where episodes come from: synthetic (libero comes later)")
    p.add_argument("--episodes", type=int, required=True, help="number of episodes to write")
    p.add_argument("--out", type=Path, required=True, help="dataset folder to create")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic episodes (default 0)")
    p.add_argument("--fps", type=int, default=10, help="frames per second (default 10, as LIBERO)")
    p.add_argument("--image-size", type=int, default=256, help="camera frames are SIZE x SIZE (default 256)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset at --out")


def _check_args(args) -> None:
    if args.source not in SOURCES:
        raise DatasetError("--source", None, "synthetic (libero comes later)", repr(args.source))
    if args.episodes < 1:
        raise DatasetError("--episodes", None, "a positive number of episodes", str(args.episodes))
    if args.fps < 1:
        raise DatasetError("--fps", None, "a positive number of frames per second", str(args.fps))
    # yuv420p halves the chroma planes, so sizes must be even.
    if args.image_size < 16 or args.image_size % 2 or args.image_size > 4096:
        raise DatasetError("--image-size", None, "an even size from 16 to 4096 pixels", str(args.image_size))


def cmd_make_dataset(args) -> int:
    from .lerobot_format import libero_features
    from .synthetic import synthetic_episodes
    from .writer import Progress, WriteSettings, check_target, write_dataset

    _check_args(args)
    check_target(args.out, args.overwrite)  # before any work: a refusal should be instant
    episodes = synthetic_episodes(args.episodes, seed=args.seed, image_size=args.image_size)
    last_print = [0.0]

    def progress(p: Progress) -> None:
        now = time.perf_counter()
        if p.episodes == args.episodes or now - last_print[0] >= 1.0:
            last_print[0] = now
            print(
                f"  {p.episodes}/{args.episodes} episodes, {p.frames} frames, "
                f"{p.frames / max(p.elapsed_s, 1e-9):.0f} frames/s",
                flush=True,
            )

    print(
        f"writing {args.episodes} {args.source} episodes ({args.image_size}x{args.image_size}, "
        f"{args.fps} fps) to {args.out}"
    )
    start = time.perf_counter()
    try:
        info = write_dataset(
            args.out,
            episodes,
            libero_features(args.image_size),
            WriteSettings(fps=args.fps),
            overwrite=args.overwrite,
            progress=progress,
        )
    except KeyboardInterrupt:
        print(f"\ninterrupted: nothing written to {args.out}", file=sys.stderr)
        return 130
    print(
        f"wrote {info['total_episodes']} episodes, {info['total_frames']} frames, {info['total_tasks']} tasks "
        f"in {time.perf_counter() - start:.1f} s: {args.out}"
    )
    return 0
