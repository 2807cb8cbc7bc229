"""The steps per rung that let scripts/h200-train-ladder.sh (PARTS=compare) train and evaluate its rungs identically
before a deadline, from committed H200 speeds on the same data path: a rung's own training speed where the
committed comparison trained it (results/h200/train-ladder-2026-12-02-compare), else its speed on synthetic batches
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
TRAINED = RESULTS / "train-ladder-2026-12-02-compare"  # {rung}-train.json: the memory loader, prepared rows
SYNTHETIC = RESULTS / "pi05-libero-train-speed-graph.json"  # fused-adamw and whole-step-graph in one run
MIN_STEPS = 300  # fewer teach the small policy nothing worth comparing
TASKS = 10  # libero_spatial
EVAL_S_PER_TRIAL = 1.25  # 100 trials took 121-131 s with 16 workers (the committed comparison), start included
# per rung, outside its steps: frames decoded (23-25 s), rows prepared (4-7 s), built (33 s), checkpoints
OVERHEAD_S = {"community": 65}
OVERHEAD_OTHER_S = 80
MARGIN_S = 150  # packing the results and the last collecting call
SLOWDOWN = 0.92  # the steps' median overstates a run's pace (2,567 samples/s in a run probed at 3,051)


def samples_per_s(rung: str) -> float:
    trained = TRAINED / f"{rung}-train.json"
    if trained.exists():
        return json.loads(trained.read_text())["train"]["samples_per_s"]
    synthetic = {r["name"]: r["samples_per_s"] for r in json.loads(SYNTHETIC.read_text())["rungs"]}
    if rung not in synthetic:
        sys.exit(f"{rung}: no committed speed in {TRAINED} or {SYNTHETIC}: give STEPS")
    fused = json.loads((TRAINED / "fused-adamw-train.json").read_text())["train"]["samples_per_s"]
    return synthetic[rung] * fused / synthetic["fused-adamw"]


def main() -> None:
    deadline, trials, max_steps, rungs = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    batch = json.loads((TRAINED / "community-train.json").read_text())["train"]["batch_per_step"]
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
