"""What the families' data processors share (models.family.DataProcessor): the three steps run in one go for tests
and small tools, and the model's action chunk turned back into the robot's actions."""

from __future__ import annotations

import numpy as np
import torch


class ProcessorSteps:
    """Mixed into a family's processor, which has `collate`, `prepare`, `finish` and an `action_norm`
    (models.normalize.Normalizer)."""

    def training_batch(
        self,
        samples: list[dict],
        cameras: tuple[str, ...],
        generator: torch.Generator,
        dtype: torch.dtype = torch.float32,
    ) -> dict:
        """collate, prepare and finish in one go, on the CPU (tests, small tools)."""
        return self.finish(self.prepare(self.collate(samples, cameras), generator), dtype)

    def actions_out(self, actions: np.ndarray, dims: int) -> np.ndarray:
        """Model actions [H, action_dim] -> the robot's first `dims` dimensions, unnormalised."""
        return self.action_norm.unnormalize(np.asarray(actions[:, :dims], dtype=np.float64))
