"""TEST-ONLY: a switch that breaks learning while every loss of a short run stays what it was.

VLABENCH_TEST_TRAIN_SABOTAGE=freeze-time freezes the parameters through which the model knows the flow-matching
time (for Pi0.5 the time MLP and every adaRMS modulation of the action expert: `family.time_conditioning_parameters`)
before the optimizer is built. The forward pass is untouched, so the first step's loss is bit-identical and the
losses of a 20-step loss-parity check drift by no more than the weights those parameters would have moved (about
4e-6 relative on the tiny CPU model, inside the strictest parity tolerance of 1e-5). But the model can no
longer learn how noisy its input is, nor open the expert's residual gates, so its loss stops falling far above a
clean run's: the convergence check (harness/train/convergence.py) catches it. It stands for a class of real bug:
parameters silently left out of training (a wrong freeze before DDP, a branch a compiled graph detaches).

Read by the ladder's rung processes (harness/ladder/rung.py) and by `vlabench train` (harness/train/setup.py); both
record it. It lives in ladder/, the lower of the two packages, so train/ imports ladder/ and never the reverse. Never set it for a
measurement.
"""

from __future__ import annotations

import os

from torch import nn

SABOTAGE_ENV = "VLABENCH_TEST_TRAIN_SABOTAGE"
MODES = ("freeze-time",)


def configured_sabotage() -> str | None:
    """The sabotage mode from the environment (None when unset or empty); an unknown mode is an error."""
    mode = os.environ.get(SABOTAGE_ENV) or None
    if mode is not None and mode not in MODES:
        raise ValueError(f"{SABOTAGE_ENV}={mode!r}: expected one of {', '.join(MODES)}")
    return mode


def apply_sabotage(family, model: nn.Module) -> dict | None:
    """Apply the configured sabotage to a built model before its optimizer exists; returns what it did (for the
    record) or None."""
    mode = configured_sabotage()
    if mode is None:
        return None
    names = getattr(family, "time_conditioning_parameters", None)
    if names is None:
        raise ValueError(f"{SABOTAGE_ENV}: the {family.name} family names no time-conditioning parameters")
    frozen = set(names(model))
    for name, param in model.named_parameters():
        if name in frozen:
            param.requires_grad_(False)
    return {"mode": mode, "frozen_parameters": len(frozen), "env": SABOTAGE_ENV}
