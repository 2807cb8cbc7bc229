"""`vlabench eval`: plan the episodes, set up the simulator, build the policy, run the workers and keep the
result file current (kind "eval": `episodes` appended as they finish, `success_rate` per suite and task,
`throughput` at the end; a resumed file keeps its earlier runs' in `throughput_parts`, their sum with this
run's in `throughput_total`). A scenario's `eval` block supplies defaults and the rung whose options the
evaluated model runs with (by default the ladder's final rung).
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import models
from models.schema import AT_LEAST_ONE, NON_NEGATIVE, SchemaError, parse

from .. import kinds
from ..arguments import renamed_flag
from ..errors import InputError, UsageError, describe
from ..machine.utilisation import UtilisationSampler
from ..outputs import at_least, check_out_file, positive_seconds
from ..results import ResultWriter, provenance
from .policies import POLICIES
from .protocol import (
    DUMMY_ACTION,
    IMAGE_SIZE,
    RENDER_SIZE,
    SEED,
    SUITE_MAX_STEPS,
    TRIALS,
    WAIT_STEPS,
    PolicyNeeds,
    Suite,
)

if TYPE_CHECKING:
    from models.policy import EvalPolicy

    from .runner import EpisodeSpec, EvalRunner


@dataclass
class EvalConfig:
    suites: list[str]
    tasks: list[int] | None = None
    trials: int = TRIALS
    first_trial: int = 0  # each task's first stored initial state
    policy: str = next(iter(models.FAMILIES))  # the first registered family
    checkpoint: str | None = None
    workers: int | None = 1  # None with `ray`: one episode per CPU of the cluster
    out: Path | None = None
    resume: bool = False
    assets: str | None = None
    renderer: str | None = None
    seed: int = SEED
    model_size: str = "full"
    device: str | None = None
    dtype: str | None = None
    tokenizer: str | None = None
    videos: object = None  # None, "all" or a set of (task, trial)
    batch_wait_s: float = 0.05
    episode_timeout_s: float | None = 1800.0
    options: dict | None = None  # model options of a scenario's rung
    scenario: dict | None = None  # {"name", "path", "sha256", "rung"} when run from a scenario
    init_states: dict | None = None  # {(suite, task): states} replacing the stored initial states
    max_steps: int | None = None  # replaces the suites' step limits: short smoke runs, not the protocol
    stop_after_s: float | None = None  # start no episode after this long; --resume runs the rest
    ray: str | None = None  # a Ray cluster's address (or auto): the episodes run there (ray_pool.py)


@dataclass(frozen=True)
class EvalBlock:
    """A scenario's `eval:` block, read with the one typed loader (models/schema.py)."""

    suite: Suite | None = None
    suites: Annotated[tuple[Suite, ...], AT_LEAST_ONE] | None = None
    tasks: tuple[Annotated[int, NON_NEGATIVE], ...] | None = None
    trials: Annotated[int, AT_LEAST_ONE] | None = None
    policy: str | None = None  # checked against POLICIES by make_policy
    checkpoint: str | None = None
    workers: Annotated[int, AT_LEAST_ONE] | None = None
    rung: str | None = None
    seed: Annotated[int, NON_NEGATIVE] | None = None
    model_size: str | None = None


def eval_block(scenario, rung_name: str | None = None) -> tuple[dict, dict, str]:
    """The scenario's eval block checked: (settings, the rung's cumulative options, rung name)."""
    if scenario.eval is None:
        raise InputError(scenario.path, "eval", "an eval block (suite, checkpoint, ...)", "none")
    try:
        block = parse(EvalBlock, scenario.eval, "eval")
    except SchemaError as e:
        raise InputError(scenario.path, e.key, e.expected, e.got) from None
    if (block.suite is None) == (block.suites is None):
        raise InputError(
            scenario.path,
            "eval.suite",
            "one LIBERO suite (suite) or a list of them (suites)",
            "both" if block.suite else "neither",
        )
    settings = {"suites": list(block.suites or (block.suite,))}
    for key in ("tasks", "trials", "workers", "seed", "policy", "checkpoint", "model_size"):
        value = getattr(block, key)
        if value is not None:
            settings[key] = list(value) if key == "tasks" else value
    name = rung_name or block.rung or scenario.ladder[-1].name
    rungs = {r.name: r for r in scenario.ladder}
    if name not in rungs:
        raise InputError(scenario.path, "eval.rung", "a rung of the ladder (" + ", ".join(rungs) + ")", repr(name))
    return settings, dict(rungs[name].cumulative), name


@dataclass
class _Earlier:
    """What earlier runs into the same result file left, for --resume (nothing without it)."""

    episodes: list[dict] = field(default_factory=list)  # their finished (ok) episodes, kept
    provenances: list = field(default_factory=list)  # every earlier run's, the last first
    throughputs: list[dict] = field(default_factory=list)  # every earlier run's, oldest first


def _load_previous(out: Path, policy_desc: dict) -> _Earlier:
    """Finished episodes of an earlier run into the same file (for --resume), the provenances and the throughput
    of every earlier run."""
    try:
        old = json.loads(out.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise InputError(str(out), None, "a readable eval result to resume", str(e)) from None
    kinds.require(old, "eval", str(out), "an eval result to resume", shown=describe)
    before = old.get("policy") or {}
    for key in ("name", "checkpoint", "model_size"):
        if before.get(key) != policy_desc.get(key):
            raise InputError(
                str(out),
                f"policy.{key}",
                f"{policy_desc.get(key)!r} (the policy evaluated now)",
                f"{before.get(key)!r}: use another --out",
            )
    kept = [e for e in old.get("episodes", []) if e.get("status") == "ok"]
    # A run killed before it wrote its throughput leaves none: its part is missing from the totals.
    parts = [*old.get("throughput_parts", []), *([old["throughput"]] if old.get("throughput") else [])]
    return _Earlier(kept, [old.get("provenance"), *old.get("provenance_earlier", [])], parts)


def default_out(cfg: EvalConfig) -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("runs") / f"eval-{'-'.join(cfg.suites)}-{cfg.policy}-{stamp}.json"


def _target(policy: EvalPolicy) -> dict:
    import torch

    from ..machine.hardware import detect_target

    target = detect_target()
    on_gpu = policy.device.type == "cuda"
    return {
        "name": target.name,
        "backend": target.backend,
        "device_name": torch.cuda.get_device_name(policy.device) if on_gpu else "cpu",
        "device_count": torch.cuda.device_count() if on_gpu else 1,
    }


def _policy_recipe(cfg: EvalConfig) -> dict:
    """What builds the policy (make_policy's arguments): here, and in every Ray worker with --ray."""
    kwargs = {}
    if cfg.policy in models.FAMILIES:
        kwargs = dict(
            device=cfg.device, dtype=cfg.dtype, model_size=cfg.model_size, tokenizer=cfg.tokenizer, seed=cfg.seed
        )
        if cfg.options is not None:  # a scenario's rung options, for the families that take them
            kwargs["options"] = cfg.options
    return {"policy": cfg.policy, "checkpoint": cfg.checkpoint, "kwargs": kwargs}


def _build_policy(cfg: EvalConfig, episodes: list[EpisodeSpec], progress) -> EvalPolicy:
    """The policy, warmed up for every batch size the workers can make; it refuses up front tasks it cannot do.
    With --ray it describes the policy and checks the tasks; the Ray workers build their own copies."""
    from .policies import make_policy

    recipe = _policy_recipe(cfg)
    t0 = time.perf_counter()
    policy = make_policy(recipe["policy"], recipe["checkpoint"], **recipe["kwargs"])
    progress(f"policy: {cfg.policy} ready in {time.perf_counter() - t0:.1f}s")
    warm = 0.0 if cfg.ray else policy.warm_up(max(1, min(cfg.workers, len(episodes))))
    if warm:
        progress(f"policy: one CUDA graph per batch size up to {cfg.workers} captured in {warm:.1f}s")
    policy.check_tasks([ep.task for ep in episodes])
    return policy


def _resume(
    cfg: EvalConfig, out: Path, policy: EvalPolicy, episodes: list[EpisodeSpec], progress
) -> tuple[list[EpisodeSpec], _Earlier]:
    """With --resume and an existing `out`: the episodes still to run, and what the earlier runs left."""
    if not (cfg.resume and out.exists()):
        return episodes, _Earlier()
    earlier = _load_previous(out, policy.describe())
    done_keys = {(e["suite"], e["task"], e["trial"]) for e in earlier.episodes}
    planned = {ep.key for ep in episodes}
    earlier.episodes = [e for e in earlier.episodes if (e["suite"], e["task"], e["trial"]) in planned]
    episodes = [ep for ep in episodes if ep.key not in done_keys]
    progress(f"resume: {len(earlier.episodes)} finished episodes kept, {len(episodes)} to run")
    return episodes, earlier


def _workload(cfg: EvalConfig, needs: PolicyNeeds) -> dict:
    """The result's `workload`: what was evaluated, and the protocol it ran under."""
    return {
        "model": cfg.policy,
        "suites": cfg.suites,
        "tasks": cfg.tasks,
        "trials": cfg.trials,
        "first_trial": cfg.first_trial,
        "workers": cfg.workers,
        "seed": cfg.seed,
        "protocol": {
            "max_steps": {s: cfg.max_steps or SUITE_MAX_STEPS[s] for s in cfg.suites},
            "wait_steps": WAIT_STEPS,
            "dummy_action": list(DUMMY_ACTION),
            "replan_steps": needs.replan_steps,
            "images": needs.images,
            "privileged": needs.privileged,
            "render_size": RENDER_SIZE,
            "image_size": IMAGE_SIZE,
            "rotate_180": True,
            "state": "eef_pos + axis_angle + gripper_qpos",
            "custom_init_states": sorted(f"{s}/{t}" for s, t in (cfg.init_states or {})),
        },
    }


def _header(cfg: EvalConfig, policy: EvalPolicy, sim_setup: dict, command: list[str], earlier: _Earlier) -> dict:
    """The result file as it starts: everything but this run's episodes and throughput."""
    from .runner import success_rates

    header = {
        "kind": "eval",
        "scenario": cfg.scenario or {"name": f"libero-eval-{cfg.policy}", "path": None, "sha256": None},
        "target": _target(policy),
        "provenance": provenance(command),
        "workload": _workload(cfg, PolicyNeeds.of(policy)),
        "policy": policy.describe(),
        "sim": sim_setup,
        "errors_count_as_failures": True,
        "episodes": earlier.episodes,
        "success_rate": success_rates(earlier.episodes),
    }
    if earlier.provenances:
        header["provenance_earlier"] = earlier.provenances
    if earlier.throughputs:  # in the header, so that a run killed outright still leaves the earlier parts in the file
        header["throughput_parts"] = earlier.throughputs
    return header


def _runner(cfg: EvalConfig, policy: EvalPolicy, setup, writer, on_episode, progress) -> EvalRunner:
    """The local process pool, or with --ray the Ray cluster's (the same episodes, records and result file)."""
    from . import sim
    from .runner import EvalRunner

    options = dict(
        batch_wait_s=cfg.batch_wait_s,
        episode_timeout_s=cfg.episode_timeout_s,
        progress=progress,
        on_episode=on_episode,
        video_dir=writer.path.with_name(writer.path.stem + "-videos") if cfg.videos else None,
        stop_after_s=cfg.stop_after_s,
    )
    if not cfg.ray:
        return EvalRunner(policy, setup.env, workers=cfg.workers, **options)
    from .ray_pool import RayEvalRunner

    # The workers set up their simulator as this process did: the same assets and renderer.
    worker_setup = {"assets": cfg.assets or os.environ.get(sim.ASSETS_ENV), "renderer": setup.renderer}
    worker_setup |= _policy_recipe(cfg)
    return RayEvalRunner(policy, setup.env, cfg.ray, worker_setup, workers=cfg.workers, **options)


def _run_episodes(
    cfg: EvalConfig, policy: EvalPolicy, setup, episodes: list[EpisodeSpec], writer, earlier: _Earlier, progress
) -> list[dict]:
    """Runs the episodes on the workers, keeping the result file current after each; its throughput at the end,
    also when interrupted. Returns the new episodes' records."""
    from .runner import success_rates, throughput, throughput_total

    records = list(earlier.episodes)

    def on_episode(record: dict):
        records.append(record)
        writer.update({"episodes": records, "success_rate": success_rates(records)})

    runner = _runner(cfg, policy, setup, writer, on_episode, progress)
    workers = f"{runner.n_workers} worker{'s' if runner.n_workers != 1 else ''}"
    where = f"the Ray cluster at {cfg.ray}" if cfg.ray else workers
    progress(f"{len(episodes)} episode{'s' if len(episodes) != 1 else ''} on {where} -> {writer.path}")
    start = time.perf_counter()
    on_gpu = policy.device.type == "cuda"
    sampler = UtilisationSampler(gpu=(policy.device.index or 0) if on_gpu else None).start()
    try:
        return runner.run(episodes)
    finally:
        speed = throughput(records[len(earlier.episodes) :], time.perf_counter() - start, runner, policy.latencies)
        speed["utilisation"] = sampler.stop()
        if runner.episodes_left:
            speed["stopped_early"] = {"after_s": cfg.stop_after_s, "episodes_left": runner.episodes_left}
        final = {"throughput": speed}
        if earlier.throughputs:
            final["throughput_total"] = throughput_total([*earlier.throughputs, speed])
        writer.update(final)


def run_eval(cfg: EvalConfig, command: list[str], progress=print) -> dict:
    from . import sim
    from .runner import plan_episodes

    setup = sim.prepare(cfg.assets, cfg.renderer)  # before anything imports LIBERO
    progress(f"simulator: MuJoCo GL {setup.renderer}, LIBERO assets {setup.assets} ({setup.assets_source})")
    episodes = plan_episodes(
        cfg.suites, cfg.tasks, cfg.trials, cfg.seed, cfg.init_states, cfg.videos, cfg.max_steps, cfg.first_trial
    )
    policy = _build_policy(cfg, episodes, progress)
    out = Path(cfg.out or default_out(cfg))
    episodes, earlier = _resume(cfg, out, policy, episodes, progress)
    writer = ResultWriter(out, _header(cfg, policy, setup.as_dict(), command, earlier))
    new = _run_episodes(cfg, policy, setup, episodes, writer, earlier, progress)
    data = writer.data
    data["_new_episodes"] = len(new)
    data["_path"] = str(out)
    return data


def summary_table(result: dict) -> str:
    """Success rate per task and suite with the Wilson interval, and the throughput."""
    from ..report.report import eval_table

    return eval_table(result)


__all__ = ["EvalConfig", "eval_block", "run_eval", "summary_table"]


# ----------------------------------------------------------------------------- command line


def _int_list(text: str, what: str) -> list[int]:
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
        from ..scenario import load_scenario

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
        from .ray_pool import check_ray

        device = check_ray(device)
    return EvalConfig(
        suites=suites,
        tasks=_int_list(args.tasks, "--tasks") if args.tasks else settings.get("tasks"),
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
    import sys

    cfg = config_from_args(args)
    cfg.out = Path(cfg.out or default_out(cfg))  # checked before the simulator and the policy are set up
    check_out_file(cfg.out, merge_flag="--resume", merging=cfg.resume, overwrite=args.overwrite)
    try:
        result = run_eval(cfg, ["vlabench", *sys.argv[1:]], progress=lambda line: print(line, flush=True))
    except ValueError as e:  # bad task indices, trial counts, checkpoint contents: one line, no traceback
        raise UsageError(str(e)) from None
    print()
    print(summary_table(result))
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
