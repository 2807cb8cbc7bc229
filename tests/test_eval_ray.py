"""`vlabench eval --ray`: the episodes on a real Ray cluster of this machine (a head and two worker nodes of one CPU
each, started here with `ray start`, each in a session of its own whose processes are killed by its id after the
tests, even when they fail). A Ray worker killed mid-episode, and then a whole worker node, lose nothing: their
episodes run again and every episode is recorded exactly once, with the outcome the local pool recorded for it
(the scripted expert's CI subset, results/cpu/libero-expert-ci.json). Without Ray, --ray is one line naming the
extra, exit 2."""

import contextlib
import importlib.util
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from sim_ready import sim_unready

from harness.cli import main
from harness.eval.ray_local import local_cluster, session_processes

REPO = Path(__file__).resolve().parent.parent
CI_SCENARIO = REPO / "scenarios" / "libero-expert-ci.yaml"
CI_BASELINE = REPO / "results" / "cpu" / "libero-expert-ci.json"
TASK_TITLE = b"ray::episode_task"  # a Ray worker's process title while it runs an episode (ray_pool.episode_task)

_no_ray = None if importlib.util.find_spec("ray") else "needs the ray extra (pip install -e '.[ray]')"
_no_proc = None if sys.platform == "linux" else "finds the Ray workers in /proc (Linux)"
_unready = _no_ray or _no_proc or sim_unready()
needs_cluster = pytest.mark.skipif(_unready is not None, reason=_unready or "")


def test_ray_without_the_extra_is_one_line_naming_it(monkeypatch, tmp_path, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    out = tmp_path / "eval.json"
    assert main(["eval", "--suite", "libero_spatial", "--policy", "expert", "--ray", "auto", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--ray needs Ray: install vlabench[ray]" in err and "pip install" in err
    assert not out.exists()


def test_ray_runs_the_policy_on_cpus(monkeypatch, tmp_path, capsys):
    real = importlib.util.find_spec
    as_if_installed = lambda name, *a: object() if name == "ray" else real(name, *a)  # noqa: E731
    monkeypatch.setattr(importlib.util, "find_spec", as_if_installed)
    argv = ["eval", "--suite", "libero_spatial", "--policy", "expert", "--ray", "auto", "--device", "cuda"]
    assert main([*argv, "--out", str(tmp_path / "eval.json")]) == 2
    assert "--device: expected cpu with --ray" in capsys.readouterr().err


def test_an_episode_is_recorded_once_by_its_key():
    from harness.eval.policies import NoopPolicy
    from harness.eval.ray_pool import RayEvalRunner
    from harness.eval.runner import EpisodeSpec

    recorded = []
    runner = RayEvalRunner(NoopPolicy(), {}, "auto", {}, on_episode=recorded.append, progress=lambda line: None)
    spec = EpisodeSpec("libero_spatial", {"index": 3, "name": "t"}, 1, None, 10)
    done = []
    for _ in range(2):
        runner._take(spec, {"status": "ok", "success": True, "steps": 5, "chunks": 1}, done, 1)
    assert len(recorded) == len(done) == 1 and recorded[0]["task"] == 3 and recorded[0]["trial"] == 1


@pytest.fixture(scope="module")
def cluster():
    """The address of a head and two worker nodes (one CPU each) on this machine, and their sessions' ids."""
    with local_cluster([1, 1, 1]) as (address, sessions):
        yield address, sessions


class _Killer(threading.Thread):
    """Mid-run, SIGKILLs a worker of the head node while it runs an episode, then every process of the last worker
    node (its raylet and workers: the node lost) while one of its workers runs an episode."""

    def __init__(self, sessions: list[int]):
        super().__init__(daemon=True)
        self.sessions, self.killed, self.stop = sessions, [], threading.Event()

    def run(self):
        for session, whole_node in ((self.sessions[0], False), (self.sessions[-1], True)):
            pid = self._running_episode(session)
            if pid is None:
                return
            time.sleep(1.0)  # well into its episode (a worker's first builds the scene meanwhile)
            for victim in session_processes([session]) if whole_node else [pid]:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(victim, signal.SIGKILL)
            self.killed.append("node" if whole_node else "worker")

    def _running_episode(self, session: int) -> int | None:
        """A worker of the session's node running an episode, as soon as there is one (None: stopped first)."""
        while not self.stop.wait(0.2):
            for pid in session_processes([session]):
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(TASK_TITLE):
                        return pid
        return None


def test_train_ladder_evaluates_every_rung_on_the_cluster(tmp_path, monkeypatch, capsys):
    """train-ladder --ray: checked before any rung trains (Ray missing: one line, exit 2), then each rung's
    evaluation gets the address, the CPU device and the cluster's CPUs as its workers."""
    import argparse

    from harness.commands import train_ladder as ladder_command
    from harness.eval import main as eval_main
    from harness.train import ladder_run

    argv = ["train-ladder", str(REPO / "scenarios" / "pi05-libero-train.yaml"), "--target", "cpu", "--steps", "4"]
    argv += ["--ray", "10.0.0.7:6379", "--out", str(tmp_path / "tl")]
    real = importlib.util.find_spec
    with monkeypatch.context() as patch:
        patch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
        assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    if sim_unready():  # the sim extra's line comes first
        pytest.skip(sim_unready())
    assert len(err.splitlines()) == 1 and "install vlabench[ray]" in err and not (tmp_path / "tl").exists()

    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object() if name == "ray" else real(name, *a))
    monkeypatch.setattr(ladder_command, "_dataset", lambda *_: str(tmp_path / "ds"))  # not made here
    parser = argparse.ArgumentParser()
    ladder_command.add_train_ladder_arguments(parser)
    plan = ladder_command.plan_from_args(parser.parse_args(argv[1:]))
    configs = []
    monkeypatch.setattr(eval_main, "run_eval", lambda cfg, command, progress=None: configs.append(cfg))
    suite = plan.eval_settings["suites"][0]
    ladder_run.evaluate_rung(plan, "community", suite, str(tmp_path / "checkpoint"), ["vlabench"])
    assert (configs[0].ray, configs[0].device, configs[0].workers) == ("10.0.0.7:6379", "cpu", None)


@pytest.mark.slow  # the workers import torch and build the model and a scene each
@needs_cluster
def test_a_model_familys_policy_is_built_in_every_worker(cluster, tmp_path):
    """A learned policy's recipe (tiny Pi0.5, random weights from the seed) builds it in the Ray workers, whose
    episodes render the cameras it reads."""
    address, _ = cluster
    out = tmp_path / "eval.json"
    argv = ["eval", "--suite", "libero_goal", "--tasks", "1", "--trials", "2", "--policy", "pi05", "--checkpoint"]
    argv += ["random", "--model-size", "tiny", "--tokenizer", "bytes", "--max-steps", "5", "--ray", address]
    assert main([*argv, "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["policy"]["model_size"] == "tiny" and result["policy"]["device"] == "cpu"
    assert [(e["trial"], e["status"], e["steps"], e["chunks"]) for e in sorted(result["episodes"], key=str)] == [
        (0, "ok", 5, 1),
        (1, "ok", 5, 1),
    ]
    assert result["throughput"]["env_steps"] == 2 * (10 + 5)


@pytest.mark.slow  # three Ray nodes on two cores, MuJoCo scenes built in each worker: about a minute
@needs_cluster
def test_a_worker_and_a_node_lost_mid_run_lose_no_episode_and_record_none_twice(cluster, tmp_path, capsys):
    address, sessions = cluster
    out = tmp_path / "eval.json"
    argv = ["eval", "--scenario", str(CI_SCENARIO), "--ray", address, "--episode-timeout", "300", "--out", str(out)]
    killer = _Killer(sessions)
    killer.start()
    try:
        assert main(argv) == 0
    finally:
        killer.stop.set()
        killer.join()
    assert killer.killed == ["worker", "node"]  # both lost mid-episode
    result = json.loads(out.read_text())
    keys = [(e["suite"], e["task"], e["trial"]) for e in result["episodes"]]
    baseline = {(e["suite"], e["task"], e["trial"]): e for e in json.loads(CI_BASELINE.read_text())["episodes"]}
    assert sorted(keys) == sorted(baseline) and len(set(keys)) == len(keys) == 6  # each episode exactly once
    for episode in result["episodes"]:  # the local pool's outcomes: same seeds, same steps
        expected = baseline[(episode["suite"], episode["task"], episode["trial"])]
        assert episode["status"] == "ok" and (episode["success"], episode["steps"]) == (True, expected["steps"])
    assert result["success_rate"]["libero_spatial"]["successes"] == 6
    assert result["success_rate"]["libero_spatial"]["trials"] == 6
    assert len({e["node"] for e in result["episodes"]}) >= 2  # spread over the nodes
    speed = result["throughput"]
    assert speed["ray"]["nodes"] == 3 and speed["workers"] == 3 and speed["worker_restarts"] == 0  # none given up
    assert "ray: 3 nodes, 3 CPUs; 3 episodes at a time" in capsys.readouterr().out

    assert main([*argv, "--resume"]) == 0  # resumable: nothing left to run, the file kept whole
    assert "resume: 6 finished episodes kept, 0 to run" in capsys.readouterr().out
    assert [(e["suite"], e["task"], e["trial"]) for e in json.loads(out.read_text())["episodes"]] == keys
