"""Isaac-GR00T N1.6's training image augmentation (loader option `augment: isaac-gr00t`), per sample in the
DataLoader workers, written from the reference's behaviour (docs/gr00t.md, "The reference's data path"):

1. the shortest edge resized to 256 (a no-op on LIBERO's 256x256 frames),
2. a random crop of 95% of each side (`int(side * 0.95)`, at a uniformly drawn position),
3. the shortest edge resized back to 256,
4. colour jitter: brightness x U[0.7, 1.3], contrast x U[0.6, 1.4] (towards the image's mean grey), saturation
   x U[0.5, 1.5] (towards each pixel's grey), hue + U[-0.08, 0.08] of a turn, the four in a random order.

Every view of a sample gets the same crop and the same jitter (the reference replays the first view's draws).
Pixels stay uint8 between the operations (rounded and clipped after each, as the reference's uint8 operations
are). Where we differ: the resizes are torch's antialiased bilinear, not OpenCV's INTER_AREA, and the hue
shift is done on a continuous hue, not OpenCV's 180-level uint8 one; no shape or parameter differs.

Randomness comes only from the generator passed in (the harness seeds one per sample from the run's seed and
the sample's position in the stream), so a batch is the same whatever the worker count.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

GREY = (0.299, 0.587, 0.114)  # OpenCV's RGB -> grey weights, the reference's contrast and saturation


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
        return {"name": "isaac-gr00t", **asdict(self)}

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

    # -- the operations: the geometry on uint8 [V, 3, H, W], the jitter on float [V, 3, H, W] of uint8 values
    def resize_shortest(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        scale = self.shortest_edge / min(h, w)
        size = (max(1, round(h * scale)), max(1, round(w * scale)))
        if size == (h, w):
            return x
        # torch resizes uint8 directly (rounded), fastest channels-last; antialiased when it shrinks
        x = x.contiguous(memory_format=torch.channels_last)
        return F.interpolate(x, size=size, mode="bilinear", align_corners=False, antialias=scale < 1)

    def geometry(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Steps 1-3: resize, random 95% crop, resize back."""
        x = self.resize_shortest(x)
        top, left, ch, cw = self.draw_crop(x.shape[-2], x.shape[-1], generator)
        return self.resize_shortest(x[..., top : top + ch, left : left + cw])

    @staticmethod
    def jitter(x: torch.Tensor, d: JitterDraw) -> torch.Tensor:
        for op in d.order:
            if op == 0:
                x = _uint8(x.mul_(d.brightness))
            elif op == 1:
                # per view; in float64, so that the sum's order (the thread count) cannot move a rounding
                mean = _grey(x).double().mean(dim=(-3, -2, -1), keepdim=True).to(x.dtype)
                x = _uint8(x.mul_(d.contrast).add_(mean * (1 - d.contrast)))
            elif op == 2:
                grey = _grey(x).mul_(1 - d.saturation)  # before x changes in place
                x = _uint8(x.mul_(d.saturation).add_(grey))
            else:
                x = _uint8(shift_hue(x, d.hue))
        return x

    def __call__(self, frames: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """uint8 [V, H, W, 3] (a sample's views) -> uint8 [V, H', W', 3], the same draws for every view."""
        x = self.geometry(frames.permute(0, 3, 1, 2), generator)
        x = self.jitter(x.contiguous().float(), self.draw_jitter(generator))
        return x.to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def _uint8(x: torch.Tensor) -> torch.Tensor:
    return x.round_().clamp_(0, 255)


def _grey(x: torch.Tensor) -> torch.Tensor:
    return torch.einsum("vchw,c->vhw", x, torch.tensor(GREY, dtype=x.dtype)).unsqueeze(1)


def shift_hue(x: torch.Tensor, turn: float) -> torch.Tensor:
    """RGB [V, 3, H, W] (0-255) with its hue rotated by `turn` (|turn| <= 0.5) of a full turn (HSV), value and
    saturation kept. Masks as 0/1 factors rather than torch.where, which is several times slower on the CPU."""
    r, g, b = x.unbind(1)
    v = x.amax(dim=1)
    c = v - x.amin(dim=1)
    red = (r == v).to(x.dtype)  # which channel holds the maximum: red, else green, else blue
    green = (g == v).to(x.dtype).mul_(1 - red)
    blue = 1 - red - green
    # the hue in sixths of a turn: (g - b) / c from red, (b - r) / c + 2 from green, (r - g) / c + 4 from blue
    h = red * (g - b) + green * (b - r + 2 * c) + blue * (r - g + 4 * c)
    h = h.div_(c.clamp(min=1e-6)).add_(6 * turn + 6)  # in [2, 20) for |turn| <= 0.5
    # back to RGB: channel n is v - c * clamp(min(k, 4 - k), 0, 1) with k = (n + h) mod 6, n = 5, 3, 1
    k = torch.tensor([5.0, 3.0, 1.0], dtype=x.dtype).view(1, 3, 1, 1) + h.unsqueeze(1)
    k = k.sub_(k.div(6).floor_().mul_(6))
    k = torch.minimum(k, 4 - k).clamp_(0, 1)
    return v.unsqueeze(1) - c.unsqueeze(1) * k


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
