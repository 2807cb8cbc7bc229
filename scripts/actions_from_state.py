"""How much of a LIBERO demonstration dataset's actions the robot's state alone explains, per action dimension.

    python scripts/actions_from_state.py DATASET [--test-fraction 0.3]

A least-squares linear fit of each action dimension on the 8-d state (end-effector position, its orientation as
a rotation matrix rather than the state's axis-angle, which jumps where the angle passes pi, and the gripper),
fitted on the first episodes and scored (R^2) on the last `--test-fraction` of them. The scripted expert steers
the gripper's orientation by a feedback law on it; a high R^2 for roll and pitch says the state carries what
those actions depend on, whatever a policy's images show (docs/history/training-runs.md, third session).
"""

from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

DIMS = ("x", "y", "z", "roll", "pitch", "yaw", "gripper")


def rotation_matrix(axis_angle: np.ndarray) -> np.ndarray:
    """Rodrigues' formula: [3] rotation vector -> [3, 3] matrix."""
    angle = np.linalg.norm(axis_angle)
    if angle == 0:
        return np.eye(3)
    k = axis_angle / angle
    cross = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return np.eye(3) + np.sin(angle) * cross + (1 - np.cos(angle)) * cross @ cross


def features(state: np.ndarray) -> np.ndarray:
    """Position, orientation matrix (9), gripper, and a constant."""
    matrices = np.array([rotation_matrix(r).ravel() for r in state[:, 3:6]])
    return np.c_[state[:, :3], matrices, state[:, 6:], np.ones(len(state))]


def r_squared(dataset: str, test_fraction: float) -> tuple[np.ndarray, int, int]:
    files = sorted(glob.glob(str(Path(dataset) / "data" / "*" / "*.parquet")))
    if not files:
        raise SystemExit(f"{dataset}: expected a LeRobot v3.0 dataset (data/chunk-*/file-*.parquet), found none")
    table = pq.read_table(files)
    state = np.array(table.column("observation.state").to_pylist())
    action = np.array(table.column("action").to_pylist())
    episode = np.array(table.column("episode_index").to_pylist())
    episodes = np.unique(episode)
    test = episode >= episodes[int(round(len(episodes) * (1 - test_fraction)))]
    x = features(state)
    weights, *_ = np.linalg.lstsq(x[~test], action[~test], rcond=None)
    error = ((x[test] @ weights - action[test]) ** 2).sum(0)
    spread = ((action[test] - action[test].mean(0)) ** 2).sum(0)
    return 1.0 - error / spread, int((~test).sum()), int(test.sum())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("dataset", help="a LeRobot v3.0 dataset of LIBERO demonstrations")
    p.add_argument("--test-fraction", type=float, default=0.3, help="the last episodes scored (default 0.3)")
    args = p.parse_args(argv)
    r2, fitted, scored = r_squared(args.dataset, args.test_fraction)
    print(f"linear fit of the actions on the state: {fitted} frames fitted, {scored} scored (R^2)")
    print("  ".join(f"{name} {value:.3f}" for name, value in zip(DIMS, r2)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
