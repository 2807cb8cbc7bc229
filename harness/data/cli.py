"""`vlabench make-dataset`: write a LeRobotDataset v3.0 folder from a source of episodes."""

from __future__ import annotations

import contextlib
import faulthandler
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from ..arguments import renamed_flag
from .errors import DatasetError

SOURCES = ("synthetic", "libero")
_DEFAULTS = {"seed": 0, "fps": 10, "image_size": 256}


def add_make_dataset_arguments(p) -> None:
    p.add_argument(
        "--source",
        required=True,
        help="where episodes come from: synthetic (procedural frames) or libero (rollouts in the LIBERO "
        "simulator of --policy, its successful episodes)",
    )
    p.add_argument("--episodes", type=int, required=True, help="number of episodes to write")
    p.add_argument("--out", type=Path, required=True, help="dataset folder to create")
    p.add_argument("--seed", type=int, default=_DEFAULTS["seed"], help="seed of the synthetic episodes (default 0)")
    p.add_argument("--fps", type=int, default=_DEFAULTS["fps"], help="frames per second (default 10, as LIBERO)")
    p.add_argument(
        "--image-size", type=int, default=_DEFAULTS["image_size"], help="camera frames are SIZE x SIZE (default 256)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset at --out")
    p.add_argument("--policy", default="expert", help="libero: the policy that demonstrates (default: expert)")
    p.add_argument("--suite", default="libero_spatial", help="libero: the suite (default libero_spatial)")
    p.add_argument("--tasks", help="libero: task indices, comma-separated (default: every task the policy covers)")
    renamed_flag(
        p,
        "--sim-workers",
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="libero: simulator worker processes (default 1)",
    )
    p.add_argument(
        "--first-trial",
        type=int,
        default=0,
        metavar="K",
        help="libero: start at each task's stored initial state K (default 0); an evaluation of T trials uses "
        "states 0..T-1, so --first-trial T keeps them out of the training data",
    )
    p.add_argument(
        "--action-noise",
        default="0",
        metavar="SIGMA[,ROT]",
        help="libero: execute the policy's arm actions with Gaussian noise of this deviation (in the controller's "
        "[-1, 1] units) and record its own actions: demonstrations that show the way back to the path (default 0). "
        "Two values: the position's deviation, then the rotation's",
    )
    p.add_argument("--assets", help="libero: LIBERO assets folder or archive (default $VLABENCH_LIBERO_ASSETS)")
    p.add_argument("--encoders", type=int, default=0, metavar="N",
                   help="processes that encode the videos while the episodes arrive (default 0: the writer encodes "
                   "them). They help when the writer bounds the run and spare cores exist; LIBERO's env workers take "
                   "every core (on the H200 machine's 16 cores, 300 episodes took 279 s with 4 encoders, 256 s "
                   "without)")  # fmt: skip


def _check_args(args) -> None:
    if args.source not in SOURCES:
        raise DatasetError("--source", None, "synthetic or libero", repr(args.source))
    if args.source == "libero" and args.image_size != 256:
        raise DatasetError("--image-size", None, "256 for libero (the cameras render 256x256)", str(args.image_size))
    _check_sizes(args.episodes, args.fps, args.image_size)
    if args.encoders < 0:
        raise DatasetError("--encoders", None, "a non-negative number of processes", str(args.encoders))
    args.action_noise = _noise_deviations(args.action_noise, args.source)
    if args.first_trial < 0 or (args.first_trial and args.source != "libero"):
        raise DatasetError(
            "--first-trial", None, "a non-negative state index, with --source libero", str(args.first_trial)
        )


def _noise_deviations(text: str, source: str) -> float | tuple[float, float]:
    """--action-noise: one deviation for the arm's six values, or the position's and the rotation's."""
    expected = "a deviation from 0 to 1, or two (position,rotation), with --source libero"
    try:
        values = [float(v) for v in str(text).split(",")]
    except ValueError:
        raise DatasetError("--action-noise", None, expected, repr(text)) from None
    if len(values) not in (1, 2) or not all(0 <= v <= 1 for v in values) or (any(values) and source != "libero"):
        raise DatasetError("--action-noise", None, expected, repr(text))
    return values[0] if len(values) == 1 else (values[0], values[1])


def _check_sizes(episodes: int, fps: int, image_size: int) -> None:
    if episodes < 1:
        raise DatasetError("--episodes", None, "a positive number of episodes", str(episodes))
    if fps < 1:
        raise DatasetError("--fps", None, "a positive number of frames per second", str(fps))
    # yuv420p halves the chroma planes, so sizes must be even.
    if image_size < 16 or image_size % 2 or image_size > 4096:
        raise DatasetError("--image-size", None, "an even size from 16 to 4096 pixels", str(image_size))


def cmd_make_dataset(args) -> int:
    from ..outputs import check_writable
    from .writer import check_target

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
            args.sim_workers,
            args.assets,
            args.seed,
            progress=lambda line: print(line, flush=True),
            first_trial=args.first_trial,
            action_noise=args.action_noise,
        )
    else:
        episodes = None
    try:
        _write(args.out, args.source, args.episodes, args.fps, args.image_size, args.seed, args.overwrite, episodes,
               encoders=args.encoders)  # fmt: skip
    except KeyboardInterrupt:
        print(f"\ninterrupted: nothing written to {args.out}", file=sys.stderr)
        return 130
    return 0


def make_missing(spec, say: Callable[[str], None] = print) -> bool:
    """Make the dataset of a workload's `data:` (a `DataSpec` or its plain form) when its folder does not exist
    and the spec says how (`make:`), exactly as `vlabench make-dataset` with the same flags; returns whether it
    made one."""
    from models.schema import parse

    from .pipeline import DataSpec

    if isinstance(spec, dict):
        spec = parse(DataSpec, spec)
    make, out = spec.make, Path(spec.dataset)
    if make is None or out.exists():
        return False
    _check_sizes(make.episodes, make.fps, make.image_size)
    flags = [f"--source {make.source} --episodes {make.episodes}"]
    flags += [
        f"--{k.replace('_', '-')} {v}"
        for k, v in (("seed", make.seed), ("fps", make.fps), ("image_size", make.image_size))
        if v != _DEFAULTS[k]
    ]
    say(
        f"{out}: no dataset there yet; making it as data.make says: vlabench make-dataset {' '.join(flags)} --out {out}"
    )
    _write(out, make.source, make.episodes, make.fps, make.image_size, make.seed, False, None, say)
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


def _write(
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
    from .lerobot_format import libero_features
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
