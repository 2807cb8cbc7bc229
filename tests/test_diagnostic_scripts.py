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
    """scripts/train_compare_steps.py (the train-ladder job's PARTS=compare): a rung's committed training speed,
    else its synthetic speed scaled by fused-adamw's real/synthetic ratio; the steps that fit before the deadline
    after the rungs' fixed costs, capped; a deadline too near is refused."""
    import json

    script = load("train_compare_steps")
    monkeypatch.chdir(ROOT)
    newest = script.TRAINED[0]
    trained = json.loads((newest / "community-train.json").read_text())["train"]["samples_per_s"]
    assert script.samples_per_s("community") == trained  # the newest comparison's
    graph = script.samples_per_s("whole-step-graph")
    assert graph == json.loads((newest / "whole-step-graph-train.json").read_text())["train"]["samples_per_s"]
    # a rung no comparison trained: its synthetic speed, scaled by fused-adamw's trained/synthetic ratio
    synthetic = {r["name"]: r["samples_per_s"] for r in json.loads(script.SYNTHETIC.read_text())["rungs"]}
    assert not (newest / "fused-adamw-train.json").exists()
    fused = json.loads((script.TRAINED[1] / "fused-adamw-train.json").read_text())["train"]["samples_per_s"]
    assert script.samples_per_s("fused-adamw") == fused
    monkeypatch.setattr(script, "TRAINED", script.TRAINED[1:])  # the older comparison, without whole-step-graph
    estimated = script.samples_per_s("whole-step-graph")
    assert abs(estimated - synthetic["whole-step-graph"] * fused / synthetic["fused-adamw"]) < 1e-6
    monkeypatch.undo()
    monkeypatch.chdir(ROOT)
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


def test_the_device_job_trains_the_sabotage_like_its_baseline_and_a_compare_with_its_seed(tmp_path):
    """scripts/gpu-parts/train-ladder.sh (gpu-session.sh's train-ladder part) with `python3 -m harness` recorded
    instead of run: the sabotaged rung trains at the baseline's steps, trials and seed; a compare with SEED goes to
    its own folder; an assets archive that is already where the job keeps it (a second job on the same machine) is
    taken, a missing one is said in steps.log; the goal and a compare in one job train their own steps."""
    import json
    import os
    import shutil
    import subprocess
    import sys

    work, bin_dir, tree, logs = tmp_path / "work", tmp_path / "bin", tmp_path / "tree", tmp_path / "logs"
    (work / "scenarios").mkdir(parents=True)
    shutil.copy(ROOT / "scenarios" / "pi05-libero-train.yaml", work / "scenarios")
    baseline = work / "baseline.json"
    baseline.write_text(json.dumps({"workload": {"seed": 3}, "train_ladder": {"steps": 2554, "eval": {"trials": 10}}}))
    calls = tmp_path / "calls.txt"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(
        "#!/bin/bash\n"
        'if [ "$1" = -m ] && [ "$2" = harness ]; then\n'
        '  echo "${VLABENCH_TEST_TRAIN_SABOTAGE:-clean} $*" >> "$CALLS"; exit 0\n'
        "fi\n"
        f'exec {sys.executable} "$@"\n'
    )
    (bin_dir / "python3").chmod(0o755)
    assets = tmp_path / "assets.tar.xz"
    assets.write_bytes(b"x")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(calls), "JOB_TREE": str(tree),
           "LOCAL_ASSETS": str(assets), "ASSETS": str(assets), "BASELINE": str(baseline), "SEED": "1",
           "PARTS": "sabotage,compare", "STEPS": "300", "COMPARE_RUNGS": "community,fp8"}  # fmt: skip
    script = ROOT / "scripts" / "gpu-parts" / "train-ladder.sh"
    run = subprocess.run(["bash", str(script), str(logs)], cwd=work, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr
    demonstrations, sabotage, gate, compare = calls.read_text().splitlines()
    assert "make-dataset --source libero" in demonstrations and f"--assets {assets} " in demonstrations
    assert sabotage.startswith("freeze-time -m harness train-ladder scenarios/pi05-libero-train.yaml")
    assert "--seed 3 --rungs whole-step-graph --steps 2554 --trials 10 --out runs/tl-sabotage" in sabotage
    assert compare.startswith("clean ") and "--seed 1 --rungs community,fp8 --steps 300" in compare
    assert "--out runs/tl-compare-seed1" in compare
    assert (
        gate
        == f"clean -m harness gate runs/tl-sabotage/train-ladder.json --baseline {baseline} --rungs whole-step-graph"
    )
    assert (logs / "steps.log").read_text().rstrip().endswith("done")
    # the goal and a compare in one job, each with its own steps (the goal's GOAL_STEPS)
    calls.unlink()
    env.update(PARTS="goal,compare", GOAL_STEPS="8000", JOB_TREE=str(tmp_path / "tree2"))
    run = subprocess.run(["bash", str(script), str(tmp_path / "logs1")], cwd=work, env=env, capture_output=True)
    assert run.returncode == 0, run.stdout + run.stderr
    goal, compare = calls.read_text().splitlines()[1:]
    assert "--seed 1 --rungs whole-step-graph --steps 8000 --out runs/tl" in goal
    assert "--seed 1 --rungs community,fp8 --steps 300 --trials 10 --out runs/tl-compare-seed1" in compare
    env["ASSETS"] = str(tmp_path / "missing.tar.xz")
    run = subprocess.run(["bash", str(script), str(tmp_path / "logs2")], cwd=work, env=env, capture_output=True)
    assert run.returncode == 1 and "no LIBERO assets at" in (tmp_path / "logs2" / "steps.log").read_text()


def test_optimizer_gaps_timeline_collapses_runs_and_keeps_the_idle_time_before_each():
    """scripts/optimizer_step_gaps.py's kernel timeline: consecutive kernels of one name become one run (count,
    device ms), a gap of 100 us or more starts a new run and is kept as the idle time before it."""
    timeline = load("optimizer_step_gaps").timeline
    kernels = [(0.0, 10.0, "a"), (12.0, 20.0, "a"), (20.0, 30.0, "b"), (5030.0, 5040.0, "b"), (5041.0, 5050.0, "c")]
    runs = timeline(kernels)
    assert [(r["kernel"], r["count"]) for r in runs] == [("a", 2), ("b", 1), ("b", 1), ("c", 1)]
    assert runs[0]["ms"] == pytest.approx(0.018) and runs[0]["idle_before_ms"] == pytest.approx(0.002)
    assert runs[2]["idle_before_ms"] == pytest.approx(5.0) and runs[3]["idle_before_ms"] == pytest.approx(0.001)
