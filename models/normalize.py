"""Per-dimension normalisation of a state or action feature from dataset statistics, as the reference
implementations apply it: quantile (q01/q99 -> [-1, 1]; openpi, LeRobot's Pi0.5), mean/std, min_max (min/max ->
[-1, 1], clipped, a constant dimension to 0; GR00T N1.6), or identity. openpi adds its epsilon to every
denominator, LeRobot only to zero ones; `eps_always` says which."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

NormMode = Literal["identity", "quantile", "mean_std", "min_max"]
STATS_KEYS = {"quantile": ("q01", "q99"), "mean_std": ("mean", "std"), "min_max": ("min", "max")}


@dataclass
class Normalizer:
    mode: NormMode = "identity"
    low: np.ndarray | None = None  # q01, mean or min
    high: np.ndarray | None = None  # q99, std or max
    eps: float = 1e-6
    eps_always: bool = True
    clip: bool = False  # min_max: clip to [-1, 1], both ways

    @classmethod
    def from_stats(
        cls,
        mode: NormMode,
        stats: dict,
        eps: float = 1e-6,
        eps_always: bool = True,
        what: str = "feature",
        keys: tuple[str, str] | None = None,
        clip: bool = False,
    ) -> Normalizer:
        """From a feature's statistics (the mode's keys, e.g. {q01, q99}, unless `keys` names others); ValueError
        naming what is missing."""
        if mode == "identity":
            return cls()
        keys = keys or STATS_KEYS[mode]
        missing = [k for k in keys if k not in stats]
        if missing:
            raise ValueError(
                f"{what}: {mode} normalisation needs {', '.join(keys)}, the statistics have "
                f"{', '.join(sorted(stats)) or 'none'}"
            )
        low, high = (np.asarray(stats[k], dtype=np.float64).reshape(-1) for k in keys)
        return cls(mode, low, high, eps, eps_always, clip)

    def _span(self, n: int) -> np.ndarray:
        span = (self.high[:n] - self.low[:n]) if self.mode == "quantile" else self.high[:n]
        if self.eps_always:
            return span + self.eps
        return np.where(span == 0, self.eps, span)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[-1]
        if self.mode == "min_max":
            low, high = self.low[:n], self.high[:n]
            varies = ~np.isclose(high, low)  # a constant dimension normalises to 0, as N1.6's mask does
            out = np.zeros_like(x, dtype=np.float64)
            out[..., varies] = 2 * (x[..., varies] - low[varies]) / (high[varies] - low[varies]) - 1
            return np.clip(out, -1.0, 1.0) if self.clip else out
        if self.mode == "quantile":
            return (x - self.low[:n]) / self._span(n) * 2.0 - 1.0
        if self.mode == "mean_std":
            return (x - self.low[:n]) / self._span(n)
        return x

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[-1]
        if self.mode == "min_max":
            y = np.clip(x, -1.0, 1.0) if self.clip else x
            return (y + 1.0) / 2.0 * (self.high[:n] - self.low[:n]) + self.low[:n]
        if self.mode == "quantile":
            return (x + 1.0) / 2.0 * self._span(n) + self.low[:n]
        if self.mode == "mean_std":
            return x * (self._span(n) if self.eps_always else self.high[:n]) + self.low[:n]
        return x
