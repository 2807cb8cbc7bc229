"""What the families' data processors share (models.family.DataProcessor): the three steps run in one go for tests
and small tools, and the model's action chunk turned back into the robot's actions."""

from __future__ import annotations

import numpy as np
import torch


def stack_frames(samples: list[dict], cameras: tuple[str, ...]) -> torch.Tensor:
    """The samples' camera frames (uint8 HxWx3 each) as uint8 [B, V, H, W, 3], cameras in the given order."""
    return torch.stack([torch.stack([torch.as_tensor(s[c]) for c in cameras]) for s in samples])


class ProcessorSteps:
    """Mixed into a family's processor, which has `raw_frames`, `collate_fields`, `prepare`, `finish` and an
    `action_norm` (models.normalize.Normalizer)."""

    @classmethod
    def collate(cls, samples: list[dict], cameras: tuple[str, ...]) -> dict:
        """In the loader's worker processes: samples with LeRobot's keys (camera keys uint8 HxWx3,
        `observation.state`, `action` [H, d], `task`) as the family's raw batch: the camera frames stacked to
        uint8 [B, V, H, W, 3] and made `frames` by `raw_frames`, the other fields by `collate_fields`. The memory
        loader (harness/data/memory.py) builds the same batch from frames it holds and the other fields."""
        return {"frames": cls.raw_frames(stack_frames(samples, cameras)), **cls.collate_fields(samples)}

    def host_finish(self, batch: dict) -> dict:
        """The part of `finish` that runs on the CPU in the loader's workers (loader option `preprocess:
        workers`), in float32; `finish` then does the rest on the device. None by default."""
        return batch

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
