"""How the success gate over training seeds (harness/judge/seeds.py: `vlabench train-seeds` and `vlabench
train-ladder --seeds N`) decides, in a seeded simulation: rung and reference trained from k seeds, each training
run's policy landing `spread` (a standard deviation, in points) around its true rate (the reference's 50%, the
rung's 50% less the true drop), each evaluated with `trials` trials. The rule itself (paired_drop) judges every
simulated ladder.

Prints two tables (docs/gates.md quotes both):
- the few cases that set the gate over seeds beside Fisher's test on the same trials pooled over the seeds (which
  takes every trial as independent);
- the grid: per number of seeds, trials per seed and spread between seeds, how often the gate FAILs at each true
  drop: at 0 that is its false-alarm rate, at the 5-point tolerance at most its 5%, beyond the tolerance its
  power; with the pooled Fisher test's false alarms at no drop beside it.

Usage: python3 scripts/train_seeds_power.py [--runs N]   (default 1000 simulated ladders a cell of the grid)
"""

import argparse

import numpy as np

from harness.judge.seeds import paired_drop
from harness.stats.rates import fisher_lower_p

TOLERANCE, CONFIDENCE = 0.05, 0.95
# (seeds, true drop, spread of a training run's rate, runs): no drop with training spread, then a real drop
CASES = ((3, 0.0, 0.10, 400), (4, 0.20, 0.03, 200))
# the grid: seeds, trials per seed (one evaluation of a trained policy), spread between seeds, true drops
SEEDS, TRIALS, SPREADS, DROPS = (3, 5), (100, 200), (0.0, 0.05, 0.10, 0.15), (0.0, 0.05, 0.10, 0.20)


def simulate(rng, k: int, drop: float, spread: float, trials: int = 100) -> tuple[list, list]:
    """k seeds: each trains a reference and a rung whose true rates spread around 50% and 50% - drop."""
    ref = np.clip(rng.normal(0.5, spread, k), 0, 1)
    rung = np.clip(rng.normal(0.5 - drop, spread, k), 0, 1)
    return [(int(rng.binomial(trials, p)), trials) for p in rung], [(int(rng.binomial(trials, p)), trials) for p in ref]


def fail_rates(
    rng, k: int, drop: float, spread: float, runs: int, trials: int = 100, pooled_too: bool = True
) -> tuple[float, float | None]:
    """(the gate over seeds, Fisher's test on the pooled trials): the share of runs each FAILs (Fisher's only
    with pooled_too)."""
    ours = pooled = 0
    for _ in range(runs):
        rung, ref = simulate(rng, k, drop, spread, trials)
        ours += paired_drop(rung, ref, TOLERANCE, CONFIDENCE)[0] == "FAIL"
        if not pooled_too:
            continue
        (k1, n1), (k2, n2) = [tuple(map(sum, zip(*side, strict=True))) for side in (rung, ref)]
        pooled += (k2 / n2 - k1 / n1) > TOLERANCE and fisher_lower_p(k1, n1, k2, n2) < 1 - CONFIDENCE
    return ours / runs, (pooled / runs if pooled_too else None)


def grid_row(k: int, trials: int, spread: float, runs: int, drops=DROPS) -> tuple[list[float], float]:
    """One row of the grid: the gate's FAIL rate at each true drop, and the pooled Fisher test's at no drop. Each
    cell draws from its own seeded generator, so a cell's figure does not depend on the others."""
    fails, pooled = [], None
    for drop in drops:
        rng = np.random.default_rng([k, trials, round(spread * 100), round(drop * 100)])
        ours, fisher = fail_rates(rng, k, drop, spread, runs, trials, pooled_too=drop == 0)
        fails.append(ours)
        pooled = fisher if drop == 0 else pooled
    return fails, pooled


def grid_table(runs: int) -> str:
    from tabulate import tabulate

    rows = []
    for k in SEEDS:
        for trials in TRIALS:
            for spread in SPREADS:
                fails, pooled = grid_row(k, trials, spread, runs)
                rows.append([k, trials, f"{spread * 100:g} points", *(f"{f:.1%}" for f in fails), f"{pooled:.1%}"])
    headers = ["seeds", "trials per seed", "spread between seeds",
               *(f"FAIL: drop {d * 100:g}" for d in DROPS), "Fisher pooled FAIL: drop 0"]  # fmt: skip
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=1000, help="simulated ladders a cell of the grid")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print("seeds  true drop  spread of a run  runs  FAIL over seeds  FAIL of Fisher on pooled trials")
    for k, drop, spread, runs in CASES:
        ours, pooled = fail_rates(rng, k, drop, spread, runs)
        print(f"{k:5d}  {drop:9.0%}  {spread:15.0%}  {runs:4d}  {ours:15.1%}  {pooled:31.1%}")
    print(f"\nThe gate over seeds at a {TOLERANCE * 100:g}-point tolerance, base rate 50% ({args.runs} seeded "
          "simulated ladders a cell; spread: the standard deviation of a training run's success rate):\n")  # fmt: skip
    print(grid_table(args.runs))


if __name__ == "__main__":
    main()
