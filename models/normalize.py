"""Per-dimension normalisation of a state or action feature from dataset statistics, as the reference
implementations apply it: quantile (q01/q99 -> [-1, 1]), mean/std, or identity. openpi adds its epsilon to
every denominator, LeRobot only to zero ones; `eps_always` says which."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

NormMode = Literal["identity", "quantile", "mean_std"]


@dataclass
class Normalizer:
    mode: NormMode = "identity"
    low: np.ndarray | None = None  # q01 or mean
    high: np.ndarray | None = None  # q99 or std
    eps: float = 1e-6
    eps_always: bool = True

    @classmethod
    def from_stats(
        cls, mode: NormMode, stats: dict, eps: float = 1e-6, eps_always: bool = True, what: str = "feature"
    ) -> Normalizer:
        """From a feature's statistics ({q01, q99} or {mean, std}); ValueError naming what is missing."""
        if mode == "identity":
            return cls()
        keys = ("q01", "q99") if mode == "quantile" else ("mean", "std")
        missing = [k for k in keys if k not in stats]
        if missing:
            raise ValueError(
                f"{what}: {mode} normalisation needs {', '.join(keys)}, the statistics have "
                f"{', '.join(sorted(stats)) or 'none'}"
            )
        low, high = (np.asarray(stats[k], dtype=np.float64).reshape(-1) for k in keys)
        return cls(mode, low, high, eps, eps_always)

    def _span(self, n: int) -> np.ndarray:
        span = (self.high[:n] - self.low[:n]) if self.mode == "quantile" else self.high[:n]
        if self.eps_always:
            return span + self.eps
        return np.where(span == 0, self.eps, span)

    def normalize(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[-1]
        if self.mode == "quantile":
            return (x - self.low[:n]) / self._span(n) * 2.0 - 1.0
        if self.mode == "mean_std":
            return (x - self.low[:n]) / self._span(n)
        return x

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        n = x.shape[-1]
        if self.mode == "quantile":
            return (x + 1.0) / 2.0 * self._span(n) + self.low[:n]
        if self.mode == "mean_std":
            return x * (self._span(n) if self.eps_always else self.high[:n]) + self.low[:n]
        return x
