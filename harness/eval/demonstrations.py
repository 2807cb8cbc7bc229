"""LIBERO demonstrations as dataset episodes (`vlabench make-dataset --source libero --policy expert`): a policy
rolls out a suite's tasks in the simulator with both cameras rendering at 256x256, and each successful episode
becomes an Episode for the writer: the two camera images as the policy sees them (rotated 180 degrees, as
LeRobot's LIBERO datasets store them), the 8-d state and the action executed at every step, the task's
instruction. The episodes run on the evaluation's parallel env workers; a failed one is left out."""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable, Iterator

from ..data.errors import DatasetError
from ..data.lerobot_format import LIBERO_CAMERAS
from ..data.writer import Episode
from . import sim
from .env import suite_tasks
from .policies import make_policy
from .runner import EvalRunner, plan_episodes


def libero_episodes(
    policy_name: str,
    suite: str,
    tasks: list[int] | None,
    count: int,
    workers: int,
    assets: str | None,
    seed: int,
    progress: Callable[[str], None] = print,
    first_trial: int = 0,
    action_noise: float | tuple[float, float] = 0.0,
) -> Iterator[Episode]:
    """`count` rollouts (over the tasks in turn, from their stored initial states `first_trial` on), yielding the
    successful ones as they finish. An evaluation of T trials per task starts at state 0, so demonstrations
    from `first_trial >= T` never share an initial state with it. `action_noise`: the deviation of the noise
    executed with the policy's arm actions, or (position, rotation) deviations (harness/eval/episode.py); the
    episodes record the policy's own."""
    setup = sim.prepare(assets)
    planned = _plan_demonstrations(suite, tasks, count, seed, first_trial)
    for ep in planned:
        ep.action_noise = action_noise
    policy = make_policy(policy_name)
    policy.check_tasks([ep.task for ep in planned])
    failed: list[str] = []
    yield from _successful_rollouts(policy, setup.env, planned, workers, progress, failed)
    if failed:
        progress(f"{len(failed)} of {count} rollouts failed and were left out: " + "; ".join(failed[:5]))


def _plan_demonstrations(suite: str, tasks: list[int] | None, count: int, seed: int, first_trial: int) -> list:
    """The first `count` planned episodes from trial `first_trial` on, the tasks in turn (trial K of every task,
    then trial K+1, ...), so any first `count` cover them all; each marked a demonstration."""
    chosen = tasks if tasks is not None else list(range(len(suite_tasks(suite))))
    try:
        planned = plan_episodes([suite], chosen, math.ceil(count / len(chosen)), seed, first_trial=first_trial)
    except ValueError as e:  # more states asked for than the task stores
        raise DatasetError(
            "--episodes", None, f"at most the stored initial states after --first-trial {first_trial}", str(e)
        ) from None
    planned = sorted(planned, key=lambda ep: (ep.trial, ep.task["index"]))[:count]
    for ep in planned:
        ep.demonstration = True
    return planned


def _successful_rollouts(
    policy, env, planned: list, workers: int, progress: Callable[[str], None], failed: list[str]
) -> Iterator[Episode]:
    """Run the planned episodes on the evaluation's env workers in a background thread, yielding each successful
    one as an Episode as it finishes; a failed one is appended to `failed` (a line saying why) and left out. An
    error of the rollouts is raised here, on the writer's side."""
    ready: queue.Queue = queue.Queue(maxsize=4)  # a few episodes of frames in memory at most

    def keep(record: dict, episode, demo: dict) -> None:
        if record.get("status") == "ok" and record.get("success"):
            frames = {LIBERO_CAMERAS[0]: demo["image"], LIBERO_CAMERAS[1]: demo["wrist_image"]}
            ready.put(Episode(task=episode.task["language"], frames=frames, state=demo["state"], action=demo["action"]))
        else:
            failed.append(f"task {episode.task['index']} trial {episode.trial}: {record.get('failure_reason')}")

    def roll_out() -> None:
        try:
            EvalRunner(policy, env, workers=workers, progress=progress, on_demonstration=keep).run(planned)
            ready.put(None)
        except BaseException as exc:  # handed to the writer's side, which raises it
            ready.put(exc)

    threading.Thread(target=roll_out, name="vlabench-libero-rollouts", daemon=True).start()
    while True:
        item = ready.get()
        if item is None:
            break
        if isinstance(item, BaseException):
            raise item
        yield item
