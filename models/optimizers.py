"""The AdamW implementations a family's `adamw` option chooses among, defined once, and the one function that
builds them (`build_adamw`). A family passes its reference's hyperparameters and parameter groups; the option
picks only how the update runs, never what it computes (the same update up to rounding):

- foreach: torch's AdamW in its default multi-tensor implementation (openpi, LeRobot and transformers' `adamw_torch`);
- fused: torch's AdamW, one fused kernel per parameter group;
- fused-clip: the fused kernel with the gradient clipping as its gradient scale (models/clipped_adamw.py
  FusedClippedAdamW: no separate multiply of the gradients, which torch runs tensor by tensor for bf16 ones);
- compiled: the clipping folded into the update, compiled as one function with the workload's compile backend
  (models/clipped_adamw.py ClippedAdamW; it alone writes bf16 weight copies, models/weight_copies.py);
- triton-clip: the clipping's norm and the update in two Triton kernels over every tensor at once
  (models/triton_adamw.py; CUDA only).

The last three clip inside their step (`ClipsInStep`) and are always capturable (their state on the device); the
first three are capturable when the caller asks (a CUDA-graph step captures them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, get_args

import torch

from .clipped_adamw import ClippedAdamW, FusedClippedAdamW
from .triton_adamw import TritonClippedAdamW

AdamWKind = Literal["foreach", "fused", "fused-clip", "compiled", "triton-clip"]
ADAMW_KINDS: tuple[str, ...] = get_args(AdamWKind)
CUDA_ONLY: frozenset[str] = frozenset({"triton-clip"})


def adamw_unsupported_reason(kind: str, backend: str) -> str | None:
    """Why the `adamw` implementation `kind` cannot train on `backend`, or None (a family's unsupported_reason)."""
    if kind in CUDA_ONLY and backend != "cuda":
        return f"adamw: {kind} runs Triton kernels on a CUDA device; this target's backend is {backend}"
    return None


def build_adamw(
    params: Iterable,
    kind: AdamWKind,
    *,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    max_norm: float,
    weight_decay: float | None = None,
    capturable: bool = False,
    compile_backend: str = "inductor",
    copies: list[tuple[torch.Tensor, torch.Tensor]] = (),
) -> torch.optim.Optimizer:
    """AdamW of implementation `kind` over `params` (tensors or param-group dicts). `weight_decay`: every group's,
    or None where each group sets its own. `max_norm`: the clipping of the step, which the clip-in-step kinds do
    themselves. `capturable`: the step counter on the device (a captured optimizer step); the compiled and Triton
    kinds always are. `copies`: (weight, bf16 copy) pairs that the update writes, `compiled` only."""
    if kind not in ADAMW_KINDS:
        raise ValueError(f"adamw: expected one of {', '.join(ADAMW_KINDS)}, got {kind!r}")
    if copies and kind != "compiled":
        raise ValueError(f"adamw: {kind} writes no weight copies; only compiled does (bf16_weights: optimizer)")
    hyper = dict(lr=lr, betas=betas, eps=eps)
    if weight_decay is not None:
        hyper["weight_decay"] = weight_decay
    if kind == "fused-clip":
        return FusedClippedAdamW(params, max_norm=max_norm, capturable=capturable, **hyper)
    if kind == "triton-clip":
        return TritonClippedAdamW(params, max_norm=max_norm, **hyper)
    if kind == "compiled":
        return ClippedAdamW(params, max_norm=max_norm, backend=compile_backend, copies=copies, **hyper)
    return torch.optim.AdamW(params, fused=kind == "fused" or None, capturable=capturable, **hyper)


__all__ = ["ADAMW_KINDS", "AdamWKind", "CUDA_ONLY", "adamw_unsupported_reason", "build_adamw"]
