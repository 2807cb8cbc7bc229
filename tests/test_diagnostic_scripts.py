"""The training diagnostics in scripts/: the open-loop error table of a policy (scripts/policy_openloop.py) and the
linear fit of a dataset's actions on the state (scripts/actions_from_state.py), on arrays and files whose answers
are known."""

import importlib.util
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parent.parent


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_openloop_table_scores_exact_and_mean_predictions():
    table = load("policy_openloop").table
    rng = np.random.default_rng(0)
    demonstrated = rng.normal(size=(50, 7))
    predicted = demonstrated.copy()
    predicted[:, 3] = demonstrated[:, 3].mean()  # roll: the mean action, R^2 0
    rows = {line.split()[0]: line.split()[1:] for line in table(predicted, demonstrated).splitlines()[1:]}
    assert rows["x"][:2] == ["1.000", "0.000"]
    assert rows["roll"][0] == "0.000" and float(rows["roll"][1]) > 0.5


def test_actions_from_state_recovers_a_linear_feedback_law(tmp_path):
    script = load("actions_from_state")
    angle = np.pi / 2
    assert np.allclose(script.rotation_matrix(np.array([0.0, 0.0, angle])), [[0, -1, 0], [1, 0, 0], [0, 0, 1]])
    rng = np.random.default_rng(0)
    state = np.c_[
        rng.normal(size=(200, 3)), rng.normal(size=(200, 3)) * 0.3 + [3.0, 0.0, 0.0], rng.normal(size=(200, 2))
    ]
    law = rng.normal(size=(15, 7))
    action = script.features(state) @ law  # every action an exact linear function of the features
    action[:, 6] = rng.normal(size=200)  # the gripper: noise the state cannot explain
    folder = tmp_path / "data" / "chunk-000"
    folder.mkdir(parents=True)
    table = pa.table(
        {
            "observation.state": list(state.astype(np.float32)),
            "action": list(action.astype(np.float32)),
            "episode_index": np.repeat(np.arange(10), 20),
        }
    )
    pq.write_table(table, folder / "file-000.parquet")
    r2, fitted, scored = script.r_squared(str(tmp_path), 0.3)
    assert (fitted, scored) == (140, 60)
    assert np.all(r2[:6] > 0.999) and r2[6] < 0.2
