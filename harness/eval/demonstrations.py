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
from dataclasses import asdict

from ..data.errors import DatasetError
from ..data.lerobot_format import LIBERO_CAMERAS
from ..data.writer import Episode
from . import sim
from .env import suite_tasks
from .policies import make_policy
from .runner import EvalRunner, plan_episodes


def libero_episodes(
    policy_name: str,
    suites: list[str],
    tasks: list[int] | None,
    count: int,
    workers: int,
    assets: str | None,
    seed: int,
    progress: Callable[[str], None] = print,
    first_trial: int = 0,
    action_noise: float | tuple[float, float] = 0.0,
) -> Iterator[Episode]:
    """`count` rollouts (over the suites' tasks in turn, from their stored initial states `first_trial` on),
    yielding the successful ones in the plan's order. `tasks`: the task indices of each suite, or None: every task
    of each suite that the policy covers. An evaluation of T trials per task starts at state 0, so demonstrations
    from `first_trial >= T` never share an initial state with it. `action_noise`: the deviation of the noise
    executed with the policy's arm actions, or (position, rotation) deviations (harness/eval/episode.py); the
    episodes record the policy's own."""
    setup = sim.prepare(assets)
    policy = make_policy(policy_name)
    planned = plan_demonstrations(suites, tasks, count, seed, first_trial, policy)
    for ep in planned:
        ep.action_noise = action_noise
    policy.check_tasks([ep.task for ep in planned])
    failed: list[str] = []
    yield from _successful_rollouts(policy, setup.env, planned, workers, progress, failed)
    if failed:
        progress(f"{len(failed)} of {count} rollouts failed and were left out: " + "; ".join(failed[:5]))


def plan_demonstrations(
    suites: list[str], tasks: list[int] | None, count: int, seed: int, first_trial: int, policy
) -> list:
    """The first `count` planned episodes from trial `first_trial` on: trial K of every chosen task, then trial
    K+1, ..., the suites taking turns within a trial (a suite's first task, the next suite's first, ...), so any
    first `count` cover the suites and then the tasks evenly. `tasks`: the task indices of each suite (as
    `eval --tasks`); without it, each suite's tasks that `policy` covers. Each one is marked a demonstration."""
    chosen = {}
    for suite in suites:
        every = [asdict(t) for t in suite_tasks(suite)]
        chosen[suite] = sorted(tasks) if tasks is not None else [t["index"] for t in every if policy.covers(t)]
        if not chosen[suite]:
            raise DatasetError("--suite", None, f"suites with tasks that --policy {policy.name} covers", suite)
    per_task = math.ceil(count / sum(len(c) for c in chosen.values()))
    planned = []
    for suite in suites:
        try:
            planned += plan_episodes([suite], chosen[suite], per_task, seed, first_trial=first_trial)
        except ValueError as e:  # more states asked for than the task stores
            raise DatasetError(
                "--episodes", None, f"at most the stored initial states after --first-trial {first_trial}", str(e)
            ) from None
    position = {(suite, index): k for suite in suites for k, index in enumerate(chosen[suite])}
    planned.sort(key=lambda ep: (ep.trial, position[ep.suite, ep.task["index"]], suites.index(ep.suite)))
    planned = planned[:count]
    for ep in planned:
        ep.demonstration = True
    return planned


def _key(record: dict) -> tuple:
    """A finished episode's (suite, task index, trial), as the runner records them: its place in the plan."""
    return record["suite"], record["task"], record["trial"]


class _InPlanOrder:
    """Finished episodes handed on in the plan's order, whatever order the workers finish them in: an episode waits
    until every one planned before it has finished. So a dataset made again from the same plan (a device machine
    makes its demonstrations again in each session) holds its episodes in the same order, and the same bytes where
    the rollouts are the same (harness/data/fingerprint.py)."""

    def __init__(self, planned: list, hand_on: Callable[[Episode], None]):
        self.position = {(e.suite, e.task["index"], e.trial): k for k, e in enumerate(planned)}
        self.waiting: dict[int, Episode | None] = {}
        self.next = 0
        self.hand_on = hand_on

    def finished(self, key: tuple, episode: Episode | None) -> None:
        """The planned episode `key` (suite, task, trial) finished: `episode`, or None where it is left out."""
        self.waiting[self.position[key]] = episode
        while self.next in self.waiting:
            self._release(self.next)

    def flush(self) -> None:
        """After the run: what still waits (behind episodes that never started), in order."""
        for k in sorted(self.waiting):
            self._release(k)

    def _release(self, k: int) -> None:
        episode = self.waiting.pop(k)
        self.next = k + 1
        if episode is not None:
            self.hand_on(episode)


def _successful_rollouts(
    policy, env, planned: list, workers: int, progress: Callable[[str], None], failed: list[str]
) -> Iterator[Episode]:
    """Run the planned episodes on the evaluation's env workers in a background thread, yielding each successful
    one as an Episode in the plan's order; a failed one is appended to `failed` (a line saying why) and left out.
    An error of the rollouts is raised here, on the writer's side."""
    ready: queue.Queue = queue.Queue(maxsize=4)  # a few episodes of frames on their way to the writer
    order = _InPlanOrder(planned, ready.put)
    succeeded: dict[tuple, Episode] = {}

    def keep(record: dict, episode, demo: dict) -> None:  # a demonstration's frames, before `finished` sees it
        if record.get("status") == "ok" and record.get("success"):
            frames = {LIBERO_CAMERAS[0]: demo["image"], LIBERO_CAMERAS[1]: demo["wrist_image"]}
            succeeded[_key(record)] = Episode(task=episode.task["language"], frames=frames, state=demo["state"],
                                     action=demo["action"])  # fmt: skip

    def finished(record: dict) -> None:
        key = _key(record)
        episode = succeeded.pop(key, None)
        if episode is None:
            reason = record.get("failure_reason") or "failure"
            failed.append(f"{record['suite']} task {record['task']} trial {record['trial']}: {reason}")
        order.finished(key, episode)

    def roll_out() -> None:
        try:
            EvalRunner(policy, env, workers=workers, progress=progress, on_episode=finished, on_demonstration=keep).run(
                planned
            )
            order.flush()
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
