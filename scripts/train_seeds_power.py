"""How the success gate over training seeds (`vlabench train-seeds`, harness/judge/seeds.py) decides, in a seeded
simulation: rung and reference trained from k seeds, each training run's policy landing `spread` around its true
rate, each evaluated with `trials` trials. Prints, per case, how often the gate over seeds FAILs and how often
Fisher's test on the same trials pooled over the seeds (which takes every trial as independent) would.

Usage: python3 scripts/train_seeds_power.py   (docs/gates.md quotes its output)
"""

import numpy as np

from harness.judge.seeds import paired_drop
from harness.stats.rates import fisher_lower_p

TOLERANCE, CONFIDENCE = 0.05, 0.95
# (seeds, true drop, spread of a training run's rate, runs): no drop with training spread, then a real drop
CASES = ((3, 0.0, 0.10, 400), (4, 0.20, 0.03, 200))


def simulate(rng, k: int, drop: float, spread: float, trials: int = 100) -> tuple[list, list]:
    """k seeds: each trains a reference and a rung whose true rates spread around 50% and 50% - drop."""
    ref = np.clip(rng.normal(0.5, spread, k), 0, 1)
    rung = np.clip(rng.normal(0.5 - drop, spread, k), 0, 1)
    return [(int(rng.binomial(trials, p)), trials) for p in rung], [(int(rng.binomial(trials, p)), trials) for p in ref]


def fail_rates(rng, k: int, drop: float, spread: float, runs: int) -> tuple[float, float]:
    """(the gate over seeds, Fisher's test on the pooled trials): the share of runs each FAILs."""
    ours = pooled = 0
    for _ in range(runs):
        rung, ref = simulate(rng, k, drop, spread)
        ours += paired_drop(rung, ref, TOLERANCE, CONFIDENCE)[0] == "FAIL"
        (k1, n1), (k2, n2) = [tuple(map(sum, zip(*side, strict=True))) for side in (rung, ref)]
        pooled += (k2 / n2 - k1 / n1) > TOLERANCE and fisher_lower_p(k1, n1, k2, n2) < 1 - CONFIDENCE
    return ours / runs, pooled / runs


def main() -> None:
    rng = np.random.default_rng(0)
    print("seeds  true drop  spread of a run  runs  FAIL over seeds  FAIL of Fisher on pooled trials")
    for k, drop, spread, runs in CASES:
        ours, pooled = fail_rates(rng, k, drop, spread, runs)
        print(f"{k:5d}  {drop:9.0%}  {spread:15.0%}  {runs:4d}  {ours:15.1%}  {pooled:31.1%}")


if __name__ == "__main__":
    main()
