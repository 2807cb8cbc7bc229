"""The scripted expert on libero_object and libero_10 in MuJoCo on the CPU: one episode of each suite, and the
libero_10 tasks it refuses. Needs the sim extra and VLABENCH_LIBERO_ASSETS naming the spatial/goal archive and
the libero_object/libero_10 addition (joined by os.pathsep, as .ci/run sets it)."""

import os
from pathlib import Path

import pytest
from sim_ready import needs_sim

from harness.eval import sim
from harness.eval.expert import ExpertPolicy
from harness.eval.protocol import PolicyNeeds

pytestmark = needs_sim()


@pytest.fixture(scope="module")
def setup():
    setup = sim.prepare(os.environ[sim.ASSETS_ENV])
    if not (Path(setup.assets) / "stable_scanned_objects" / "basket").is_dir():
        pytest.skip(f"{sim.ASSETS_ENV} lacks the libero_object/libero_10 assets (libero-assets-object-10-extra)")
    return setup


def expert_episode(suite: str, index: int, trial: int):
    from harness.eval.env import make_env, read_init_states, suite_tasks
    from harness.eval.episode import run_episode
    from harness.eval.protocol import SUITE_MAX_STEPS

    task = suite_tasks(suite)[index]
    env = make_env(task, cameras=False)
    policy = ExpertPolicy()
    try:
        return run_episode(
            env,
            read_init_states(task.init_states_file)[trial],
            task.language,
            SUITE_MAX_STEPS[suite],
            lambda observation: policy.infer([observation])[0],
            seed=7 + trial,
            needs=PolicyNeeds.of(policy),
        )
    finally:
        env.close()


@pytest.mark.slow  # MuJoCo scenes take seconds to build
def test_expert_puts_the_milk_in_the_basket(setup):
    """libero_object task 7: a carton, squeezed across its gable top's upright ends, dropped into the basket."""
    outcome = expert_episode("libero_object", 7, 0)
    assert outcome.success and outcome.steps < 200


@pytest.mark.slow
def test_expert_puts_both_the_soup_and_the_cream_cheese_in_the_basket(setup):
    """libero_10 task 7: two pick and places in a row; the second crosses above the basket's handle."""
    outcome = expert_episode("libero_10", 7, 0)
    assert outcome.success and outcome.steps < 400


def test_expert_refuses_libero_10_tasks_it_does_not_cover(setup, tmp_path, capsys):
    from harness.cli import main

    out = tmp_path / "r.json"
    code = main(
        ["eval", "--suite", "libero_10", "--tasks", "2,7", "--trials", "1", "--policy", "expert", "--out", str(out)]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and not out.exists()
    assert "does not cover libero_10 task 2 (turn on the stove and put the moka pot on it)" in err
    assert "task 7" not in err.split("(it covers")[0]  # the soup and the cream cheese are covered
