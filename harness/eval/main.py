"""A LIBERO evaluation (`vlabench eval`, harness/commands/eval.py; each rung of a train-ladder): plan the episodes,
set up the simulator, build the policy, run the workers and keep the result file current (kind "eval": `episodes`
appended as they finish, `success_rate` per suite and task, `throughput` at the end; a resumed file keeps its
earlier runs' in `throughput_parts`, their sum with this run's in `throughput_total`). A scenario's `eval` block
supplies defaults and the rung whose options the evaluated model runs with (by default the ladder's final rung).
"""

from __future__ import annotations

import datetime
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import models
from models.schema import AT_LEAST_ONE, NON_NEGATIVE, SchemaError, parse

from .. import kinds
from ..errors import InputError, describe
from ..machine.hardware import detect_target
from ..machine.utilisation import UtilisationSampler
from ..results import ResultWriter, provenance
from . import sim
from .policies import make_policy
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
from .ray_pool import RayEvalRunner
from .runner import EvalRunner, plan_episodes, success_rates, throughput, throughput_total

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

    # The workers set up their simulator as this process did: the same assets and renderer.
    worker_setup = {"assets": cfg.assets or os.environ.get(sim.ASSETS_ENV), "renderer": setup.renderer}
    worker_setup |= _policy_recipe(cfg)
    return RayEvalRunner(policy, setup.env, cfg.ray, worker_setup, workers=cfg.workers, **options)


def _run_episodes(
    cfg: EvalConfig, policy: EvalPolicy, setup, episodes: list[EpisodeSpec], writer, earlier: _Earlier, progress
) -> list[dict]:
    """Runs the episodes on the workers, keeping the result file current after each; its throughput at the end,
    also when interrupted. Returns the new episodes' records."""
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


__all__ = ["EvalConfig", "eval_block", "run_eval"]
