"""Open-loop error of a trained policy on demonstrations, per action dimension: which of the expert's actions the
policy predicts from what it sees, and which it cannot.

    python scripts/policy_openloop.py --checkpoint CK --dataset DS [--every 5] [--device cpu]

The policy is built as `vlabench eval --policy pi05 --checkpoint CK` builds it and shown each `--every`-th frame of
the LeRobot dataset DS as the LIBERO evaluation presents it (the camera images resized with padding to 224, the
8-d state, the task); the first `replan` actions of its chunk (those the evaluation executes) are compared with the
demonstration's next actions. Per dimension it prints R^2 (1 - squared error / the demonstrations' variance: 1 is
exact, 0 is no better than the demonstrations' mean action) and the mean absolute error in units of that
dimension's standard deviation. Demonstrations from the evaluation's own initial states (`make-dataset --first-trial
0`) ask how the policy does where it was never shown the way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

DIMS = ("x", "y", "z", "roll", "pitch", "yaw", "gripper")


def predictions(policy, dataset, every: int) -> tuple[np.ndarray, np.ndarray]:
    """(predicted, demonstrated) actions [N, 7] over the executed part of each chunk, padding left out."""
    from harness.data.lerobot_format import LIBERO_CAMERAS
    from harness.eval.protocol import demonstration_observation

    predicted, demonstrated = [], []
    for i in range(0, len(dataset), every):
        sample = dataset[i]
        observation = {**demonstration_observation(sample, LIBERO_CAMERAS), "noise_seed": i}
        chunk = policy.infer([observation])[0][: policy.replan_steps]
        real = ~sample["action_is_pad"].numpy()[: len(chunk)]
        predicted.append(chunk[real])
        demonstrated.append(sample["action"].numpy()[: len(chunk)][real])
    return np.concatenate(predicted), np.concatenate(demonstrated)


def table(predicted: np.ndarray, demonstrated: np.ndarray) -> str:
    std = demonstrated.std(0)
    r2 = 1.0 - ((predicted - demonstrated) ** 2).sum(0) / ((demonstrated - demonstrated.mean(0)) ** 2).sum(0)
    mae = np.abs(predicted - demonstrated).mean(0) / np.where(std > 0, std, 1.0)
    lines = [f"{'dimension':<10} {'R^2':>7} {'|error| / std':>14} {'std':>8}"]
    for name, a, b, s in zip(DIMS, r2, mae, std):
        lines.append(f"{name:<10} {a:>7.3f} {b:>14.3f} {s:>8.4f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint", required=True, help="a vlabench train checkpoint folder")
    p.add_argument("--dataset", required=True, help="a LeRobot v3.0 dataset of LIBERO demonstrations")
    p.add_argument("--every", type=int, default=5, help="use every N-th frame (default 5)")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)

    from harness.data.dataset import LeRobotV3Dataset
    from harness.data.lerobot_format import LIBERO_CAMERAS
    from harness.eval.policies import make_policy

    policy = make_policy("pi05", args.checkpoint, device=args.device, dtype="fp32", model_size="full", seed=7)
    dataset = LeRobotV3Dataset(args.dataset, action_horizon=policy.meta.horizon, cameras=list(LIBERO_CAMERAS))
    predicted, demonstrated = predictions(policy, dataset, args.every)
    print(f"{len(predicted)} actions from {len(range(0, len(dataset), args.every))} frames of {args.dataset}")
    print(table(predicted, demonstrated))
    return 0


if __name__ == "__main__":
    sys.exit(main())
