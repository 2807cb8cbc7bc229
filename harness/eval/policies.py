"""Policies for LIBERO evaluation, each an `EvalPolicy` (the interface, models/policy.py): a no-op policy, the
scripted expert (expert.py) and every registered model family's policy (`family.eval_policy`)."""

from __future__ import annotations

import numpy as np

import models
from models.policy import EvalPolicy, PolicyError

from .expert import make_expert
from .protocol import ACTION_DIM, DUMMY_ACTION


class NoopPolicy(EvalPolicy):
    """Holds still with the gripper open: a floor for success rates and a way to test the machinery."""

    name = "noop"

    def __init__(self, horizon: int = 10):
        self.horizon = horizon

    def infer(self, observations: list[dict]) -> list[np.ndarray]:
        return [np.tile(np.asarray(DUMMY_ACTION, dtype=np.float32), (self.horizon, 1)) for _ in observations]

    def describe(self) -> dict:
        return {"name": self.name, "horizon": self.horizon}


POLICIES = ("noop", "expert", *models.FAMILIES)


def make_policy(name: str, checkpoint: str | None = None, **kwargs) -> EvalPolicy:
    """The policy `name`: noop, expert, or a model family's (which needs --checkpoint, or 'random')."""
    if name == "noop":
        return NoopPolicy()
    if name == "expert":
        return make_expert()
    if name in models.FAMILIES:
        if not checkpoint:
            raise PolicyError(f"--policy {name} needs --checkpoint PATH_OR_HUB_ID (or 'random' for random weights)")
        return models.get_family(name).eval_policy(checkpoint, action_dim=ACTION_DIM, **kwargs)
    raise PolicyError(f"--policy: expected one of {', '.join(POLICIES)}, got {name!r}")


__all__ = ["NoopPolicy", "POLICIES", "PolicyError", "make_policy"]
