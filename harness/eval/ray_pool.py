"""Evaluation on a Ray cluster (`vlabench eval --ray ADDRESS`, `vlabench train-ladder --ray ADDRESS`): the local
pool's episodes (runner.py), each one Ray task, run on whichever node has a CPU free.

Each Ray worker process sets up the simulator as the driver did (sim.prepare with the driver's assets and
renderer), builds its own copy of the policy from the driver's recipe (name, checkpoint, options) once, and runs
episodes with workers.py's `episode_record`, asking that copy for each chunk. An episode's message, seeds and
noise are the local pool's, and so is its outcome. The tasks ask for one CPU and no GPU (Ray then hides the GPUs),
so the policy computes on the worker's CPU, one observation a call (the local pool batches the observations of
every waiting environment into one call).

A worker process or a node lost mid-episode: Ray runs the episode's task again elsewhere (up to RETRIES times);
past them the episode is recorded as an error, which `--resume` runs again. Only the driver writes: each finished
episode goes once, by its key, to the runner's `_record` (the result file, videos, the progress line).

Workers import vlabench from the driver's checkout (its folder first on PYTHONPATH in the job's runtime_env) where
that path exists on their node, else from the Python environment the node's `ray start` ran in: every node needs
the sim and ray extras installed, and vlabench installed or its checkout at the same path.
"""

from __future__ import annotations

import importlib.util
import os
import time
from pathlib import Path

from models.extras import SetupError, pip_install

from ..errors import InputError
from . import sim
from .policies import make_policy
from .runner import EpisodeSpec, EvalRunner
from .workers import EpisodeEnvironment, episode_record

RETRIES = 3  # reruns of an episode whose worker or node was lost, before it is recorded as an error


def check_ray(device: str | None) -> str:
    """--ray's checks before anything runs: Ray installed, the policy on the CPU. Returns the policy's device."""
    if importlib.util.find_spec("ray") is None:
        raise SetupError(f"--ray needs Ray: install vlabench[ray]: {pip_install('ray')}")
    if device not in (None, "cpu"):
        raise InputError("--device", None, "cpu with --ray (its tasks ask for no GPU: the policy runs on CPUs)", device)
    return "cpu"


_worker: tuple | None = None  # this Ray worker process's (setup, policy, environment), made by its first episode


def _worker_state(setup: dict) -> tuple:
    global _worker
    if _worker is None or _worker[0] != setup:
        sim.prepare(setup["assets"], setup["renderer"])  # before the policy or the episode imports LIBERO
        policy = make_policy(setup["policy"], setup["checkpoint"], **setup["kwargs"])
        _worker = (setup, policy, EpisodeEnvironment())
    return _worker


def episode_task(message: dict, setup: dict) -> dict:
    """One episode in a Ray worker: its record, as a local worker sends it, and where it ran."""
    import ray

    _, policy, environment = _worker_state(setup)
    record = episode_record(message, environment, lambda observation: policy.infer([observation])[0])
    record["worker"] = f"{ray.util.get_node_ip_address()}:{os.getpid()}"
    record["node"] = ray.get_runtime_context().get_node_id()[:12]
    return record


def _error(reason: str) -> dict:
    return {"status": "error", "success": False, "steps": None, "failure_reason": f"error: {reason}"}


class RayEvalRunner(EvalRunner):
    """EvalRunner's episodes on a Ray cluster: `setup` is what every worker needs to run them ({"assets",
    "renderer"} of the simulator, {"policy", "checkpoint", "kwargs"} of the policy); `workers` caps the episodes
    running at once (default: one per CPU of the cluster)."""

    def __init__(self, policy, sim_env: dict, address: str, setup: dict, workers: int | None = None, **kwargs):
        super().__init__(policy, sim_env, workers=workers or 1, **kwargs)
        self.address, self.setup, self.cap = address, setup, workers
        self.recorded: set[tuple] = set()

    def run(self, episodes: list[EpisodeSpec]) -> list[dict]:
        if not episodes:
            return []
        import ray

        # The driver's checkout first on the workers' path, so that they run the code it runs.
        root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        try:
            ray.init(address=self.address, log_to_driver=False, runtime_env={"env_vars": {"PYTHONPATH": path}})
        except Exception as e:  # no cluster there, or another Ray version
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise SetupError(f"--ray {self.address}: cannot join the Ray cluster ({reason})") from None
        try:
            nodes = [n for n in ray.nodes() if n.get("Alive")]
            cpus = int(ray.cluster_resources().get("CPU", 0))
            if not cpus:  # every task would wait for a CPU until its timeout
                raise SetupError(f"--ray {self.address}: the cluster has no CPUs to run episodes on")
            self.n_workers = self.cap or max(1, cpus)
            self.cluster = {"address": self.address, "nodes": len(nodes), "cpus": cpus, "retries": RETRIES}
            self.progress(f"ray: {len(nodes)} nodes, {cpus} CPUs; {self.n_workers} episodes at a time")
            return self._loop(ray, episodes)
        finally:
            ray.shutdown()

    def _loop(self, ray, episodes: list[EpisodeSpec]) -> list[dict]:
        task = ray.remote(episode_task).options(num_cpus=1, max_retries=RETRIES)
        pending, total, done = list(episodes), len(episodes), []
        running: dict = {}  # ObjectRef -> (episode, when it was submitted)
        started, handing_out = time.monotonic(), True
        while (handing_out and pending) or running:
            if handing_out and self._time_is_up(started, pending, total):
                handing_out = False
                self._stop_handing_out(pending, len(running))
            # No more in flight than the cluster runs at once: a stop (--stop-after) leaves the rest unstarted,
            # and an episode starts about when it is submitted (the timeout counts from there).
            while handing_out and pending and len(running) < self.n_workers:
                spec = pending.pop(0)
                running[task.remote({**spec.message(), "needs": self.needs}, self.setup)] = (spec, time.monotonic())
            finished, _ = ray.wait(list(running), num_returns=1, timeout=1.0)
            for ref in finished:
                self._take(running.pop(ref)[0], self._outcome(ray, ref), done, total)
            self._cancel_timed_out(ray, running, done, total)
            self._stop_if_setup_fails(done, self.n_workers)
        return done

    def _outcome(self, ray, ref) -> dict:
        """A finished task's record; an error record if it raised or its worker was lost more than RETRIES times."""
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:  # the worker's setup raised (simulator, policy): no retry helps
            cause = e.cause if e.cause is not None else e
            return _error(f"{type(cause).__name__}: {cause}".splitlines()[0][:300])
        except ray.exceptions.RayError as e:  # its worker or node lost, and the retries spent
            self.crashes += 1
            return _error(f"lost on the Ray cluster ({type(e).__name__}: {e})".splitlines()[0][:300])

    def _cancel_timed_out(self, ray, running: dict, done: list, total: int) -> None:
        """An episode running past the episode timeout: its task cancelled (its worker killed), recorded as an error."""
        now = time.monotonic()
        for ref, (spec, submitted) in list(running.items()):
            if self.episode_timeout_s and now - submitted > self.episode_timeout_s:
                ray.cancel(ref, force=True)
                del running[ref]
                self._take(spec, _error(f"episode timed out after {self.episode_timeout_s:.0f}s"), done, total)

    def _take(self, spec: EpisodeSpec, record: dict, done: list, total: int) -> None:
        """A finished episode recorded once: Ray hands back one value per task however often it ran, and the key
        check keeps an episode from ever reaching the result file twice."""
        if spec.key in self.recorded:
            return
        self.recorded.add(spec.key)
        self.policy_calls += record.get("chunks") or 0
        if record.get("wall_s") is not None:
            self.policy_s += record["wall_s"] - record["sim_s"]  # the workers' policy time
        self._record(spec, record, done, total)
