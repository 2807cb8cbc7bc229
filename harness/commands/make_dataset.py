"""`vlabench make-dataset`: write a LeRobotDataset v3.0 folder from a source of episodes."""

from __future__ import annotations

import sys
from pathlib import Path

from ..arguments import renamed_flag
from ..data.errors import DatasetError
from ..data.make import DEFAULTS, check_sizes, write_episodes
from ..outputs import check_writable
from .eval import int_list, suite_list

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
    p.add_argument("--seed", type=int, default=DEFAULTS["seed"], help="seed of the synthetic episodes (default 0)")
    p.add_argument("--fps", type=int, default=DEFAULTS["fps"], help="frames per second (default 10, as LIBERO)")
    p.add_argument(
        "--image-size", type=int, default=DEFAULTS["image_size"], help="camera frames are SIZE x SIZE (default 256)"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset at --out")
    p.add_argument("--policy", default="expert", help="libero: the policy that demonstrates (default: expert)")
    p.add_argument("--suite", default="libero_spatial", help="libero: the suite, or several comma-separated (one "
                   "dataset of their tasks, the suites taking turns; default libero_spatial)")  # fmt: skip
    p.add_argument("--tasks", help="libero: task indices of each suite, comma-separated (default: every task of "
                   "each suite that the policy covers)")  # fmt: skip
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
    check_sizes(args.episodes, args.fps, args.image_size)
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


def cmd_make_dataset(args) -> int:
    from ..data.writer import check_target  # here, not at the top: the writer imports pyarrow and PyAV (0.1 s)

    _check_args(args)
    check_target(args.out, args.overwrite)  # before any work: a refusal should be instant
    check_writable(args.out)  # the dataset is written beside --out, then renamed into place
    if args.source == "libero":
        from ..eval.demonstrations import libero_episodes  # here: it imports the writer (pyarrow, PyAV)

        tasks = int_list(args.tasks, "--tasks") if args.tasks else None
        episodes = libero_episodes(
            args.policy,
            suite_list(args.suite, "--suite"),
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
        write_episodes(args.out, args.source, args.episodes, args.fps, args.image_size, args.seed, args.overwrite,
                       episodes, encoders=args.encoders)  # fmt: skip
    except KeyboardInterrupt:
        print(f"\ninterrupted: nothing written to {args.out}", file=sys.stderr)
        return 130
    return 0
