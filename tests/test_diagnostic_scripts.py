"""The training diagnostics in scripts/: the open-loop error table of a policy (scripts/policy_openloop.py) and the
linear fit of a dataset's actions on the state (scripts/actions_from_state.py), on arrays and files whose answers
are known; the steps per rung of the H200 comparison (scripts/train_compare_steps.py)."""

import importlib.util
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

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


def test_compare_steps_come_from_the_committed_speeds_and_the_time_left(monkeypatch, capsys):
    """scripts/train_compare_steps.py (scripts/h200-train-ladder.sh PARTS=compare): a rung's committed training speed,
    else its synthetic speed scaled by fused-adamw's real/synthetic ratio; the steps that fit before the deadline
    after the rungs' fixed costs, capped; a deadline too near is refused."""
    import json

    script = load("train_compare_steps")
    monkeypatch.chdir(ROOT)
    trained = json.loads((script.TRAINED / "community-train.json").read_text())["train"]["samples_per_s"]
    assert script.samples_per_s("community") == trained
    synthetic = {r["name"]: r["samples_per_s"] for r in json.loads(script.SYNTHETIC.read_text())["rungs"]}
    fused = json.loads((script.TRAINED / "fused-adamw-train.json").read_text())["train"]["samples_per_s"]
    graph = script.samples_per_s("whole-step-graph")
    assert abs(graph - synthetic["whole-step-graph"] * fused / synthetic["fused-adamw"]) < 1e-6
    monkeypatch.setattr(script.time, "time", lambda: 1000.0)
    rungs = ["community", "whole-step-graph"]
    evals = 2 * 10 * script.TASKS * script.EVAL_S_PER_TRIAL
    fixed = script.OVERHEAD_S["community"] + script.OVERHEAD_OTHER_S + evals + script.MARGIN_S
    left = 900.0
    per_step = 256 / trained + 256 / graph  # the committed runs' batch
    monkeypatch.setattr("sys.argv", ["x", str(1000.0 + fixed + left), "10", "99999", *rungs])
    script.main()
    assert int(capsys.readouterr().out) == int(script.SLOWDOWN * left / per_step)
    monkeypatch.setattr("sys.argv", ["x", str(1000.0 + fixed + left), "10", "500", *rungs])
    script.main()
    assert int(capsys.readouterr().out) == 500  # capped
    monkeypatch.setattr("sys.argv", ["x", str(1000.0 + fixed + 10), "10", "99999", *rungs])
    with pytest.raises(SystemExit, match="steps fit before the deadline"):
        script.main()
