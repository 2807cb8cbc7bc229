"""The steps per rung that let scripts/h200-train-ladder.sh (COMPARE=1) train and evaluate community, fused-adamw
and fp8 identically before a deadline: community's speed from its probe on this machine, fused-adamw's from the
committed prepared-rows run on the same data path, fp8's from the committed speed ratio of the two rungs. It only
sets how long the comparison trains: every speed reported comes from the rungs' own training.

Usage: python3 scripts/train_compare_steps.py PROBE_TRAIN_JSON DEADLINE_EPOCH TRIALS_PER_TASK
"""

import json
import sys
import time

RESULTS = "results/h200"
MAX_STEPS = 3000  # the scenario's train.steps
MIN_STEPS = 300  # fewer teach the small policy nothing worth comparing
TASKS = 10  # libero_spatial
EVAL_S_PER_TRIAL = 1.0  # 200 trials took 194 s with 16 workers (train-ladder-2026-12-02-fastest)
EVAL_START_S = 25
# per-rung time outside the steps: decode (28 s), building and compiling, checkpoints
OVERHEAD_S = {"community": 60, "fused-adamw": 90, "fp8": 130}
MARGIN_S = 150  # packing the results and the last collecting call
SLOWDOWN = 0.92  # the steps' median overstates a run's pace (2,567 samples/s in a run probed at 3,051)


def step_seconds(probe: dict) -> dict[str, float]:
    batch = probe["batch_per_step"]
    fused = json.load(open(f"{RESULTS}/pi05-libero-train-prepared-rows/fused-adamw-prepared-train.json"))["train"]
    speed = {r["name"]: r["samples_per_s"] for r in json.load(open(f"{RESULTS}/pi05-libero-train-speed.json"))["rungs"]}
    fused_s = batch / fused["samples_per_s"]
    return {
        "community": batch / probe["samples_per_s"],
        "fused-adamw": fused_s,
        "fp8": fused_s * speed["fused-adamw"] / speed["fp8"],
    }


def main() -> None:
    probe = json.load(open(sys.argv[1]))["train"]
    deadline, trials = float(sys.argv[2]), int(sys.argv[3])
    per_step = step_seconds(probe)
    fixed = sum(OVERHEAD_S.values()) + len(per_step) * (EVAL_START_S + trials * TASKS * EVAL_S_PER_TRIAL) + MARGIN_S
    left = deadline - time.time() - fixed
    steps = int(SLOWDOWN * left / sum(per_step.values()))
    summary = ", ".join(f"{k} {1000 * v:.0f} ms" for k, v in per_step.items())
    print(f"per step: {summary}; {left:.0f}s for the steps -> {steps} steps", file=sys.stderr)
    if steps < MIN_STEPS:
        sys.exit(f"only {steps} steps fit before the deadline (at least {MIN_STEPS} are needed)")
    print(min(steps, MAX_STEPS))


if __name__ == "__main__":
    main()
