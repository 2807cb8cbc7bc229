"""The small interface through which the harness drives a model family.

`models/` never imports `harness/`: the harness asks a family to parse options, build a model,
make batches, compute a loss and count FLOPs, and measures the rest itself.
"""
from __future__ import annotations

from typing import Any, Protocol

import torch


class OptionError(ValueError):
    """A bad option value. `key` is the option's path inside the options mapping (e.g. "recompute.patterns")."""

    def __init__(self, key: str, expected: str, got: Any):
        self.key, self.expected, self.got = key, expected, got
        super().__init__(f"{key}: expected {expected}, got {got!r}")


class ModelFamily(Protocol):
    name: str
    sizes: tuple[str, ...]

    def parse_options(self, options: dict) -> Any:
        """Validate a cumulative options mapping; raises OptionError."""

    def unsupported_reason(self, options: Any, backend: str, capabilities: frozenset[str]) -> str | None:
        """Why these options cannot train on this backend, or None."""

    def build(self, size: str, options: Any, workload: dict, device: torch.device, dtype: torch.dtype,
              seed: int) -> torch.nn.Module:
        """The model with its options applied, initialised deterministically from `seed`."""

    def make_batches(self, size: str, workload: dict, n: int, device: torch.device, dtype: torch.dtype,
                     seed: int) -> list[dict]:
        """`n` training batches (inputs, noise, flow time), identical for every rung with the same seed."""

    def loss(self, model: torch.nn.Module, batch: dict) -> torch.Tensor:
        """Scalar training loss for a batch."""

    def flops_per_sample(self, size: str, workload: dict) -> float:
        """Useful (analytic) training FLOPs per sample: no recompute, no padding slots."""
