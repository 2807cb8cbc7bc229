"""Isaac-GR00T N1.6's training image augmentation (loader option `augment: isaac-gr00t`), per sample in the
DataLoader workers, written from the reference's behaviour (docs/gr00t.md, "The reference's data path") with the
library the reference runs it in, OpenCV (albumentations' uint8 operations):

1. the shortest edge resized to 256 with INTER_AREA (a no-op on LIBERO's 256x256 frames),
2. a random crop of 95% of each side (`int(side * 0.95)`, at a uniformly drawn position),
3. the shortest edge resized back to 256 with INTER_AREA,
4. colour jitter, the four in a random order: brightness x U[0.7, 1.3] and contrast x U[0.6, 1.4] (towards the
   view's mean grey) as 256-entry lookup tables, saturation x U[0.5, 1.5] towards each pixel's grey
   (`addWeighted`), hue + U[-0.08, 0.08] of a turn on OpenCV's 180-level uint8 HSV hue.

Every view of a sample gets the same crop and the same jitter (the reference replays the first view's draws).
Where we differ: only the draws. They come from the generator passed in (the harness seeds one per sample from
the run's seed and the sample's position in the stream, so a batch is the same whatever the worker count), not
from the workers' global `random` state. Given the reference's draws the output is the reference's transform's
(Isaac-GR00T's own code with albumentations 1.4.18) bit for bit: scripts/gr00t_augment_vs_albumentations.py.

OpenCV is imported when the augmentation is set up, not at import (the `data` and `dev` extras install
opencv-python-headless; the `sim` extra's robosuite brings opencv-python, which serves as well).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

OPENCV_MISSING = "loader.augment isaac-gr00t runs in OpenCV, as the reference does: pip install opencv-python-headless"


def opencv():
    try:
        import cv2
    except ImportError:
        raise ImportError(OPENCV_MISSING) from None
    return cv2


@dataclass(frozen=True)
class JitterDraw:
    brightness: float
    contrast: float
    saturation: float
    hue: float
    order: tuple[int, ...]  # 0 brightness, 1 contrast, 2 saturation, 3 hue


@dataclass(frozen=True)
class IsaacGr00tAugment:
    """The reference's defaults: Gr00tN1d6Config (shortest_image_edge 256, crop_fraction 0.95) and the LIBERO
    fine-tuning scripts' `--color_jitter_params brightness 0.3 contrast 0.4 saturation 0.5 hue 0.08`."""

    shortest_edge: int = 256
    crop_fraction: float = 0.95
    brightness: float = 0.3
    contrast: float = 0.4
    saturation: float = 0.5
    hue: float = 0.08

    def describe(self) -> dict:
        return {"name": "isaac-gr00t", **asdict(self), "opencv": opencv().__version__}

    # -- draws, in a fixed order from one generator
    def draw_crop(self, height: int, width: int, generator: torch.Generator) -> tuple[int, int, int, int]:
        """(top, left, crop height, crop width) of the 95% crop of a height x width image."""
        ch, cw = max(1, int(height * self.crop_fraction)), max(1, int(width * self.crop_fraction))
        top = int(torch.randint(0, height - ch + 1, (), generator=generator))
        left = int(torch.randint(0, width - cw + 1, (), generator=generator))
        return top, left, ch, cw

    def draw_jitter(self, generator: torch.Generator) -> JitterDraw:
        u = torch.rand(4, generator=generator, dtype=torch.float64).tolist()

        def factor(spread: float, x: float) -> float:
            return max(0.0, 1.0 - spread) + x * (1.0 + spread - max(0.0, 1.0 - spread))

        order = tuple(torch.randperm(4, generator=generator).tolist())
        return JitterDraw(
            factor(self.brightness, u[0]),
            factor(self.contrast, u[1]),
            factor(self.saturation, u[2]),
            -self.hue + 2 * self.hue * u[3],
            order,
        )

    # -- the operations, on one view: uint8 [H, W, 3] (RGB) in, uint8 out
    def resize_shortest(self, view: np.ndarray) -> np.ndarray:
        h, w = view.shape[:2]
        scale = self.shortest_edge / min(h, w)
        size = (max(1, round(h * scale)), max(1, round(w * scale)))
        if size == (h, w):
            return view
        cv2 = opencv()
        return cv2.resize(view, size[::-1], interpolation=cv2.INTER_AREA)

    def geometry(self, views: list[np.ndarray], generator: torch.Generator) -> list[np.ndarray]:
        """Steps 1-3 for every view with one crop: resize, random 95% crop, resize back."""
        views = [self.resize_shortest(v) for v in views]
        return self.crop_and_resize(views, self.draw_crop(*views[0].shape[:2], generator))

    def crop_and_resize(self, views: list[np.ndarray], crop: tuple[int, int, int, int]) -> list[np.ndarray]:
        """Steps 2-3 with a given (top, left, height, width) crop."""
        top, left, ch, cw = crop
        return [self.resize_shortest(np.ascontiguousarray(v[top : top + ch, left : left + cw])) for v in views]

    @staticmethod
    def jitter(view: np.ndarray, d: JitterDraw) -> np.ndarray:
        cv2 = opencv()
        for op in d.order:
            if op == 0:
                view = cv2.LUT(view, _table(np.arange(256) * d.brightness))
            elif op == 1:
                mean = cv2.cvtColor(view, cv2.COLOR_RGB2GRAY).mean()
                view = cv2.LUT(view, _table(np.arange(256) * d.contrast + mean * (1 - d.contrast)))
            elif op == 2:
                grey = cv2.cvtColor(cv2.cvtColor(view, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB)
                view = cv2.addWeighted(view, d.saturation, grey, 1 - d.saturation, 0)
            else:
                view = shift_hue(view, d.hue)
        return view

    def __call__(self, frames: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """uint8 [V, H, W, 3] (a sample's views) -> uint8 [V, H', W', 3], the same draws for every view."""
        views = self.geometry([np.ascontiguousarray(v) for v in frames.numpy()], generator)
        draw = self.draw_jitter(generator)
        return torch.from_numpy(np.stack([self.jitter(v, draw) for v in views]))


def _table(values: np.ndarray) -> np.ndarray:
    """A uint8 lookup table from float values: clipped to 0..255, then truncated (albumentations' LUTs)."""
    return np.clip(values, 0, 255).astype(np.uint8)


def shift_hue(view: np.ndarray, turn: float) -> np.ndarray:
    """RGB uint8 with its hue rotated by `turn` of a full turn on OpenCV's uint8 HSV (hue in 0..179)."""
    cv2 = opencv()
    if turn == 0:
        return view
    hsv = cv2.cvtColor(view, cv2.COLOR_RGB2HSV)
    hsv[..., 0] = cv2.LUT(hsv[..., 0], np.mod(np.arange(256) + 180 * turn, 180).astype(np.uint8))
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)


@dataclass(frozen=True)
class SampleAugment:
    """A dataset sample's camera frames (uint8 HxWx3) augmented together, in the worker that read it (the
    harness's per-sample transform: harness/data/pipeline.py PerSample)."""

    cameras: tuple[str, ...]
    augment: IsaacGr00tAugment

    def __call__(self, sample: dict, generator: torch.Generator) -> dict:
        frames = self.augment(torch.stack([torch.as_tensor(sample[c]) for c in self.cameras]), generator)
        return {**sample, **{c: frames[i] for i, c in enumerate(self.cameras)}}

    def describe(self) -> dict:
        return self.augment.describe()


AUGMENTATIONS = {"isaac-gr00t": IsaacGr00tAugment()}
