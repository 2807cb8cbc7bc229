"""One environment worker process: runs episodes of the protocol and asks the runner for action chunks.

Messages (over a multiprocessing Pipe):
  runner -> worker: ("episode", spec) | ("chunk", actions) | ("stop", None)
  worker -> runner: ("ready", pid) | ("obs", observation) | ("done", record)
A worker keeps the environment of its last task, since building one takes seconds; an episode that raises
is reported as an error and its environment is rebuilt for the next episode. The episode's `needs` (what the
policy declared: images, privileged state, actions per chunk) decide whether the environment has cameras.
`episode_record` and `EpisodeEnvironment` also run the episodes of a Ray cluster's workers (ray_pool.py), which
ask their own copy of the policy for the chunks instead of the runner.

LIBERO, robosuite and MuJoCo are imported only inside the functions below, after `worker_main` has set the
simulator's environment variables.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable

import numpy as np

from .env import TaskInfo, make_env
from .episode import run_episode
from .protocol import WAIT_STEPS, PolicyNeeds


class _ChunkRequests:
    """`get_chunk` for one episode: hands each observation to `ask` (the runner over the pipe, or a policy in this
    process) for its action chunk, counting the chunks and the seconds spent waiting (not simulating)."""

    def __init__(self, ask: Callable[[dict], np.ndarray], noise_seed: int):
        self.ask, self.noise_seed = ask, noise_seed
        self.count = 0
        self.waited_s = 0.0

    def __call__(self, observation: dict) -> np.ndarray:
        # The noise of each chunk depends only on the episode and the chunk's index.
        observation["noise_seed"] = self.noise_seed * 1000 + self.count
        self.count += 1
        t0 = time.perf_counter()
        actions = self.ask(observation)
        self.waited_s += time.perf_counter() - t0
        return actions


def _ask_runner(conn) -> Callable[[dict], np.ndarray]:
    """Chunks from the runner: the observation goes over the pipe, its chunk comes back."""

    def ask(observation: dict) -> np.ndarray:
        conn.send(("obs", observation))
        reply_kind, actions = conn.recv()
        if reply_kind != "chunk":
            raise RuntimeError(f"expected an action chunk, got {reply_kind!r}")
        return actions

    return ask


class EpisodeEnvironment:
    """The worker's environment, kept for the next episode of the same task with the same cameras."""

    def __init__(self):
        self.env, self.key = None, None

    def get(self, task, cameras: bool, seed: int):
        if self.env is None or self.key != (task.bddl_file, cameras):
            self.close()
            self.env = make_env(task, seed=seed, cameras=cameras)
            self.key = (task.bddl_file, cameras)
        return self.env

    def forget(self) -> None:
        """After an episode raised: build a fresh one next time (the broken one is not closed)."""
        self.env, self.key = None, None

    def close(self) -> None:
        env, self.env, self.key = self.env, None, None
        if env is not None:
            env.close()


def _run_episode(spec: dict, environment: EpisodeEnvironment, chunks: _ChunkRequests) -> dict:
    """One episode from its message; returns its record (raises if the episode does)."""
    task = TaskInfo(**spec["task"])
    needs = PolicyNeeds(**spec["needs"])
    # recorded videos and demonstrations need the cameras, whatever the policy needs
    cameras = needs.images or spec.get("record", False) or spec.get("demonstration", False)
    outcome = run_episode(
        environment.get(task, cameras, spec["seed"]),
        spec["init_state"],
        task.language,
        spec["max_steps"],
        chunks,
        needs,
        record=spec.get("record", False),
        seed=spec["episode_seed"],
        render_every_step=spec.get("render_every_step", False),
        demonstration=spec.get("demonstration", False),
        action_noise=spec.get("action_noise", 0.0),
    )
    return {
        "status": "ok",
        "success": outcome.success,
        "steps": outcome.steps,
        "failure_reason": outcome.reason,
        "chunks": outcome.chunks,
        "frames": outcome.frames,
        "demo": outcome.demo,
    }


def episode_record(spec: dict, environment: EpisodeEnvironment, ask: Callable[[dict], np.ndarray]) -> dict:
    """Runs one episode (its message: EpisodeSpec.message() and the policy's `needs`), its chunks from `ask`, and
    returns its record, with its times; an episode that raises is recorded as an error and its environment is
    rebuilt for the next one."""
    started = time.perf_counter()
    chunks = _ChunkRequests(ask, spec["noise_seed"])
    try:
        record = _run_episode(spec, environment, chunks)
    except Exception as exc:  # the episode is lost, the worker goes on with a fresh environment
        record = {
            "status": "error",
            "success": False,
            "steps": None,
            "chunks": chunks.count,
            "failure_reason": f"error: {type(exc).__name__}: {exc}".splitlines()[0][:300],
            "traceback": traceback.format_exc()[-3000:],
        }
        environment.forget()
    wall = time.perf_counter() - started
    steps = (record["steps"] or 0) + WAIT_STEPS
    record.update(wall_s=wall, sim_s=wall - chunks.waited_s, env_steps=steps if record["status"] == "ok" else None)
    return record


def worker_main(conn, sim_env: dict) -> None:
    os.environ.update(sim_env)  # before MuJoCo/LIBERO are imported in this process
    sys.stdout = open(os.devnull, "w")  # LIBERO and robosuite chatter; errors come back as messages
    environment = EpisodeEnvironment()
    conn.send(("ready", os.getpid()))
    try:
        while True:
            kind, spec = conn.recv()
            if kind == "stop":
                break
            conn.send(("done", episode_record(spec, environment, _ask_runner(conn))))
    except (EOFError, BrokenPipeError, KeyboardInterrupt):
        pass  # the runner went away or was interrupted
    finally:
        try:
            environment.close()
        except Exception:
            pass
        conn.close()
        # Skip interpreter teardown: GL contexts destroyed after their library print spurious errors.
        os._exit(0)
