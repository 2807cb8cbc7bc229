"""LIBERO in MuJoCo on the CPU with the shared test assets (libero_spatial and libero_goal): every task builds,
loads a stored initial state and steps; success detection is the environment's; the parallel runner runs
the tiny Pi0.5 policy from a checkpoint file, counts a success, survives a crashed worker and resumes."""

import json
import multiprocessing
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.data.errors import DatasetError
from harness.eval import sim
from models.extras import pip_install
from models.policy import REPLAN_STEPS, EvalPolicy

REPO = Path(__file__).resolve().parent.parent
SHARED_ASSETS = REPO.parent / "shared" / "libero-assets" / "libero-assets-spatial-goal.tar.xz"
SUITES = ("libero_spatial", "libero_goal")


def _assets() -> str | None:
    return os.environ.get(sim.ASSETS_ENV) or (str(SHARED_ASSETS) if SHARED_ASSETS.exists() else None)


_missing = sim.missing_packages()
pytestmark = [
    pytest.mark.slow,  # MuJoCo scenes take seconds each to build and step on a CPU
    pytest.mark.skipif(
        bool(_missing),
        reason=f"LIBERO sim tests need the sim extra ({pip_install('sim')}); missing: {', '.join(_missing)}",
    ),
    pytest.mark.skipif(
        _assets() is None,
        reason=f"LIBERO sim tests need assets: set {sim.ASSETS_ENV} to a LIBERO assets folder or archive",
    ),
]


@pytest.fixture(scope="module")
def setup():
    return sim.prepare(_assets())


@pytest.fixture(scope="module")
def tasks(setup):
    from harness.eval.env import suite_tasks

    return {suite: suite_tasks(suite) for suite in SUITES}


def open_drawer(env) -> np.ndarray:
    """Drive libero_goal task 0 ("open the middle drawer of the cabinet") into its goal: the drawer joint
    set inside the cabinet's open range. Returns the simulator state."""
    inner = env.env
    ((predicate, region),) = inner.parsed_problem["goal_state"]
    assert predicate == "open"
    parent = inner.get_object(inner.object_states_dict[region].parent_name)
    low, high = parent.object_properties["articulation"]["default_open_ranges"]
    for joint in inner.object_sites_dict[region].joints:
        inner.sim.data.qpos[inner.sim.model.get_joint_qpos_addr(joint)] = (low + high) / 2
    inner.sim.forward()
    return env.get_sim_state()


def test_prepare_links_assets_and_writes_libero_config(setup):
    link = sim.libero_package_dir() / "assets"
    assert link.is_symlink() and Path(os.readlink(link)) == Path(setup.assets)
    assert (Path(setup.libero_config) / "config.yaml").read_text().count("init_files") == 1
    assert sim.prepare(_assets()) == setup  # idempotent: same unpacked folder, same link
    with pytest.raises(sim.SimError, match="no such file or folder"):
        sim.prepare("/nonexistent/libero-assets.tar.xz")


def build_reset_and_step(suite: str, index: int) -> str | None:
    """One task built, reset to its first stored state and stepped once, as an evaluation episode starts; what
    went wrong, or None."""
    from harness.eval.env import make_env, read_init_states, suite_tasks
    from harness.eval.protocol import DUMMY_ACTION, policy_observation

    sim.prepare(_assets())  # this process's LIBERO config (idempotent)
    task = suite_tasks(suite)[index]
    states = read_init_states(task.init_states_file)
    if states.shape[0] != 50:
        return f"{states.shape[0]} stored initial states, expected 50"
    env = make_env(task)
    try:
        env.reset()
        env.set_init_state(states[0])
        if not np.allclose(env.get_sim_state(), states[0]):
            return "the simulator's state after set_init_state is not the stored one"
        obs, _, done, _ = env.step(list(DUMMY_ACTION))
        seen = policy_observation(obs, task.language)
        if not (seen["image"].shape == seen["wrist_image"].shape == (224, 224, 3) and seen["image"].std() > 0):
            return f"images {seen['image'].shape} and {seen['wrist_image'].shape} (std {seen['image'].std():.3g})"
        if seen["state"].shape != (8,) or done:
            return f"state {seen['state'].shape}, done {done} after one dummy action"
    finally:
        env.close()
    return None


def test_every_task_builds_resets_to_a_stored_state_and_steps(setup):
    # A scene takes ~2 s to build and ~3 s to reset (a hard reset builds it again) on one CPU core: the 20 tasks
    # are spread over a process per core (at most 2), each a fresh process as an evaluation's env worker is.
    cases = [(s, i) for s in SUITES for i in range(10)]
    workers = max(1, min(2, len(os.sched_getaffinity(0))))
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        problems = dict(zip(cases, pool.map(build_reset_and_step, *zip(*cases))))
    assert not {case: why for case, why in problems.items() if why}


def test_success_is_the_environments_done_flag(tasks):
    from harness.eval.env import make_env, read_init_states
    from harness.eval.protocol import DUMMY_ACTION

    task = tasks["libero_goal"][0]
    env = make_env(task)
    try:
        env.reset()
        env.set_init_state(read_init_states(task.init_states_file)[0])
        assert not env.check_success()
        open_drawer(env)
        assert env.check_success()
        _, _, done, _ = env.step(list(DUMMY_ACTION))
        assert done
    finally:
        env.close()


def test_skipped_renders_change_no_image_and_no_state(tasks):
    """Cameras render only when a re-plan reads them; the policy must see the very same images."""
    from harness.eval.env import make_env, read_init_states
    from harness.eval.episode import run_episode
    from harness.eval.protocol import PolicyNeeds

    task = tasks["libero_spatial"][0]
    init = read_init_states(task.init_states_file)[1]
    env = make_env(task)
    openpi = PolicyNeeds(images=True, privileged=False, replan_steps=REPLAN_STEPS)  # a learned policy's
    runs = []
    try:
        for every_step in (True, False):
            rng, seen = np.random.default_rng(0), []

            def get_chunk(obs, seen=seen, rng=rng):
                seen.append((obs["image"], obs["wrist_image"], obs["state"]))
                return rng.uniform(-1, 1, size=(8, 7))

            out = run_episode(env, init, task.language, 12, get_chunk, openpi, render_every_step=every_step, seed=8)
            runs.append((seen, env.get_sim_state(), out.chunks))
    finally:
        env.close()
    (a, state_a, chunks_a), (b, state_b, chunks_b) = runs
    assert chunks_a == chunks_b == 3 and np.array_equal(state_a, state_b)
    for x, y in zip(a, b):
        assert all(np.array_equal(u, v) for u, v in zip(x, y))


def test_demonstration_noise_is_executed_and_the_policys_actions_recorded(tasks):
    """DART: with action noise the arm executes perturbed actions (another end state, the same for the same seed),
    while the demonstration records the policy's own actions."""
    from harness.eval.env import make_env, read_init_states
    from harness.eval.episode import run_episode
    from harness.eval.protocol import PolicyNeeds

    task = tasks["libero_spatial"][0]
    init = read_init_states(task.init_states_file)[1]
    env = make_env(task)
    needs = PolicyNeeds(images=False, privileged=False, replan_steps=1)
    chunk = np.array([[0.3, -0.2, 0.1, 0.0, 0.05, 0.0, -1.0]])
    runs = []
    try:
        for noise in (0.0, 0.3, 0.3):
            out = run_episode(
                env, init, task.language, 8, lambda obs: chunk, needs, seed=8, demonstration=True, action_noise=noise
            )
            runs.append((out.demo, env.get_sim_state()))
    finally:
        env.close()
    (clean, clean_end), (noisy, noisy_end), (again, again_end) = runs
    for demo in (clean, noisy):
        assert np.array_equal(demo["action"], np.repeat(chunk.astype(np.float32), 8, axis=0))  # the policy's own
    assert not np.allclose(clean_end, noisy_end)  # the noise was executed...
    assert np.array_equal(noisy_end, again_end)  # ...seeded by the episode
    assert not np.array_equal(clean["state"], noisy["state"])


def test_action_noise_takes_the_positions_and_the_rotations_deviations_apart():
    """`--action-noise P,R`: deviation P on the three position values, R on the three rotation values, none on the
    gripper; one value is the same draw as the pair (P, P), so a dataset made with it is unchanged."""
    from harness.eval.episode import _perturbed, arm_noise_deviations

    action = np.array([0.1, -0.1, 0.2, 0.01, -0.02, 0.0, -1.0])
    assert arm_noise_deviations(0.2).tolist() == [0.2] * 6
    position_only = _perturbed(action, np.random.default_rng(3), arm_noise_deviations((0.3, 0.0)))
    assert not np.allclose(position_only[:3], action[:3])
    assert np.array_equal(position_only[3:], action[3:])
    rotation_only = _perturbed(action, np.random.default_rng(3), arm_noise_deviations((0.0, 0.3)))
    assert np.array_equal(rotation_only[:3], action[:3]) and not np.allclose(rotation_only[3:6], action[3:6])
    assert rotation_only[6] == -1.0
    one, pair = (_perturbed(action, np.random.default_rng(5), arm_noise_deviations(n)) for n in (0.2, (0.2, 0.2)))
    assert np.array_equal(one, pair)


def _tiny_lerobot_checkpoint(folder: Path) -> Path:
    from safetensors.torch import save_file

    from models.pi05 import TINY, Pi05Model, init_weights
    from models.pi05.checkpoint import save_checkpoint

    model = Pi05Model(TINY)
    init_weights(model, seed=1)
    save_checkpoint(
        model,
        folder,
        "lerobot",
        config={"type": "pi05", "chunk_size": 10, "max_state_dim": 32, "tokenizer_max_length": 48},
    )
    save_file(
        {
            "observation.state.q01": torch.full((8,), -1.0),
            "observation.state.q99": torch.full((8,), 1.0),
            "action.q01": torch.full((7,), -0.1),
            "action.q99": torch.full((7,), 0.1),
        },
        str(folder / "normalizer.safetensors"),
    )
    (folder / "policy_preprocessor.json").write_text(
        json.dumps(
            {
                "steps": [
                    {
                        "registry_name": "normalizer_processor",
                        "state_file": "normalizer.safetensors",
                        "config": {
                            "eps": 1e-8,
                            "norm_map": {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"},
                        },
                    }
                ]
            }
        )
    )
    return folder


def test_parallel_runner_with_tiny_pi05_counts_a_success_and_resumes(setup, tasks, tmp_path):
    from harness.eval.env import make_env, read_init_states
    from harness.eval.main import EvalConfig, run_eval
    from harness.results import load_result

    goal = tasks["libero_goal"][0]
    env = make_env(goal)
    try:
        env.reset()
        env.set_init_state(read_init_states(goal.init_states_file)[0])
        goal_state = open_drawer(env)  # a stored-state-like vector whose drawer is already open
    finally:
        env.close()
    ckpt = _tiny_lerobot_checkpoint(tmp_path / "ckpt")
    out = tmp_path / "eval.json"
    cfg = EvalConfig(
        suites=["libero_goal"],
        tasks=[0, 1],
        trials=1,
        policy="pi05",
        checkpoint=str(ckpt),
        workers=2,
        out=out,
        assets=_assets(),
        device="cpu",
        max_steps=8,
        init_states={("libero_goal", 0): goal_state[None]},
        videos={(1, 0)},
    )
    lines = []
    result = run_eval(cfg, ["test"], progress=lines.append)
    episodes = {e["task"]: e for e in result["episodes"]}
    assert episodes[0]["status"] == "ok" and episodes[0]["success"] and episodes[0]["steps"] == 1
    assert episodes[1]["status"] == "ok" and not episodes[1]["success"] and episodes[1]["steps"] == 8
    assert episodes[1]["failure_reason"] == "timeout" and episodes[1]["chunks"] == 2  # re-plans every 5 steps
    assert Path(episodes[1]["video"]).exists()
    rates = result["success_rate"]
    assert rates["libero_goal"]["successes"] == 1 and rates["libero_goal"]["trials"] == 2
    assert rates["libero_goal/0"]["rate"] == 1.0 and rates["libero_goal/1"]["rate"] == 0.0
    assert result["policy"]["layout"] == "lerobot" and result["policy"]["model_size"] == "tiny"
    assert result["throughput"]["policy_calls"] >= 2 and result["throughput"]["env_steps"] == 10 + 1 + 10 + 8
    assert any("success 1/" in line for line in lines)
    loaded = load_result(out)  # the result contract: gates and tables read this file
    assert loaded["kind"] == "eval" and loaded["episodes"] == result["episodes"]

    again = run_eval(EvalConfig(**{**cfg.__dict__, "resume": True}), ["test"], progress=lines.append)
    assert again["_new_episodes"] == 0 and again["episodes"] == result["episodes"]
    assert again["provenance_earlier"]


class _KillOneWorker(EvalPolicy):
    """A no-op policy that kills one worker process (SIGKILL) when first asked for actions."""

    name = "noop"

    def __init__(self):
        from harness.eval.policies import NoopPolicy

        self.inner, self.runner, self.killed = NoopPolicy(), None, None

    def infer(self, observations):
        if self.killed is None:
            slot = next(s for s in self.runner.slots if s.waiting is not None)  # one asking for this chunk
            self.killed = slot.episode.key
            os.kill(slot.process.pid, signal.SIGKILL)
        return self.inner.infer(observations)

    def describe(self):
        return {"name": self.name}


def test_episodes_start_at_the_first_trial_for_evaluations_and_demonstrations(setup, tasks):
    """`vlabench eval --first-trial K` and `make-dataset --first-trial K` plan from each task's stored state K on:
    an evaluation of the demonstrations' own states asks whether a policy fails where it was shown the way."""
    from harness.eval.demonstrations import plan_demonstrations
    from harness.eval.env import read_init_states
    from harness.eval.expert import ExpertPolicy
    from harness.eval.runner import plan_episodes

    episodes = plan_episodes(["libero_spatial"], [0, 3], 2, first_trial=20)
    assert [(e.task["index"], e.trial) for e in episodes] == [(0, 20), (0, 21), (3, 20), (3, 21)]
    stored = read_init_states(tasks["libero_spatial"][3].init_states_file)
    np.testing.assert_array_equal(episodes[3].init_state, stored[21])
    with pytest.raises(ValueError, match="from state 49: libero_spatial task 0 has 50 stored initial states"):
        plan_episodes(["libero_spatial"], [0], 2, first_trial=49)
    expert = ExpertPolicy()
    demos = plan_demonstrations(["libero_spatial"], None, 12, 7, 20, expert)
    # state 20 of every task, then state 21 of the first two: never one of an evaluation's 20 states
    assert [(e.trial, e.task["index"]) for e in demos] == [(20, t) for t in range(10)] + [(21, 0), (21, 1)]
    assert all(e.demonstration for e in demos)
    # several suites: each suite's tasks that the expert covers (libero_goal's 1, 4, 6 and 8), the suites taking
    # turns within a trial, so that any first episodes cover the suites, then the tasks, evenly
    demos = plan_demonstrations(["libero_spatial", "libero_goal"], None, 16, 7, 20, expert)
    order = [(e.suite[7], e.task["index"], e.trial) for e in demos]
    assert order[:8] == [("s", 0, 20), ("g", 1, 20), ("s", 1, 20), ("g", 4, 20), ("s", 2, 20), ("g", 6, 20),
                         ("s", 3, 20), ("g", 8, 20)]  # fmt: skip
    assert order[8:14] == [("s", k, 20) for k in range(4, 10)] and order[14:] == [("s", 0, 21), ("g", 1, 21)]
    demos = plan_demonstrations(["libero_spatial", "libero_goal"], [4, 1], 4, 7, 20, expert)  # each suite's
    assert [(e.suite[7], e.task["index"]) for e in demos] == [("s", 1), ("g", 1), ("s", 4), ("g", 4)]
    with pytest.raises(DatasetError, match="--suite: expected suites with tasks that --policy expert covers"):
        plan_demonstrations(["libero_90"], None, 4, 7, 20, expert)


def test_demonstrations_reach_the_writer_in_the_plans_order():
    """Workers finish episodes in any order; the writer gets the successful ones in the plan's order (so a dataset
    made again from the same plan holds the same bytes), a failed one leaves no gap, and what waits behind
    episodes that never started is handed on at the end, in order."""
    from harness.eval.demonstrations import _InPlanOrder
    from harness.eval.runner import EpisodeSpec

    planned = [EpisodeSpec("libero_spatial", {"index": t}, 20, np.zeros(1), 10) for t in range(6)]
    written = []
    order = _InPlanOrder(planned, written.append)
    key = lambda t: ("libero_spatial", t, 20)  # noqa: E731
    order.finished(key(2), "ep2")
    order.finished(key(1), None)  # failed: left out
    assert written == []  # episode 0 still runs
    order.finished(key(0), "ep0")
    assert written == ["ep0", "ep2"]
    order.finished(key(5), "ep5")  # episodes 3 and 4 never start (a stop), so 5 waits until the end
    assert written == ["ep0", "ep2"]
    order.flush()
    assert written == ["ep0", "ep2", "ep5"]


def test_a_crashed_worker_costs_its_episode_and_is_replaced(setup, tasks):
    from harness.eval.runner import EvalRunner, plan_episodes

    episodes = plan_episodes(["libero_goal"], [1], 3, max_steps=5)
    policy = _KillOneWorker()
    runner = EvalRunner(policy, setup.env, workers=2, progress=lambda line: None)
    policy.runner = runner
    records = runner.run(episodes)
    assert sorted(r["trial"] for r in records) == [0, 1, 2]
    errors = [r for r in records if r["status"] == "error"]
    assert len(errors) == 1 and "worker process died" in errors[0]["failure_reason"]
    assert (errors[0]["suite"], errors[0]["task"], errors[0]["trial"]) == policy.killed
    assert runner.crashes == 1
    assert all(r["status"] == "ok" and r["steps"] == 5 for r in records if r not in errors)
