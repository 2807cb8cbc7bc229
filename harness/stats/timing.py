"""Step statistics: medians with spread, samples/s and MFU from per-step device-synchronised times."""

from __future__ import annotations

import statistics


def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (q in [0, 100]) of a non-empty list."""
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize_steps(step_times_s: list[float], batch_size: int) -> dict:
    """Throughput per step is batch/time; the median and the 10th/90th percentiles give its spread."""
    rates = [batch_size / t for t in step_times_s]
    return {
        "step_time_s": statistics.median(step_times_s),
        "samples_per_s": statistics.median(rates),
        "samples_per_s_p10": percentile(rates, 10),
        "samples_per_s_p90": percentile(rates, 90),
    }


def mfu(samples_per_s: float, flops_per_sample: float, peak_flops: float | None) -> float | None:
    """Model FLOPs utilisation: useful model FLOPs per second over the target's peak (None if unknown)."""
    if not peak_flops:
        return None
    return samples_per_s * flops_per_sample / peak_flops
