"""The steps per rung that let scripts/gpu-parts/train-ladder.sh (PARTS=compare) train and evaluate its rungs
identically before a deadline, from committed H200 speeds on the same data path: a rung's own training speed where a
committed comparison trained it (the newest of TRAINED first), else its speed on synthetic batches
(results/h200/pi05-libero-train-speed-graph.json) scaled by fused-adamw's ratio of the two. It only sets how long
the comparison trains: every speed reported comes from the rungs' own training.

Usage: python3 scripts/train_compare_steps.py DEADLINE_EPOCH TRIALS_PER_TASK MAX_STEPS RUNG [RUNG ...]
(a rung named twice trains twice: the sabotaged run of a rung)
"""

import json
import sys
import time
from pathlib import Path

RESULTS = Path("results/h200")
# {rung}-train.json of the comparisons (the memory loader, prepared rows), the newest first
TRAINED = (
    RESULTS / "evidence/train-ladder-2026-12-02-compare-2554",
    RESULTS / "evidence/train-ladder-2026-12-02-compare",
)
SYNTHETIC = RESULTS / "pi05-libero-train-speed-graph.json"  # fused-adamw and whole-step-graph in one run
MIN_STEPS = 300  # fewer teach the small policy nothing worth comparing
TASKS = 10  # libero_spatial
# 100 trials of policies that succeed about half the time took 68-75 s with 16 workers and the policy's host
# threads limited (train-ladder-2026-12-02-compare-2554), plus the evaluation's start
EVAL_S_PER_TRIAL = 0.85
# per rung, outside its steps and its evaluation: frames decoded (20-23 s), rows prepared (4 s), built (25-33 s),
# checkpoints; 41-59 s in the 2,554-step comparison
OVERHEAD_S = {"community": 60}
OVERHEAD_OTHER_S = 70
MARGIN_S = 150  # packing the results and the last collecting call
SLOWDOWN = 0.92  # the steps' median overstates a run's pace (2,567 samples/s in a run probed at 3,051)


def trained_speed(rung: str) -> float | None:
    """The rung's samples/s in the newest committed comparison that trained it."""
    for folder in TRAINED:
        path = folder / f"{rung}-train.json"
        if path.exists():
            return json.loads(path.read_text())["train"]["samples_per_s"]
    return None


def samples_per_s(rung: str) -> float:
    trained = trained_speed(rung)
    if trained is not None:
        return trained
    synthetic = {r["name"]: r["samples_per_s"] for r in json.loads(SYNTHETIC.read_text())["rungs"]}
    if rung not in synthetic:
        sys.exit(f"{rung}: no committed speed in {', '.join(map(str, TRAINED))} or {SYNTHETIC}: give STEPS")
    return synthetic[rung] * trained_speed("fused-adamw") / synthetic["fused-adamw"]


def main() -> None:
    deadline, trials, max_steps, rungs = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    batch = json.loads((TRAINED[0] / "community-train.json").read_text())["train"]["batch_per_step"]
    per_step = {rung: batch / samples_per_s(rung) for rung in set(rungs)}
    fixed = sum(OVERHEAD_S.get(r, OVERHEAD_OTHER_S) + trials * TASKS * EVAL_S_PER_TRIAL for r in rungs) + MARGIN_S
    left = deadline - time.time() - fixed
    steps = int(SLOWDOWN * left / sum(per_step[r] for r in rungs))
    summary = ", ".join(f"{k} {1000 * v:.0f} ms" for k, v in per_step.items())
    print(f"per step: {summary}; {left:.0f}s for the steps of {' '.join(rungs)} -> {steps} steps", file=sys.stderr)
    if steps < MIN_STEPS:
        sys.exit(f"only {steps} steps fit before the deadline (at least {MIN_STEPS} are needed)")
    print(min(steps, max_steps))


if __name__ == "__main__":
    main()
