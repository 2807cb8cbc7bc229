"""Small statistics shared by evaluation results and gates (standard library only): the Wilson interval, the
success-rate entries counted from episode records, Fisher's exact test and the trials a drop needs."""

from __future__ import annotations

import math
from statistics import NormalDist


def wilson_interval(successes: int, trials: int, confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Wilson score interval for a binomial success rate.

    Preferred over the normal (Wald) interval because success rates near 0 or 1 with few trials are the
    common case in LIBERO (e.g. 49/50): Wald collapses to a zero-width interval there, Wilson does not.
    With no trials nothing is known, so the interval is the whole [0, 1].
    """
    if trials < 0 or not 0 <= successes <= trials:
        raise ValueError(f"need 0 <= successes <= trials, got {successes} of {trials}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if trials == 0:
        return 0.0, 1.0
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    # Exact ends where the formula's float dust would leave 1e-17 or 0.9999999999999999.
    low = 0.0 if successes == 0 else max(0.0, centre - half)
    high = 1.0 if successes == trials else min(1.0, centre + half)
    return low, high


def rate_summary(successes: int, trials: int, confidence: float = 0.95) -> dict:
    """{"successes", "trials", "rate", "wilson_low", "wilson_high"}: the success-rate entry of result files."""
    low, high = wilson_interval(successes, trials, confidence)
    return {
        "successes": successes,
        "trials": trials,
        "rate": successes / trials if trials else None,
        "wilson_low": low,
        "wilson_high": high,
    }


def success_rates(episodes: list[dict]) -> dict:
    """Flat mapping: each suite ("libero_spatial") and each task ("libero_spatial/3") to its success-rate
    entry {successes, trials, rate, wilson_low, wilson_high}; errored episodes count as failed trials."""
    counts: dict[str, list[int]] = {}
    for ep in episodes:
        for key in (ep["suite"], f"{ep['suite']}/{ep['task']}"):
            c = counts.setdefault(key, [0, 0, 0])
            c[0] += bool(ep.get("success"))
            c[1] += 1
            c[2] += ep.get("status") == "error"
    out = {}
    for key in sorted(counts, key=lambda k: (k.split("/")[0], int(k.split("/")[1]) if "/" in k else -1)):
        successes, trials, errors = counts[key]
        out[key] = {**rate_summary(successes, trials), "errors": errors}
    return out


def _log_comb(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def fisher_lower_p(k1: int, n1: int, k2: int, n2: int) -> float:
    """One-sided p-value of Fisher's exact test that the first group's success rate is lower than the
    second's: the probability, with both groups' margins fixed, of k1 or fewer successes in the first."""
    total, successes = n1 + n2, k1 + k2
    denom = _log_comb(total, n1)
    low = max(0, n1 - (total - successes))
    p = sum(
        math.exp(_log_comb(successes, x) + _log_comb(total - successes, n1 - x) - denom) for x in range(low, k1 + 1)
    )
    return min(1.0, p)


def trials_to_detect(rate: float, drop: float, confidence: float = 0.95, power: float = 0.8) -> int:
    """Trials per side for a one-sided two-proportion test to detect a drop of `drop` from `rate` with the
    given power (the normal approximation: a planning figure, not a guarantee)."""
    p1, p2 = rate, max(0.0, rate - drop)
    mean = (p1 + p2) / 2
    z_a, z_b = NormalDist().inv_cdf(confidence), NormalDist().inv_cdf(power)
    spread = z_a * math.sqrt(2 * mean * (1 - mean)) + z_b * math.sqrt(p1 * (1 - p1) + p2 * (1 - p2))
    return math.ceil((spread / (p1 - p2)) ** 2)
