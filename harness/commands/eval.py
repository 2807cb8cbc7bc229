"""`vlabench eval`: LIBERO closed-loop evaluation with parallel env workers (harness/eval/main.py run_eval); the
options, their checks, and the summary and the --resume command it prints."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import models

from ..arguments import renamed_flag
from ..errors import InputError, UsageError
from ..eval import main as eval_main  # eval_main.run_eval, looked up when called: tests stand in for it
from ..eval.main import EvalConfig, default_out, eval_block
from ..eval.policies import POLICIES
from ..eval.protocol import SEED, SUITE_MAX_STEPS, TRIALS
from ..eval.ray_pool import check_ray
from ..outputs import at_least, check_out_file, positive_seconds
from ..report.report import eval_table
from ..scenario import load_scenario


def int_list(text: str, what: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise InputError(what, None, "comma-separated integers like 0,1,2", repr(text)) from None
    if not values or min(values) < 0:
        raise InputError(what, None, "comma-separated non-negative integers like 0,1,2", repr(text))
    return values


def suite_list(text: str, flag: str) -> list[str]:
    """Comma-separated LIBERO suite names (`eval --suite`, `train-ladder --suites`), each known, each once."""
    suites = list(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    unknown = [s for s in suites if s not in SUITE_MAX_STEPS]
    if unknown or not suites:
        got = ", ".join(unknown) if unknown else repr(text)
        raise InputError(flag, None, "LIBERO suites (" + ", ".join(SUITE_MAX_STEPS) + "), comma-separated", got)
    return suites


def _videos(text: str | None):
    """--videos all | TASK:TRIAL,...  (e.g. 0:0,3:1)"""
    if not text:
        return None
    if text == "all":
        return "all"
    chosen = set()
    for item in text.split(","):
        try:
            task, trial = (int(v) for v in item.split(":"))
        except ValueError:
            raise InputError("--videos", None, "all or TASK:TRIAL pairs like 0:0,3:1", repr(text)) from None
        chosen.add((task, trial))
    return chosen


def _stop_after(text: str | None) -> float | None:
    """--stop-after SECONDS: a positive, finite number."""
    if text is None:
        return None
    try:
        seconds = float(text)
    except ValueError:
        seconds = None
    if seconds is None or not 0 < seconds < float("inf"):
        raise InputError("--stop-after", None, "a positive number of seconds like 3600", repr(text))
    return seconds


def continue_command(argv: list[str], out: str) -> str:
    """The command that runs the rest of a stopped evaluation: the same arguments with --out and --resume.
    The appended --out comes last, so it wins over any spelling of it that argparse took before."""
    kept, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not (arg.startswith("--out=") or arg == "--resume"):
            kept.append(arg)
    return shlex.join(["vlabench", *kept, "--out", out, "--resume"])


def add_eval_arguments(p) -> None:
    """The options of `vlabench eval` (in the order --help lists them)."""
    _add_subject_arguments(p)
    _add_run_control_arguments(p)
    _add_runtime_arguments(p)
    _add_limit_and_scenario_arguments(p)


def _add_subject_arguments(p) -> None:
    """What is evaluated: the suites, tasks and trials, the policy and its checkpoint."""
    p.add_argument("--suite", help="LIBERO suite(s), comma-separated: " + ", ".join(SUITE_MAX_STEPS))
    p.add_argument("--tasks", help="task indices, comma-separated (default: every task of the suite)")
    p.add_argument("--trials", type=int, help=f"episodes per task, from its stored initial states (default {TRIALS})")
    p.add_argument(
        "--first-trial",
        type=int,
        default=0,
        metavar="K",
        help="start at each task's stored initial state K (default 0, the protocol's); --first-trial 20 evaluates "
        "on the states that make-dataset --first-trial 20 took its demonstrations from",
    )
    p.add_argument(
        "--policy",
        choices=POLICIES,
        help="policy: a model family's (default: the first, " + next(iter(models.FAMILIES)) + "), expert (a "
        "scripted policy reading simulator state, docs/expert.md) or noop (holds still)",
    )
    p.add_argument(
        "--checkpoint",
        help="Pi0.5 checkpoint: a folder or .safetensors file (openpi or LeRobot layout), "
        "a Hugging Face Hub id (e.g. lerobot/pi05_libero), or 'random'",
    )
    p.add_argument("--model-size", choices=("full", "tiny"), help="model size for --checkpoint random (default full)")


def _add_run_control_arguments(p) -> None:
    """How the run proceeds: its workers, its result file, resuming and stopping early."""
    renamed_flag(p, "--sim-workers", "--workers", type=int, metavar="N", help="simulator worker processes (default 1); "
                 "with --ray, the most episodes running at once (default: one per CPU of the cluster)")  # fmt: skip
    p.add_argument(
        "--ray",
        metavar="ADDRESS",
        help="run the episodes on the Ray cluster at ADDRESS (host:port of its head, or auto for the cluster this "
        "machine is a node of) instead of local worker processes; needs vlabench[ray] (docs/training.md)",
    )
    p.add_argument("--out", type=Path, help="result JSON (default runs/eval-<suite>-<policy>-<time>.json)")
    p.add_argument("--resume", action="store_true", help="keep the finished episodes of --out and run the rest")
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing --out (without it: refuse, or --resume to merge)"
    )
    p.add_argument(
        "--stop-after",
        metavar="SECONDS",
        help="start no new episode after this many seconds, let the running ones finish, write the result "
        "and print the --resume command that runs the rest (exit 0)",
    )


def _add_runtime_arguments(p) -> None:
    """Where and how it runs: assets, rendering, the policy's device, dtype and tokenizer, seed, videos, batching
    and the episode timeout."""
    p.add_argument(
        "--assets",
        help="LIBERO assets folder or archive, or archives joined by ':' and unpacked in that order "
        "(default $VLABENCH_LIBERO_ASSETS, else LIBERO downloads them)",
    )
    p.add_argument(
        "--render",
        choices=("egl", "osmesa"),
        help="MuJoCo GL backend (default: egl with a GPU or Mesa EGL, else osmesa)",
    )
    p.add_argument("--device", help="policy device (default cuda if available, else cpu)")
    p.add_argument("--dtype", choices=("bf16", "fp32"), help="policy dtype (default bf16 on GPUs, fp32 on CPUs)")
    p.add_argument("--tokenizer", help="PaliGemma tokenizer.model, 'bytes' or 'pieces' (default: the one the checkpoint "
                   "names or holds, else the Hub's)")  # fmt: skip
    p.add_argument("--seed", type=int, help=f"environment and sampling seed (default {SEED})")
    p.add_argument("--videos", help="record episodes as videos: all, or TASK:TRIAL pairs like 0:0,3:1")
    p.add_argument(
        "--batch-wait",
        type=float,
        default=0.05,
        metavar="S",
        help="longest wait for more environments to join a policy batch (default 0.05 s)",
    )
    p.add_argument(
        "--episode-timeout",
        type=float,
        default=1800.0,
        metavar="S",
        help="an episode running longer is recorded as error and its worker replaced (default 1800)",
    )


def _add_limit_and_scenario_arguments(p) -> None:
    """Smoke-run step limits and the scenario whose eval block gives the defaults."""
    p.add_argument("--max-steps", type=int, help="replace the suites' step limits (smoke runs; not the protocol)")
    p.add_argument(
        "--scenario",
        help="take defaults from this scenario's eval block (the model runs with the "
        "options of its final rung, or --rung)",
    )
    p.add_argument("--rung", help="with --scenario: the rung whose options the model runs with")


def config_from_args(args) -> EvalConfig:
    settings, options, scenario = {}, None, None
    if args.scenario:
        sc = load_scenario(args.scenario)
        settings, options, rung = eval_block(sc, args.rung)
        scenario = {"name": sc.name, "path": sc.path, "sha256": sc.sha256, "rung": rung}
    elif args.rung:
        raise InputError("--rung", None, "--scenario with it", "--rung alone")
    suites = suite_list(args.suite, "--suite") if args.suite else settings.get("suites")
    if not suites:
        raise InputError("--suite", None, "a LIBERO suite (" + ", ".join(SUITE_MAX_STEPS) + ")", "nothing")
    pick = lambda arg, key, default: arg if arg is not None else settings.get(key, default)  # noqa: E731
    trials = pick(args.trials, "trials", TRIALS)
    # With --ray, the eval block's workers (local processes) give way to the cluster's CPUs.
    workers = args.sim_workers if args.ray else pick(args.sim_workers, "workers", 1)
    at_least("--trials", trials, 1, "a positive number of episodes per task")
    at_least("--sim-workers", workers, 1, "a positive number of worker processes")
    at_least("--first-trial", args.first_trial, 0, "a non-negative state index")
    at_least("--seed", args.seed, 0, "a non-negative seed")
    at_least("--max-steps", args.max_steps, 1, "a positive number of steps")
    at_least("--batch-wait", args.batch_wait, 0, "a non-negative number of seconds")
    positive_seconds("--episode-timeout", args.episode_timeout)
    device = args.device
    if args.ray:
        device = check_ray(device)
    return EvalConfig(
        suites=suites,
        tasks=int_list(args.tasks, "--tasks") if args.tasks else settings.get("tasks"),
        trials=trials,
        first_trial=args.first_trial,
        policy=pick(args.policy, "policy", next(iter(models.FAMILIES))),
        checkpoint=pick(args.checkpoint, "checkpoint", None),
        workers=workers,
        out=args.out,
        resume=args.resume,
        assets=args.assets,
        renderer=args.render,
        seed=pick(args.seed, "seed", SEED),
        model_size=pick(args.model_size, "model_size", "full"),
        device=device,
        dtype=args.dtype,
        tokenizer=args.tokenizer,
        videos=_videos(args.videos),
        batch_wait_s=args.batch_wait,
        episode_timeout_s=args.episode_timeout,
        options=options,
        scenario=scenario,
        max_steps=args.max_steps,
        stop_after_s=_stop_after(args.stop_after),
        ray=args.ray,
    )


def cmd_eval(args) -> int:
    cfg = config_from_args(args)
    cfg.out = Path(cfg.out or default_out(cfg))  # checked before the simulator and the policy are set up
    check_out_file(cfg.out, merge_flag="--resume", merging=cfg.resume, overwrite=args.overwrite)
    try:
        result = eval_main.run_eval(cfg, ["vlabench", *sys.argv[1:]], progress=lambda line: print(line, flush=True))
    except ValueError as e:  # bad task indices, trial counts, checkpoint contents: one line, no traceback
        raise UsageError(str(e)) from None
    print()
    print(eval_table(result))  # success per task and suite with the Wilson interval, and the throughput
    print(f"\nresult: {result['_path']}")
    stopped = result["throughput"].get("stopped_early")
    if stopped:  # a requested stop: exit 0 unless episodes errored
        command = continue_command(getattr(args, "argv", sys.argv[1:]), result["_path"])
        print(
            f"stopped after {stopped['after_s']:g}s (--stop-after) with {stopped['episodes_left']} episodes "
            f"left; continue with: {command}"
        )
    errors = sum(e.get("status") == "error" for e in result["episodes"])
    if errors:
        print(
            f"{errors} episodes ended in an error (see failure_reason); the same command with "
            f"--out {shlex.quote(result['_path'])} --resume runs them again",
            file=sys.stderr,
        )
        return 1
    return 0
