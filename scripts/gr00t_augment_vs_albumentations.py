"""Isaac-GR00T's training augmentation, ours (models/gr00t/augment.py) against albumentations 1.4.18 (the version
scripts/isaac-gr00t-reference/prepare.sh installs for the reference) on the same draws: each colour-jitter
operation alone, and the whole transform, on a dataset's frames. Prints how many pixel values differ and by
how much. Needs albumentations==1.4.18 (not a vlabench dependency):

    pip install albumentations==1.4.18
    python scripts/gr00t_augment_vs_albumentations.py [DATASET] [--samples N]

DATASET: a LeRobot dataset folder (default: the CPU smoke's runs/datasets/libero-synthetic-smoke, made when
missing as scripts/gr00t_augment_cost.py makes it); --noise uses uniform random frames of the same shape.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from harness.data.dataset import LeRobotV3Dataset  # noqa: E402
from harness.data.lerobot_format import LIBERO_CAMERAS  # noqa: E402
from models.gr00t.augment import AUGMENTATIONS, JitterDraw  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", default="runs/datasets/libero-synthetic-smoke")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--noise", action="store_true", help="uniform random frames instead of the dataset's")
    args = parser.parse_args()
    try:
        import albumentations as A
        import albumentations.augmentations.functional as AF
        import cv2
    except ImportError as e:
        sys.exit(f"needs albumentations 1.4.18 (pip install albumentations==1.4.18): {e}")
    root = Path(args.dataset)
    if not (root / "meta" / "info.json").is_file():
        from harness.cli import main as cli

        cli(["make-dataset", "--source", "synthetic", "--episodes", "4", "--out", str(root)])
    ours = AUGMENTATIONS["isaac-gr00t"]
    dataset = LeRobotV3Dataset(root, action_horizon=16, cameras=list(LIBERO_CAMERAS))
    theirs_ops = [
        AF.adjust_brightness_torchvision,
        AF.adjust_contrast_torchvision,
        AF.adjust_saturation_torchvision,
        AF.adjust_hue_torchvision,
    ]
    names = ["brightness", "contrast", "saturation", "hue"]
    n = min(args.samples, len(dataset))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:n].tolist()
    per_op = {name: [] for name in names}
    whole = []
    for k, i in enumerate(order):
        sample = dataset[i]
        views = [np.ascontiguousarray(np.asarray(sample[c])) for c in LIBERO_CAMERAS]
        if args.noise:  # every value at every position: the lookup tables' and HSV's edges all get hit
            views = [
                np.random.default_rng([k, v]).integers(0, 256, w.shape, dtype=np.uint8) for v, w in enumerate(views)
            ]
        generator = torch.Generator().manual_seed(k)
        draw = ours.draw_jitter(torch.Generator().manual_seed(10_000 + k))
        factors = [draw.brightness, draw.contrast, draw.saturation, draw.hue]
        for op, name in enumerate(names):  # each operation alone, on the frame as read
            one = JitterDraw(1.0, 1.0, 1.0, 0.0, (op,))
            one = JitterDraw(**{**one.__dict__, name: factors[op]})
            per_op[name].append(compare(ours.jitter(views[0], one), theirs_ops[op](views[0].copy(), factors[op])))
        # the whole transform with our draws replayed into albumentations' pipeline
        ours_out = ours(torch.from_numpy(np.stack(views)), generator).numpy()
        crop = ours.draw_crop(256, 256, torch.Generator().manual_seed(k))  # the crop ours drew first
        top, left, ch, cw = crop
        pipeline = A.Compose(
            [
                A.SmallestMaxSize(ours.shortest_edge, interpolation=cv2.INTER_AREA),
                A.Crop(left, top, left + cw, top + ch),
                A.SmallestMaxSize(ours.shortest_edge, interpolation=cv2.INTER_AREA),
            ]
        )
        jitter = A.ColorJitter(ours.brightness, ours.contrast, ours.saturation, ours.hue, p=1.0)
        drawn = ours.draw_jitter(_after_crop(k))
        params = dict(
            brightness=drawn.brightness,
            contrast=drawn.contrast,
            saturation=drawn.saturation,
            hue=drawn.hue,
            order=list(drawn.order),
        )
        for v, view in enumerate(views):
            theirs = jitter.apply(pipeline(image=view)["image"], **params)
            whole.append(compare(ours_out[v], theirs))
    frames = "uniform random frames" if args.noise else str(root)
    print(
        f"{frames}: {n} samples, {len(LIBERO_CAMERAS)} views of {views[0].shape}; ours against albumentations {A.__version__}"
    )
    for name in names:
        print(f"  {name:11s} alone: {summary(per_op[name])}")
    print(f"  whole transform: {summary(whole)}")
    dataset.close()
    return 0


def _after_crop(k: int) -> torch.Generator:
    """Our generator for sample k, advanced past the crop's two draws (the jitter's draws follow them)."""
    generator = torch.Generator().manual_seed(k)
    AUGMENTATIONS["isaac-gr00t"].draw_crop(256, 256, generator)
    return generator


def compare(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int]:
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return int((diff > 0).sum()), int(diff.max()), diff.size


def summary(rows: list[tuple[int, int, int]]) -> str:
    differ, worst, size = sum(r[0] for r in rows), max(r[1] for r in rows), sum(r[2] for r in rows)
    return f"{differ} of {size} values differ ({100 * differ / size:.4f}%), by at most {worst}"


if __name__ == "__main__":
    raise SystemExit(main())
