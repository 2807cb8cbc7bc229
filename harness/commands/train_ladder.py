"""`vlabench train-ladder`: its arguments, its plan and the command (registered in harness/cli.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from models.extras import pip_install

from ..arguments import chosen_rungs, renamed_flag, resolve_target, workload_flag
from ..data.make import make_missing
from ..errors import InputError, UsageError
from ..eval import sim  # sim.missing_packages, looked up when called: tests stand in for it
from ..eval.main import eval_block
from ..eval.protocol import SEED, TRIALS
from ..eval.ray_pool import check_ray
from ..judge.train_ladder import judge_runs
from ..ladder.memory_plan import check_unlisted_target
from ..outputs import at_least, check_writable, file_name
from ..report.train_ladder import train_ladder_table
from ..results import load_result
from ..scenario import load_scenario
from ..train.ladder import DEMONSTRATED, RESULT_FILE, LadderPlan, block_recipe, demonstrated_tasks, train_block
from ..train.ladder_run import run_train_ladder
from .eval import int_list, suite_list
from .train import _check_dataset


def add_train_ladder_arguments(p) -> None:
    p.add_argument("scenario", help="scenario YAML file with a train: block (and an eval: block)")
    p.add_argument("--target", help="target name (default: auto-detect)")
    p.add_argument("--rungs", help="comma-separated rungs to train, in this order (default: train.rungs)")
    p.add_argument("--out", type=Path, help="folder: train-ladder.json and one folder per rung "
                   "(default runs/train-ladder-<scenario>-<target>)")  # fmt: skip
    p.add_argument("--resume", action="store_true", help="continue the train-ladder in --out: rungs done are kept, a "
                   "rung stopped in training or evaluation goes on from where it stopped; --rungs may add rungs")  # fmt: skip
    p.add_argument("--steps", type=int, metavar="N", help="optimizer steps per rung (default: train.steps)")
    p.add_argument("--suites", metavar="A,B", help="LIBERO suites every rung is evaluated on, comma-separated, one "
                   "success column each (default: the eval block's; with --resume, the ladder's)")  # fmt: skip
    p.add_argument("--trials", type=int, metavar="N", help="episodes per task (default: the eval block's)")
    p.add_argument("--tasks", help="task indices of each suite, comma-separated, or `demonstrated`: each suite's tasks "
                   "that the training dataset has demonstrations of (default: the eval block's, else all; with "
                   "--resume, the ladder's)")  # fmt: skip
    p.add_argument("--dataset", metavar="PATH", help="train every rung on this dataset (default: the target "
                   "workload's, made when missing; e.g. make-dataset --suite of several suites)")  # fmt: skip
    renamed_flag(p, "--sim-workers", "--eval-workers", type=int, metavar="N",
                 help="simulator worker processes of the evaluation (default: the eval block's); with --ray, the most "
                 "episodes running at once (default: one per CPU of the cluster)")  # fmt: skip
    p.add_argument("--ray", metavar="ADDRESS", help="evaluate every rung on the Ray cluster at ADDRESS (host:port, or "
                   "auto) instead of local worker processes; needs vlabench[ray] (docs/training.md)")  # fmt: skip
    p.add_argument("--assets", help="LIBERO assets folder or archive (default $VLABENCH_LIBERO_ASSETS)")
    p.add_argument("--device", help="policy device in the evaluation (default cuda if available, else cpu)")
    p.add_argument("--max-steps", type=int, help="replace the suites' step limits (smoke runs; not the protocol)")
    renamed_flag(p, "--loader-workers", "--workers", type=int, metavar="N",
                 help="DataLoader worker processes of every rung (default: train.workers)")  # fmt: skip
    p.add_argument("--seed", type=int, metavar="N", help="every rung's training seed (initial weights, sample order, "
                   "the steps' draws; default: the workload's): a repeat of the ladder with another seed measures how "
                   "far training runs alone spread in success (the evaluation's initial states stay the same)")  # fmt: skip
    p.add_argument("--seeds", type=int, metavar="N", help="train and evaluate every rung N times, with seeds "
                   "S..S+N-1 (S: --seed, default 0), each seed's runs in OUT/seed-<S>/<rung>/, and judge the rungs "
                   "over the seeds (a verdict needs 3 seeds)")  # fmt: skip
    p.add_argument("--curve-every", type=int, metavar="K", help="also keep each rung's checkpoint every K steps and "
                   "evaluate it as the last one is: the rung's success against its training wall time (a curve; "
                   "default: the last checkpoint only)")  # fmt: skip


def _suites(args, settings: dict, folder: Path) -> list[str]:
    """--suites, else those of the ladder --resume continues (its --suites stay), else the eval block's."""
    if args.suites:
        return suite_list(args.suites, "--suites")
    if args.resume:
        earlier = load_result(folder / RESULT_FILE).get("train_ladder") or {}
        return (earlier.get("eval") or {}).get("suites") or settings["suites"]
    return settings["suites"]


def _tasks(args, settings: dict, folder: Path) -> list[int] | str | None:
    """--tasks (indices, or `demonstrated`), else those of the ladder --resume continues, else the eval block's."""
    if args.tasks:
        return DEMONSTRATED if args.tasks.strip() == DEMONSTRATED else int_list(args.tasks, "--tasks")
    if args.resume:
        earlier = load_result(folder / RESULT_FILE).get("train_ladder") or {}
        return (earlier.get("eval") or {}).get("tasks", settings.get("tasks"))
    return settings.get("tasks")


def _eval_settings(scenario, args, folder: Path) -> dict:
    settings, _, _ = eval_block(scenario)
    out = {
        "suites": _suites(args, settings, folder),
        "tasks": _tasks(args, settings, folder),
        "trials": args.trials or settings.get("trials", TRIALS),
        # with --ray, the eval block's workers (local processes) give way to the cluster's CPUs
        "workers": args.sim_workers if args.ray else args.sim_workers or settings.get("workers", 1),
        "seed": settings.get("seed", SEED),
    }
    first = train_block(scenario).demonstrations_from_trial
    if first is not None and out["trials"] > first:
        raise InputError(
            scenario.path,
            "train.demonstrations_from_trial",
            f"evaluation trials ({out['trials']}) that stop before the demonstrations' first initial state",
            str(first),
        )
    return out


def _dataset(scenario, target, given: str | None) -> str:
    """--dataset, else the target workload's dataset, made first when missing and its `data.make` says how."""
    if given:
        _check_dataset(given)
        return given
    data = scenario.workload_for(target.name).data
    if data == "synthetic":
        raise InputError(scenario.path, "workload.data", "a dataset to train on (data: {dataset: PATH})", "synthetic")
    make_missing(data, say=lambda line: print(line, flush=True))

    _check_dataset(data.dataset)
    return data.dataset


def _check_simulator(scenario) -> None:
    """Every rung is evaluated in LIBERO after it trains: a missing sim extra is one line before the first rung
    trains, not an error after each has trained for minutes."""
    missing = sim.missing_packages()
    if missing:
        raise InputError(
            scenario.path,
            "eval",
            f"the sim extra for the LIBERO evaluation of each trained rung ({pip_install('sim')})",
            f"missing {', '.join(missing)}",
        )


def _rungs(scenario, block, text: str | None) -> tuple[str, ...]:
    return tuple(chosen_rungs(scenario, text) or block.rungs or scenario.rung_names())


def plan_from_args(args) -> LadderPlan:
    for flag, value in (("--steps", args.steps), ("--trials", args.trials), ("--sim-workers", args.sim_workers)):
        at_least(flag, value, 1, "a positive number")
    at_least("--max-steps", args.max_steps, 1, "a positive number of steps")
    at_least("--loader-workers", args.loader_workers, 0, "a non-negative number of workers")
    workload_flag("--seed", "seed", args.seed)
    at_least("--seeds", getattr(args, "seeds", None), 1, "a positive number of seeds")
    at_least("--curve-every", getattr(args, "curve_every", None), 1, "a positive number of steps")
    scenario = load_scenario(args.scenario)
    block = train_block(scenario)
    target, error = resolve_target(scenario, args.target)
    if error:
        raise UsageError(error)
    out = Path(
        args.out or Path("runs") / f"train-ladder-{file_name(scenario.name, scenario.path, 'name')}-{target.name}"
    )
    if (out / RESULT_FILE).exists() and not args.resume:
        raise InputError("--out", None, f"a folder without {RESULT_FILE} (or --resume)", str(out))
    if args.resume and not (out / RESULT_FILE).exists():  # not a ladder: a fresh one inside it is not what was asked
        got = f"{out}, which holds no {RESULT_FILE}" if out.exists() else f"{out}: no such folder"
        raise InputError("--resume", None, f"an --out folder of a train-ladder ({RESULT_FILE}) to continue", got)
    check_writable(out / RESULT_FILE, "--out")
    steps = args.steps or block.steps
    curve_every = getattr(args, "curve_every", None)
    if curve_every is not None and curve_every >= steps:
        raise InputError("--curve-every", None, f"fewer steps than the rungs train ({steps})", str(curve_every))
    rungs, eval_settings = _rungs(scenario, block, args.rungs), _eval_settings(scenario, args, out)
    _check_simulator(scenario)
    device = args.device
    if args.ray:  # Ray missing, or a GPU asked of it: one line before the first rung trains
        device = check_ray(device)
    check_unlisted_target(scenario, target, scenario.workload_for(target.name))  # before the first rung builds
    dataset = _dataset(scenario, target, args.dataset)  # made when missing: after every check of the input
    if eval_settings["tasks"] == DEMONSTRATED:
        for suite in eval_settings["suites"]:
            if not demonstrated_tasks(dataset, suite):
                raise InputError("--tasks", None, f"suites with tasks that the dataset at {dataset} demonstrates",
                                 f"{DEMONSTRATED}: none of {suite}'s")  # fmt: skip
    return LadderPlan(
        scenario=scenario,
        target=target,
        block=block,
        rungs=rungs,
        reference=block.reference or scenario.rung_names()[0],
        dataset=dataset,
        steps=steps,
        recipe=block_recipe(block, steps),
        eval_settings=eval_settings,
        out=out,
        resume=args.resume,
        assets=args.assets,
        device=device,
        ray=args.ray,
        max_steps=args.max_steps,
        workers=args.loader_workers if args.loader_workers is not None else block.workers,
        curve_every=curve_every,
        **_seeds(args, scenario.workload_for(target.name).seed),
    )


def _seeds(args, workload_seed: int) -> dict:
    """The plan's seed and seeds: --seed (default: the workload's) alone, or with --seeds N the N seeds from
    --seed (default 0) on."""
    count = getattr(args, "seeds", None)
    if count is None:
        return {"seed": args.seed if args.seed is not None else workload_seed}
    first = args.seed if args.seed is not None else 0
    return {"seed": first, "seeds": tuple(range(first, first + count))}


def cmd_train_ladder(args) -> int:
    plan = plan_from_args(args)
    try:
        result = run_train_ladder(plan, ["vlabench", *getattr(args, "argv", sys.argv[1:])], judge_runs)
    except KeyboardInterrupt:
        print(f"\ninterrupted: {plan.out / RESULT_FILE} holds the rungs done; --resume continues",
              file=sys.stderr)  # fmt: skip
        return 130
    print()
    print(train_ladder_table(result))
    print(f"\nresult: {plan.out / RESULT_FILE}")
    runs = result["train_ladder"].get("seed_runs") or [result["train_ladder"]]
    failed = [r["name"] for run in runs for r in run["rungs"] if r["status"] == "error" or r.get("suite_errors")]
    return 1 if failed else 0  # a rung the target cannot train is recorded unsupported, not failed
