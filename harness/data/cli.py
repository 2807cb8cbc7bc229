"""`vlabench make-dataset`: write a LeRobotDataset v3.0 folder from a source of episodes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from .errors import DatasetError

SOURCES = ("synthetic", "libero")


def add_make_dataset_arguments(p) -> None:
    p.add_argument(
        "--source",
        required=True,
        help="where episodes come from: synthetic (procedural frames) or libero (rollouts in the LIBERO "
        "simulator of --policy, its successful episodes)",
    )
    p.add_argument("--episodes", type=int, required=True, help="number of episodes to write")
    p.add_argument("--out", type=Path, required=True, help="dataset folder to create")
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic episodes (default 0)")
    p.add_argument("--fps", type=int, default=10, help="frames per second (default 10, as LIBERO)")
    p.add_argument("--image-size", type=int, default=256, help="camera frames are SIZE x SIZE (default 256)")
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset at --out")
    p.add_argument("--policy", default="expert", help="libero: the policy that demonstrates (default: expert)")
    p.add_argument("--suite", default="libero_spatial", help="libero: the suite (default libero_spatial)")
    p.add_argument("--tasks", help="libero: task indices, comma-separated (default: every task the policy covers)")
    p.add_argument("--workers", type=int, default=1, help="libero: env worker processes (default 1)")
    p.add_argument("--assets", help="libero: LIBERO assets folder or archive (default $VLABENCH_LIBERO_ASSETS)")


def _check_args(args) -> None:
    if args.source not in SOURCES:
        raise DatasetError("--source", None, "synthetic or libero", repr(args.source))
    if args.source == "libero" and args.image_size != 256:
        raise DatasetError("--image-size", None, "256 for libero (the cameras render 256x256)", str(args.image_size))
    if args.episodes < 1:
        raise DatasetError("--episodes", None, "a positive number of episodes", str(args.episodes))
    if args.fps < 1:
        raise DatasetError("--fps", None, "a positive number of frames per second", str(args.fps))
    # yuv420p halves the chroma planes, so sizes must be even.
    if args.image_size < 16 or args.image_size % 2 or args.image_size > 4096:
        raise DatasetError("--image-size", None, "an even size from 16 to 4096 pixels", str(args.image_size))


def cmd_make_dataset(args) -> int:
    from ..outputs import check_writable
    from .lerobot_format import libero_features
    from .synthetic import synthetic_episodes
    from .writer import Progress, WriteSettings, check_target, write_dataset

    _check_args(args)
    check_target(args.out, args.overwrite)  # before any work: a refusal should be instant
    check_writable(args.out)  # the dataset is written beside --out, then renamed into place
    if args.source == "libero":
        from ..eval.main import _int_list
        from .libero_source import libero_episodes

        tasks = _int_list(args.tasks, "--tasks") if args.tasks else None
        episodes = libero_episodes(
            args.policy,
            args.suite,
            tasks,
            args.episodes,
            args.workers,
            args.assets,
            args.seed,
            progress=lambda line: print(line, flush=True),
        )
    else:
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
