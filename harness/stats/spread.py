"""Intervals that include the spread between processes, and the one slowdown rule every verdict uses.

A rung's speed moves between processes and hosts (launch-bound eager steps most: the host's dispatch speed
differs from one process to the next) far more than between the steps of one process. So where a figure has
repeats (one fresh process each), its interval comes from the repeats: a Student-t interval over the log of
the per-repeat figures, which holds for the few repeats a device budget allows (3 to 5). Where both sides are
single runs, nothing is known about the spread between processes, and the interval falls back on the steps
of each run (a bootstrap): it then says only how noisy the steps were, and the verdict says so.

Throughput here is the whole step-time distribution: samples over total time (batch x steps / sum of step
times), so a slower tail of steps counts as fully as a uniformly slower step.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

SLOWER, WITHIN_NOISE, NOT_SLOWER, UNRESOLVED = "slower", "within noise", "not slower", "unresolved"


def whole_rate(step_times_s: list[float], samples_per_step: float) -> float:
    """Samples per second over the whole run: every step's time counts, the slow tail included."""
    return samples_per_step * len(step_times_s) / sum(step_times_s)


def _t_cdf_whole(x: float, df: int) -> float:
    """Student-t CDF for a whole number of degrees of freedom in closed form (Abramowitz and Stegun 26.7.3-4):
    P(|T| < |x|) as a finite series in the cosine of atan(|x| / sqrt(df))."""
    theta = math.atan(abs(x) / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2:  # odd: (2/pi)(theta + sin cos (1 + 2/3 cos^2 + (2 4)/(3 5) cos^4 + ...))
        term = total = 1.0
        for j in range(1, (df - 1) // 2):
            term *= c2 * (2 * j) / (2 * j + 1)
            total += term
        inside = 2 / math.pi * (theta + (s * math.cos(theta) * total if df > 1 else 0.0))
    else:  # even: sin (1 + 1/2 cos^2 + (1 3)/(2 4) cos^4 + ...)
        term = total = 1.0
        for j in range(1, df // 2):
            term *= c2 * (2 * j - 1) / (2 * j)
            total += term
        inside = s * total
    return 0.5 + inside / 2 if x > 0 else 0.5 - inside / 2


def t_cdf(x: float, df: int) -> float:
    """Student-t CDF: in closed form for a whole df up to 200, else by Simpson integration of the density from 0
    (exact enough for quantiles to 1e-6)."""
    if x == 0:
        return 0.5
    if float(df).is_integer() and 1 <= df <= 200:  # the series has df/2 terms
        return _t_cdf_whole(x, int(df))
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def pdf(t):
        return math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))

    n, a = 2000, abs(x)
    h = a / n
    s = pdf(0) + pdf(a) + sum((4 if i % 2 else 2) * pdf(i * h) for i in range(1, n))
    half = min(0.5, s * h / 3)
    return 0.5 + half if x > 0 else 0.5 - half


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, df: int) -> float:
    """The p-quantile of Student's t with `df` degrees of freedom (p in (0.5, 1))."""
    if not 0.5 < p < 1 or df < 1:
        raise ValueError(f"t_quantile needs 0.5 < p < 1 and df >= 1, got p={p}, df={df}")
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Ratio:
    """A ratio (current over baseline, or one rung over another) with its interval and where that came from."""

    value: float
    low: float
    high: float
    method: str  # "repeats" (t over per-repeat figures), "steps" (bootstrap of one run's steps) or "point"
    df: int = 0
    spread: float | None = None  # "repeats": the pooled spread between processes (sd of the log) it was made with

    def text(self) -> str:
        return f"{self.value - 1:+.1%} [{self.low - 1:+.1%}, {self.high - 1:+.1%}]"


def _mean(xs):
    return sum(xs) / len(xs)


def _var(xs):
    m = _mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def geometric_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float, float] | None:
    """Geometric mean of positive per-repeat figures with a t interval of the log; None for fewer than 2."""
    if len(values) < 2:
        return None
    logs = [math.log(v) for v in values]
    m, half = _mean(logs), t_quantile(0.5 + confidence / 2, len(logs) - 1) * math.sqrt(_var(logs) / len(logs))
    return math.exp(m), math.exp(m - half), math.exp(m + half)


def repeats_ratio(
    current: list[float], baseline: list[float], confidence: float = 0.95, min_spread: float = 0.0
) -> Ratio | None:
    """Ratio of two sets of per-repeat figures (geometric means) with a pooled two-sample t interval of the
    log ratio: the spread between repeats is estimated from every side that has repeats (the same rung on the
    same target spreads alike), so one side may be a single run, and taken as at least `min_spread` (sd of the
    log): two runs made at different times differ by the machine's drift between them too, which the repeats of
    one run, back to back, cannot show. None when neither side has two repeats."""
    df = len(current) + len(baseline) - 2
    if df < 1 or (len(current) < 2 and len(baseline) < 2):
        return None
    lc, lb = [math.log(v) for v in current], [math.log(v) for v in baseline]
    ss = sum((x - _mean(lc)) ** 2 for x in lc) + sum((x - _mean(lb)) ** 2 for x in lb)
    sd = max(math.sqrt(ss / df), min_spread)
    se = sd * math.sqrt(1 / len(lc) + 1 / len(lb))
    d, half = _mean(lc) - _mean(lb), t_quantile(0.5 + confidence / 2, df) * se
    return Ratio(math.exp(d), math.exp(d - half), math.exp(d + half), "repeats", df, sd)


def resolvable_change(spread: float, n_base: int, n_cur: int, confidence: float = 0.95, power: float = 0.8) -> float:
    """The smallest slowdown (a fraction) that repeats_ratio over `n_base` and `n_cur` repeats of a rung whose
    repeats spread `spread` (sd of the log) between processes finds outside its interval with probability
    `power`: the true log change must exceed the interval's half-width by the power's normal quantile of the
    standard error (the usual sample-size rule for a two-sample t test)."""
    df = max(n_base + n_cur - 2, 1)
    se = spread * math.sqrt(1 / n_base + 1 / n_cur)
    k = t_quantile(0.5 + confidence / 2, df) + NormalDist().inv_cdf(power)
    return 1 - math.exp(-k * se)


def repeats_to_resolve(
    spread: float, change: float, confidence: float = 0.95, power: float = 0.8, most: int = 100
) -> int | None:
    """Repeats a side (both sides alike) that resolve a slowdown of `change` (a fraction) at this spread between
    processes with probability `power`; None when more than `most` would be needed."""
    for n in range(2, most + 1):
        if resolvable_change(spread, n, n, confidence, power) <= change:
            return n
    return None


def paired_ratio(ratios: list[float], confidence: float = 0.95) -> Ratio | None:
    """Geometric mean of paired ratios (A/B pairs run back to back) with a t interval; None for one pair."""
    g = geometric_interval(ratios, confidence)
    return None if g is None else Ratio(*g, "pairs", len(ratios) - 1)


def steps_ratio(
    current: list[float],
    baseline: list[float],
    cur_samples: float,
    base_samples: float,
    confidence: float = 0.95,
    resamples: int = 4000,
    seed: int = 0,
) -> Ratio:
    """Whole-run throughput ratio of two single runs from their step times, with a percentile bootstrap (a
    fixed seed: the same inputs give the same verdict). Runs of equal length are resampled by step index, in
    pairs: step i of every rung trains on the same batch after the same warm-up, so what step i costs in both
    runs (its data, a periodic pause) cancels; for independent runs this is no narrower than resampling each
    run apart."""
    cur, base = np.asarray(current, dtype=float), np.asarray(baseline, dtype=float)
    rng = np.random.default_rng(seed)
    cur_idx = rng.integers(0, cur.size, size=(resamples, cur.size))
    base_idx = cur_idx if cur.size == base.size else rng.integers(0, base.size, size=(resamples, base.size))
    scale = cur_samples / base_samples
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(scale * base[base_idx].mean(axis=1) / cur[cur_idx].mean(axis=1), [tail, 100 - tail])
    return Ratio(float(scale * base.mean() / cur.mean()), float(low), float(high), "steps")


def slowdown(ratio: Ratio, tolerance: float) -> str:
    """The one rule: SLOWER when the point estimate is slower than the tolerance allows and the interval
    excludes no change (the upper end is below 1); WITHIN_NOISE when only the first holds; UNRESOLVED when the
    point estimate is within the tolerance but the interval reaches beyond twice it (a pass there could hide a
    regression of that size); NOT_SLOWER otherwise."""
    if ratio.value < 1 - tolerance:
        return SLOWER if ratio.high < 1 else WITHIN_NOISE
    return UNRESOLVED if ratio.low < 1 - 2 * tolerance else NOT_SLOWER


def log_spread(values: list[float]) -> float | None:
    """The spread between processes: the sample sd of the log of per-repeat figures (None for fewer than 2)."""
    return math.sqrt(_var([math.log(v) for v in values])) if len(values) >= 2 else None


def with_process_spread(ratio: Ratio, spread: float, confidence: float = 0.95) -> Ratio:
    """A ratio of two single runs with the spread between processes added to its interval: each run is one draw
    of its process's level (log-normal, sd `spread`), so their log ratio moves by sqrt(2) x spread beyond what
    its steps show; each half of the interval (in logs) is widened in quadrature by z x sqrt(2) x spread."""
    extra = NormalDist().inv_cdf(0.5 + confidence / 2) * math.sqrt(2) * spread
    low_half, high_half = math.log(ratio.value / ratio.low), math.log(ratio.high / ratio.value)
    low = ratio.value * math.exp(-math.hypot(low_half, extra))
    high = ratio.value * math.exp(math.hypot(high_half, extra))
    return Ratio(ratio.value, low, high, "steps+spread", ratio.df)
