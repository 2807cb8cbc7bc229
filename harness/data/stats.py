"""Feature statistics as LeRobot computes them (src/lerobot/datasets/compute_stats.py), so that a model
normalised with our `meta/stats.json` sees what it would see with LeRobot's.

Per episode and per feature: min, max, mean, std, count and the quantiles q01, q10, q50, q90, q99 (Pi0.5
normalises with q01/q99). Quantiles come from a 5000-bin histogram between the episode's min and max,
interpolated linearly inside the bin. Cameras: per channel over the pixels of up to ~100 evenly spaced
frames of the raw (pre-encoding) images, scaled to [0, 1], shaped (3, 1, 1); count is the number of frames
sampled. The dataset's stats aggregate the episodes' as LeRobot 0.6.1 (the newest release) does in
`aggregate_feature_stats`: count-weighted mean, pooled variance, min of mins, max of maxes, and for each
quantile the count-weighted mean of the episodes' quantiles, an estimate, not the global quantile. (LeRobot's
main branch replaced that rule after 0.6.1 by an envelope, the smallest q01/q10/q50 and the largest q90/q99;
we follow the release, which is what a LeRobot user's datasets and trained checkpoints carry.)
"""

from __future__ import annotations

import numpy as np

QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
QUANTILE_KEYS = tuple(f"q{int(q * 100):02d}" for q in QUANTILES)
HISTOGRAM_BINS = 5000


def _quantile(hist: np.ndarray, edges: np.ndarray, target: float) -> float:
    """The value below which `target` of the histogram's counts lie (LeRobot's interpolation, including
    its answer of the lowest edge when the target falls in the first bin)."""
    cum = np.cumsum(hist)
    i = int(np.searchsorted(cum, target))
    if i == 0:
        return float(edges[0])
    if i >= len(cum):
        return float(edges[-1])
    in_bin = cum[i] - cum[i - 1]
    if in_bin == 0:
        return float(edges[i])
    return float(edges[i] + (target - cum[i - 1]) / in_bin * (edges[i + 1] - edges[i]))


def _column_stats(values: np.ndarray, counts: np.ndarray | None = None) -> dict[str, float]:
    """Stats of one dimension; `counts` weights each value (a histogram of uint8 pixels)."""
    counts = np.ones(len(values)) if counts is None else counts
    n = counts.sum()
    lo, hi = float(values[counts > 0].min()), float(values[counts > 0].max())
    mean = float((values * counts).sum() / n)
    var = float((values.astype(np.float64) ** 2 * counts).sum() / n) - mean**2
    edges = np.linspace(lo - 1e-10, hi + 1e-10, HISTOGRAM_BINS + 1)
    hist, _ = np.histogram(values, bins=edges, weights=counts)
    out = {"min": lo, "max": hi, "mean": mean, "std": float(np.sqrt(max(0.0, var)))}
    for q, key in zip(QUANTILES, QUANTILE_KEYS):
        out[key] = _quantile(hist, edges, q * n)
    return out


def vector_stats(array: np.ndarray) -> dict[str, np.ndarray]:
    """Stats of a frame-wise feature: shape (N,) gives stats of shape (1,), (N, D) gives (D,)."""
    rows = np.asarray(array, dtype=np.float64)
    rows = rows.reshape(len(rows), -1)
    if len(rows) < 2:  # LeRobot's fallback: no spread to measure, quantiles are the mean
        mean = rows.mean(axis=0)
        stats = {"min": rows.min(axis=0), "max": rows.max(axis=0), "mean": mean, "std": rows.std(axis=0)}
        stats.update({key: mean.copy() for key in QUANTILE_KEYS})
    else:
        columns = [_column_stats(rows[:, d]) for d in range(rows.shape[1])]
        stats = {key: np.array([c[key] for c in columns]) for key in columns[0]}
    stats["count"] = np.array([len(rows)])
    return stats


def sample_indices(length: int) -> np.ndarray:
    """Which frames of an episode the camera stats look at: all of the first 100, then length**0.75."""
    n = max(min(100, length), min(int(length**0.75), 10_000))
    return np.round(np.linspace(0, length - 1, n)).astype(int)


def image_stats(frames) -> dict[str, np.ndarray]:
    """Per-channel stats of uint8 frames [T, H, W, 3] (or a list of [H, W, 3]), in [0, 1], shape (3, 1, 1)."""
    picked = np.stack([np.asarray(frames[i]) for i in sample_indices(len(frames))])
    height, width = picked.shape[1:3]
    if max(height, width) >= 300:  # LeRobot strides large images down to ~150 pixels first
        step = int(max(height, width) / 150)
        picked = picked[:, ::step, ::step]
    values = np.arange(256, dtype=np.float64)
    # A uint8 channel is a histogram of 256 values: exact stats at a fraction of the cost.
    columns = [
        _column_stats(values, np.bincount(picked[..., c].ravel(), minlength=256).astype(np.float64))
        for c in range(picked.shape[-1])
    ]
    stats = {key: np.array([c[key] for c in columns]).reshape(-1, 1, 1) / 255.0 for key in columns[0]}
    stats["count"] = np.array([len(picked)])
    return stats


def aggregate(episode_stats: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """The dataset's stats from its episodes' stats."""
    out = {}
    for key in episode_stats[0]:
        parts = [s[key] for s in episode_stats]
        counts = np.array([p["count"][0] for p in parts], dtype=np.float64)
        shape = (-1,) + (1,) * parts[0]["mean"].ndim
        weights = counts.reshape(shape)
        means = np.stack([p["mean"] for p in parts])
        mean = (means * weights).sum(axis=0) / counts.sum()
        var = ((np.stack([p["std"] for p in parts]) ** 2 + (means - mean) ** 2) * weights).sum(axis=0) / counts.sum()
        merged = {
            "min": np.min([p["min"] for p in parts], axis=0),
            "max": np.max([p["max"] for p in parts], axis=0),
            "mean": mean,
            "std": np.sqrt(var),
            "count": np.array([int(counts.sum())]),
        }
        for q in QUANTILE_KEYS:  # LeRobot 0.6.1: sum(q_e * count_e) / sum(count_e) over episodes e
            merged[q] = (np.stack([p[q] for p in parts]) * weights).sum(axis=0) / counts.sum()
        out[key] = merged
    return out


def to_json(stats: dict[str, dict[str, np.ndarray]]) -> dict:
    """Nested lists, as `meta/stats.json` stores them."""
    return {
        key: {name: np.asarray(value).tolist() for name, value in feature.items()} for key, feature in stats.items()
    }


def from_json(raw: dict) -> dict[str, dict[str, np.ndarray]]:
    return {
        key: {
            name: np.atleast_1d(np.asarray(value, dtype=np.float64 if name != "count" else np.int64))
            for name, value in feature.items()
        }
        for key, feature in raw.items()
    }
