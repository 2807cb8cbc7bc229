"""Parallel LIBERO evaluation: N environment worker processes, one batched policy call for every
environment waiting for an action chunk, episode records appended to the result file as they finish.

A worker that dies (crash, kill, episode timeout) costs its episode, recorded as `error`, and is replaced.
Episodes that errored count as failed trials in the success rates (as openpi counts an episode that
raised), and `--resume` runs them again; finished `ok` episodes are kept and skipped. With a time limit
(`--stop-after`) the runner starts no new episode once it has passed, lets the running ones finish and
returns; `--resume` runs the rest later. ray_pool.py runs the same episodes, recorded the same way, on a Ray
cluster's nodes.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from multiprocessing.connection import wait
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..stats.rates import success_rates  # re-exported: the evaluation's counting lives with the statistics
from .env import read_init_states, suite_tasks
from .protocol import SEED, SUITE_MAX_STEPS, TRIALS, WAIT_STEPS, PolicyNeeds
from .workers import worker_main

if TYPE_CHECKING:  # torch, which models.policy imports, is for the evaluations that build a policy
    from models.policy import EvalPolicy


@dataclass
class EpisodeSpec:
    suite: str
    task: dict  # TaskInfo as a dict (it travels to the worker)
    trial: int  # index of the stored initial state
    init_state: np.ndarray
    max_steps: int
    seed: int = SEED
    record: bool = False
    demonstration: bool = False  # keep the episode's images, states and actions (datasets)
    # a demonstration executes its policy's arm actions plus Gaussian noise of this deviation and records the
    # policy's own: states off the clean path, labelled with the way back (DART, Laskey et al. 2017)
    action_noise: float | tuple[float, float] = 0.0  # one deviation, or (position, rotation)

    @property
    def key(self) -> tuple:
        return (self.suite, self.task["index"], self.trial)

    def message(self) -> dict:
        # The noise seed makes an episode's sampled actions independent of batching and worker count.
        noise_seed = self.seed * 1_000_003 + sum(map(ord, self.suite)) * 10_007 + self.task["index"] * 101 + self.trial
        return {
            "task": self.task,
            "init_state": self.init_state,
            "max_steps": self.max_steps,
            "seed": self.seed,
            "episode_seed": self.seed + self.trial,
            "record": self.record,
            "demonstration": self.demonstration,
            "action_noise": self.action_noise,
            "noise_seed": noise_seed,
        }


def plan_episodes(
    suites: list[str],
    tasks: list[int] | None,
    trials: int,
    seed: int = SEED,
    init_states: dict | None = None,
    videos=None,
    max_steps: int | None = None,
    first_trial: int = 0,
) -> list[EpisodeSpec]:
    """Episodes in task order, `trials` per task from its stored initial state `first_trial` on; `init_states`
    may replace a task's stored states: {(suite, task): array}; `max_steps` replaces the suites' step limits
    (short runs for tests and smoke checks, not the protocol)."""
    episodes = []
    for suite in suites:
        if suite not in SUITE_MAX_STEPS:
            raise ValueError(f"unknown suite {suite!r}; expected one of {', '.join(SUITE_MAX_STEPS)}")
        all_tasks = suite_tasks(suite)
        chosen = list(range(len(all_tasks))) if tasks is None else tasks
        for index in chosen:
            if not 0 <= index < len(all_tasks):
                raise ValueError(f"--tasks: {suite} has tasks 0..{len(all_tasks) - 1}, got {index}")
            task = all_tasks[index]
            states = (init_states or {}).get((suite, index))
            states = read_init_states(task.init_states_file) if states is None else np.asarray(states)
            if first_trial + trials > len(states):
                raise ValueError(
                    f"--trials {trials} from state {first_trial}: {suite} task {index} has {len(states)} stored "
                    "initial states"
                )
            for trial in range(first_trial, first_trial + trials):
                episodes.append(
                    EpisodeSpec(
                        suite,
                        asdict(task),
                        trial,
                        states[trial],
                        max_steps or SUITE_MAX_STEPS[suite],
                        seed,
                        record=_wants_video(videos, suite, index, trial),
                    )
                )
    return episodes


def _wants_video(videos, suite: str, task: int, trial: int) -> bool:
    """videos: None, "all", or a set of (task, trial) / (suite, task, trial) tuples."""
    if not videos:
        return False
    return videos == "all" or (task, trial) in videos or (suite, task, trial) in videos


# One math thread per env worker: the N workers are the parallelism, and N processes each starting a thread
# per core would fight over the cores. Set at spawn (numpy reads them when the child imports it); a value the
# user exported wins.
WORKER_THREADS = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@contextmanager
def _spawn_environ(values: dict):
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for k in added:
            os.environ.pop(k, None)


@contextmanager
def _host_threads(workers: int):
    """The policy's host-side work (images resized, prompts tokenised) in this process runs beside `workers` busy
    env processes: with torch's thread per core it fights them for the cores. So it gets the cores they leave, at
    least one."""
    import torch

    before = torch.get_num_threads()
    threads = max(1, min(before, (os.cpu_count() or 1) - workers))
    torch.set_num_threads(threads)
    try:
        yield threads
    finally:
        torch.set_num_threads(before)


class _Slot:
    """One worker process and what it is doing."""

    def __init__(self, index: int, ctx, sim_env: dict):
        self.index = index
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=worker_main, args=(child, sim_env), daemon=True, name=f"vlabench-eval-worker-{index}"
        )
        with _spawn_environ(WORKER_THREADS):
            self.process.start()
        child.close()
        self.episode: EpisodeSpec | None = None
        self.started = 0.0
        self.waiting: dict | None = None  # the observation awaiting a chunk

    def stop(self, timeout: float = 5.0):
        try:
            self.conn.send(("stop", None))
        except (OSError, ValueError):
            pass
        self.process.join(timeout)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()


class EvalRunner:
    def __init__(
        self,
        policy: EvalPolicy,
        sim_env: dict,
        workers: int = 1,
        batch_wait_s: float = 0.05,
        episode_timeout_s: float | None = 1800.0,
        progress: Callable[[str], None] | None = None,
        on_episode: Callable[[dict], None] | None = None,
        video_dir: Path | None = None,
        on_demonstration: Callable[[dict, EpisodeSpec, dict], None] | None = None,
        stop_after_s: float | None = None,
    ):
        self.policy = policy
        self.needs = asdict(PolicyNeeds.of(policy))  # travels in every episode message
        self.sim_env = sim_env
        self.n_workers = max(1, workers)
        # A policy whose calls cost microseconds (the scripted expert) says so: waiting to batch would only idle workers.
        self.batch_wait_s = batch_wait_s if policy.batches else 0.0
        self.episode_timeout_s = episode_timeout_s
        self.progress = progress or (lambda line: print(line, file=sys.stderr, flush=True))
        self.on_episode = on_episode or (lambda record: None)
        self.on_demonstration = on_demonstration  # (record, episode, demo) of episodes asked for as demonstrations
        self.video_dir = video_dir
        self.slots: list[_Slot] = []
        self.policy_calls = 0
        self.policy_s = 0.0
        self.batch_sizes: list[int] = []
        self.crashes = 0  # workers replaced
        self.host_threads: int | None = None  # torch's threads in this process while the workers run
        self.errors_in_a_row = 0
        self.stop_after_s = stop_after_s  # seconds from the start of run() after which no episode starts
        self.episodes_left = 0  # episodes never started because stop_after_s had passed
        self.cluster: dict | None = None  # where the episodes ran when not in local processes (ray_pool.py)

    def _time_is_up(self, started: float, pending: list, total: int) -> bool:
        """Whether to stop handing out episodes. Never before the first round is handed out: every run then
        finishes at least one episode per worker, so a suite split over many short runs always progresses."""
        if self.stop_after_s is None or not pending or len(pending) == total:
            return False
        return time.monotonic() - started >= self.stop_after_s

    def _stop_handing_out(self, pending: list, running: int):
        self.episodes_left = len(pending)
        self.progress(
            f"stop after {self.stop_after_s:g}s reached: {len(pending)} episodes not started; "
            f"waiting for the {running} running to finish"
        )

    def _finish(self, slot: _Slot, record: dict, done: list, total: int):
        spec, slot.episode, slot.waiting = slot.episode, None, None
        self._record(spec, {"worker": slot.index, **record}, done, total)

    def _record(self, spec: EpisodeSpec, record: dict, done: list, total: int):
        """A finished episode (a worker's record, or an error's) into the results: its video and demonstration
        handed on, the result file updated (`on_episode`) and a progress line."""
        where = {"suite": spec.suite, "task": spec.task["index"], "task_name": spec.task["name"], "trial": spec.trial}
        record = {**where, **record}
        demo = record.pop("demo", None)
        if demo is not None and self.on_demonstration is not None:
            self.on_demonstration(record, spec, demo)
        frames = record.pop("frames", None)
        if frames and self.video_dir is not None:
            outcome = "success" if record.get("success") else "failure"
            name = f"{spec.suite}-task{spec.task['index']}-trial{spec.trial}-{outcome}"
            record["video"] = str(write_video(frames, Path(self.video_dir) / name))
        done.append(record)
        self.errors_in_a_row = self.errors_in_a_row + 1 if record["status"] == "error" else 0
        self.on_episode(record)
        ok = sum(bool(r.get("success")) for r in done)
        width = 20
        filled = int(width * len(done) / max(total, 1))
        what = "success" if record.get("success") else (record.get("failure_reason") or "failure")
        self.progress(
            f"[{'#' * filled}{'.' * (width - filled)}] {len(done)}/{total} "
            f"success {ok}/{len(done)} = {100 * ok / len(done):.1f}% | {spec.suite} task {spec.task['index']} "
            f"trial {spec.trial}: {what}"
            + (f" after {record['steps']} steps" if record.get("steps") is not None else "")
        )

    def _replace(self, slot: _Slot, ctx, reason: str, done: list, total: int):
        """The worker died or hung: record its episode as an error and start a fresh worker in its place."""
        code = slot.process.exitcode
        if slot.process.is_alive():
            slot.process.kill()
        slot.process.join(5)
        if slot.episode is not None:
            self._finish(
                slot,
                {
                    "status": "error",
                    "success": False,
                    "steps": None,
                    "failure_reason": f"error: {reason}" + (f" (exit code {code})" if code else ""),
                },
                done,
                total,
            )
        slot.conn.close()
        self.slots[slot.index] = _Slot(slot.index, ctx, self.sim_env)
        self.crashes += 1

    def _flush(self, ready: list[_Slot]):
        """One batched policy call for every environment waiting on a chunk."""
        start = time.perf_counter()
        chunks = self.policy.infer([s.waiting for s in ready])
        self.policy_s += time.perf_counter() - start
        self.policy_calls += 1
        self.batch_sizes.append(len(ready))
        for slot, chunk in zip(ready, chunks):
            slot.waiting = None
            try:
                slot.conn.send(("chunk", np.asarray(chunk)))
            except (OSError, ValueError):
                pass  # it died meanwhile: its sentinel reports it on the next wait

    def run(self, episodes: list[EpisodeSpec]) -> list[dict]:
        """Run the episodes on the workers, batching their policy calls; returns the episode records in the order
        they finished."""
        if not episodes:
            return []
        ctx = mp.get_context("spawn")  # no fork: the parent holds threads, CUDA and maybe GL state
        pending = list(episodes)
        total = len(pending)
        done: list[dict] = []
        self.slots = [_Slot(i, ctx, self.sim_env) for i in range(min(self.n_workers, total))]
        with _host_threads(len(self.slots)) as self.host_threads:
            self._loop(ctx, pending, done, total, time.monotonic())
        return done

    def _loop(self, ctx, pending: list, done: list, total: int, started: float) -> None:
        first_wait, handing_out = None, True
        try:
            while (handing_out and pending) or any(s.episode is not None for s in self.slots):
                if handing_out and self._time_is_up(started, pending, total):
                    handing_out = False
                    self._stop_handing_out(pending, sum(s.episode is not None for s in self.slots))
                if handing_out:
                    self._hand_out(pending)
                waiting = self._batch_due(first_wait)
                if waiting:
                    self._flush(waiting)
                    first_wait = None
                    continue
                first_wait = self._receive(ctx, first_wait, done, total)
                self._replace_timed_out(ctx, done, total)
                self._stop_if_setup_fails(done, len(self.slots))
        finally:
            for slot in self.slots:
                slot.stop()

    def _hand_out(self, pending: list) -> None:
        """The next pending episode to each idle worker."""
        for slot in self.slots:
            if slot.episode is None and pending:
                slot.episode, slot.started = pending.pop(0), time.monotonic()
                try:
                    slot.conn.send(("episode", {**slot.episode.message(), "needs": self.needs}))
                except (OSError, ValueError):
                    pass  # reported by its sentinel

    def _batch_due(self, first_wait: float | None) -> list[_Slot]:
        """The environments waiting on a chunk, when their batch is due: every busy one waits, or the first has
        waited batch_wait_s; else none."""
        busy = [s for s in self.slots if s.episode is not None]
        waiting = [s for s in busy if s.waiting is not None]
        if waiting and (
            len(waiting) == len(busy) or first_wait is None or time.monotonic() - first_wait >= self.batch_wait_s
        ):
            return waiting
        return []

    def _receive(self, ctx, first_wait: float | None, done: list, total: int) -> float | None:
        """Wait (until the batch is due, else at most 1 s) for the workers' messages: an observation waiting on a
        chunk, a finished episode, or a worker that died. Returns when the first of the current batch began
        waiting."""
        timeout = 1.0 if first_wait is None else max(0.0, first_wait + self.batch_wait_s - time.monotonic())
        objects = {s.conn: s for s in self.slots} | {s.process.sentinel: s for s in self.slots}
        for obj in wait(list(objects), timeout=timeout):
            slot = objects[obj]
            if self.slots[slot.index] is not slot:
                continue  # replaced earlier in this round
            if obj is slot.conn:
                try:
                    kind, payload = slot.conn.recv()
                except (EOFError, OSError):
                    self._replace(slot, ctx, "worker process died", done, total)
                    continue
                if kind == "obs" and slot.episode is not None:
                    slot.waiting = payload
                    first_wait = first_wait or time.monotonic()
                elif kind == "done" and slot.episode is not None:
                    self._finish(slot, payload, done, total)
            elif not slot.process.is_alive():
                self._replace(slot, ctx, "worker process died", done, total)
        return first_wait

    def _replace_timed_out(self, ctx, done: list, total: int) -> None:
        """Record an episode running past the episode timeout as an error and replace its worker."""
        now = time.monotonic()
        for slot in list(self.slots):
            if slot.episode is not None and self.episode_timeout_s and now - slot.started > self.episode_timeout_s:
                self._replace(slot, ctx, f"episode timed out after {self.episode_timeout_s:.0f}s", done, total)

    def _stop_if_setup_fails(self, done: list, workers: int) -> None:
        """A setup problem (rendering, assets) fails every episode the same way: stop rather than burn them all."""
        if self.errors_in_a_row >= 2 * workers + 3 and not any(r["status"] == "ok" for r in done):
            last = done[-1].get("failure_reason")
            raise RuntimeError(f"every episode so far failed to run (last: {last}); stopping the eval")


def throughput(records: list[dict], wall_s: float, runner: EvalRunner, latencies: Sequence[tuple[int, float]]) -> dict:
    """Env steps/s over the run (all workers together) and, from the policy's `latencies`, its latency per
    batched call."""
    env_steps = sum(r.get("env_steps") or 0 for r in records)
    out = {
        "wall_s": wall_s,
        "episodes": len(records),
        "workers": runner.n_workers,
        "env_steps": env_steps,
        "env_steps_per_s": env_steps / wall_s if wall_s > 0 else None,
        "sim_steps_per_s_per_worker": (
            env_steps / sum(r.get("sim_s") or 0 for r in records) if any(r.get("sim_s") for r in records) else None
        ),
        "policy_calls": runner.policy_calls,
        "batch_size_mean": float(np.mean(runner.batch_sizes)) if runner.batch_sizes else None,
        "policy_s_total": runner.policy_s,
        "policy_host_threads": runner.host_threads,
        "worker_restarts": runner.crashes,
    }
    if runner.cluster:
        out["ray"] = runner.cluster
    if latencies:
        # The first call pays one-off costs (CUDA context, cuBLAS heuristics, allocator growth): it is reported
        # on its own and left out of the figures below, as the warm-up is in training timings.
        first = float(latencies[0][1])
        timed = latencies[1:] or latencies
        secs = np.array([s for _, s in timed])
        sizes = np.array([n for n, _ in timed])
        out["policy_latency_s"] = {
            "median": float(np.median(secs)),
            "mean": float(secs.mean()),
            "p10": float(np.percentile(secs, 10)),
            "p90": float(np.percentile(secs, 90)),
            "min": float(secs.min()),
            "max": float(secs.max()),
            "calls": int(len(secs)),
            "first_call": first,
            "warmup_calls_excluded": len(latencies) - len(timed),
        }
        out["policy_latency_per_chunk_s"] = float(secs.sum() / sizes.sum())
        out["policy_latency_by_batch_size"] = {  # seconds per call, by how many chunks it produced
            str(n): {
                "median_s": float(np.median(secs[sizes == n])),
                "p10_s": float(np.percentile(secs[sizes == n], 10)),
                "p90_s": float(np.percentile(secs[sizes == n], 90)),
                "calls": int((sizes == n).sum()),
            }
            for n in sorted(set(sizes.tolist()))
        }
    return out


def throughput_total(parts: list[dict]) -> dict:
    """The whole suite's speed over the throughput records of its runs (parts of a resumed evaluation):
    every part's work counts, so an episode run again after an error counts twice."""
    wall_s = sum(p.get("wall_s") or 0.0 for p in parts)
    env_steps = sum(p.get("env_steps") or 0 for p in parts)
    return {
        "parts": len(parts),
        "wall_s": wall_s,
        "episodes": sum(p.get("episodes") or 0 for p in parts),
        "env_steps": env_steps,
        "env_steps_per_s": env_steps / wall_s if wall_s > 0 else None,
    }


def write_video(frames: list, path: Path, fps: int = 10) -> Path:
    """The agentview frames of an episode as MP4 (imageio with ffmpeg) or, failing that, an animated GIF."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        import imageio.v2 as imageio

        imageio.mimwrite(path.with_suffix(".mp4"), frames, fps=fps)
        return path.with_suffix(".mp4")
    except Exception:
        from PIL import Image

        images = [Image.fromarray(f) for f in frames]
        out = path.with_suffix(".gif")
        images[0].save(out, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)
        return out


__all__ = [
    "EpisodeSpec",
    "EvalRunner",
    "plan_episodes",
    "success_rates",
    "throughput",
    "throughput_total",
    "write_video",
    "TRIALS",
    "WAIT_STEPS",
]
