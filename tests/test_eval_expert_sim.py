"""The scripted expert in MuJoCo on the CPU, with the LIBERO assets named by VLABENCH_LIBERO_ASSETS:
physics-only episodes with privileged state, episodes that do not depend on what their environment ran
before, tasks it refuses, and the CI subset against its recorded baseline (a sabotaged expert fails it)."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
from sim_ready import needs_sim

from harness.eval import sim
from harness.eval.expert import SABOTAGE_ENV, ExpertPolicy
from harness.eval.protocol import DUMMY_ACTION, PolicyNeeds

REPO = Path(__file__).resolve().parent.parent
CI_SCENARIO = REPO / "scenarios" / "libero-expert-ci.yaml"
CI_BASELINE = REPO / "results" / "cpu" / "libero-expert-ci.json"
DRAWER_TASK = 4  # libero_spatial: the bowl in the open top drawer (its :init opens the drawer)

pytestmark = needs_sim()


@pytest.fixture(scope="module")
def setup():
    return sim.prepare(os.environ[sim.ASSETS_ENV])


@pytest.fixture(scope="module")
def spatial(setup):
    from harness.eval.env import suite_tasks

    return suite_tasks("libero_spatial")


def expert_episode(env, task, trial: int, seen: list | None = None):
    """One protocol episode of the expert; returns (outcome, final simulator state)."""
    from harness.eval.env import read_init_states
    from harness.eval.episode import run_episode
    from harness.eval.protocol import SUITE_MAX_STEPS

    policy = ExpertPolicy()

    def get_chunk(observation):
        if seen is not None:
            seen.append(observation)
        return policy.infer([observation])[0]

    outcome = run_episode(
        env,
        read_init_states(task.init_states_file)[trial],
        task.language,
        SUITE_MAX_STEPS[task.suite],
        get_chunk,
        seed=7 + trial,
        needs=PolicyNeeds.of(policy),
    )
    return outcome, env.get_sim_state().copy()


@pytest.mark.slow  # MuJoCo scenes take seconds to build
def test_expert_runs_physics_only_on_privileged_state(spatial):
    from harness.eval.env import make_env

    env = make_env(spatial[0], cameras=False)
    try:
        assert not env.env.has_offscreen_renderer and not env.env.use_camera_obs  # nothing can render
        seen = []
        outcome, _ = expert_episode(env, spatial[0], 0, seen)
    finally:
        env.close()
    assert outcome.success and 60 < outcome.steps < 160 and outcome.chunks == outcome.steps  # one action a call
    first = seen[0]
    assert "image" not in first and "wrist_image" not in first and first["state"].shape == (8,)
    state = first["sim_state"]
    assert state["step"] == 0 and seen[-1]["sim_state"]["step"] == outcome.steps - 1
    assert len({o["sim_state"]["episode"] for o in seen}) == 1
    assert state["goal"] == [["on", "akita_black_bowl_1", "plate_1"]]
    bowl = state["bodies"]["akita_black_bowl_1"]
    assert 0.10 < bowl["aabb"][3] - bowl["aabb"][0] < 0.12  # the bowl's rim, 10.8 cm across
    assert np.allclose(state["eef_mat"][:, 2], [0, 0, -1], atol=0.1)  # the hand points down at the start
    assert len(state["obstacles"]["owner"]) == len(state["obstacles"]["aabb"]) > 100


def _furniture_after_reset(env, task, trial: int, reset) -> tuple[np.ndarray, np.ndarray]:
    """The fixtures' placement (model body positions) and the state after the wait steps, for a reset
    done by `reset(env, seed)` followed by the stored initial state."""
    from harness.eval.env import read_init_states

    reset(env, 7 + trial)
    env.set_init_state(read_init_states(task.init_states_file)[trial])
    for _ in range(10):
        env.step(list(DUMMY_ACTION))
    inner = env.env
    fixtures = np.array([inner.sim.model.body_pos[inner.obj_body_id[name]] for name in sorted(inner.fixtures_dict)])
    return fixtures, env.get_sim_state().copy()


@pytest.mark.slow  # MuJoCo scenes take seconds to build
def test_reset_as_new_places_the_furniture_as_a_new_environment_does(spatial):
    """LIBERO keeps appending the drawer's open/close sampler at every reset: the same seed then places the
    cabinet elsewhere on an environment's later resets. reset_as_new undoes that."""
    from harness.eval.env import make_env, reset_as_new

    def plain(env, seed):
        env.seed(seed)
        env.reset()

    task = spatial[DRAWER_TASK]
    new, used = make_env(task, cameras=False), make_env(task, cameras=False)
    try:
        first = _furniture_after_reset(new, task, 3, reset_as_new)
        for trial in (0, 1):
            _furniture_after_reset(used, task, trial, plain)
        drifted = _furniture_after_reset(used, task, 3, plain)  # LIBERO as it is
        again = _furniture_after_reset(used, task, 3, reset_as_new)
    finally:
        new.close()
        used.close()
    assert np.abs(drifted[0] - first[0]).max() > 1e-4  # the cabinet moved: the bug this guards against
    assert np.array_equal(again[0], first[0]) and np.array_equal(again[1], first[1])  # bit for bit


@pytest.mark.slow
def test_an_episode_does_not_depend_on_what_its_environment_ran_before(spatial):
    """The same episode in a new environment and in one that ran other episodes first: same outcome, same
    step count, the same final simulator state bit for bit."""
    from harness.eval.env import make_env

    task = spatial[DRAWER_TASK]
    used = make_env(task, cameras=False)
    try:
        for trial in (0, 1):
            expert_episode(used, task, trial)
        after_others = expert_episode(used, task, 3)
    finally:
        used.close()
    new = make_env(task, cameras=False)
    try:
        alone = expert_episode(new, task, 3)
    finally:
        new.close()
    (a, state_a), (b, state_b) = after_others, alone
    assert a.success and b.success and a.steps == b.steps and np.array_equal(state_a, state_b)


def test_expert_refuses_tasks_it_does_not_cover(setup, tmp_path, capsys):
    from harness.cli import main

    out = tmp_path / "r.json"
    code = main(
        ["eval", "--suite", "libero_goal", "--tasks", "0,1", "--trials", "1", "--policy", "expert", "--out", str(out)]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "does not cover libero_goal task 0 (open the middle drawer of the cabinet)" in err
    assert "task 1" not in err.split("(it covers")[0]  # the bowl on the stove is covered


@pytest.mark.slow
def test_ci_subset_passes_its_recorded_gate_and_a_sabotaged_expert_fails_it(setup, tmp_path, monkeypatch, capsys):
    """scenarios/libero-expert-ci.yaml against results/cpu/libero-expert-ci.json: the expert as it is passes
    (its episodes are deterministic), an expert whose gripper never closes fails (exit 1)."""
    from harness.cli import main

    baseline = json.loads(CI_BASELINE.read_text())
    assert baseline["success_rate"]["libero_spatial"]["rate"] == 1.0  # what the gate holds the expert to

    out = tmp_path / "expert-ci.json"
    assert main(["eval", "--scenario", str(CI_SCENARIO), "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["workload"]["protocol"]["replan_steps"] == 1 and result["workload"]["protocol"]["images"] is False
    assert main(["gate", str(out), "--baseline", str(CI_BASELINE)]) == 0

    monkeypatch.setenv(SABOTAGE_ENV, "no-grasp")
    sabotaged = tmp_path / "expert-ci-sabotaged.json"
    main(["eval", "--scenario", str(CI_SCENARIO), "--out", str(sabotaged)])
    result = json.loads(sabotaged.read_text())
    assert (
        result["policy"]["test_sabotage"] == "no-grasp" and result["success_rate"]["libero_spatial"]["successes"] == 0
    )
    capsys.readouterr()
    assert main(["gate", str(sabotaged), "--baseline", str(CI_BASELINE)]) == 1
    assert "REGRESSION" in capsys.readouterr().out
