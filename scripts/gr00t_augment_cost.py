"""Per-sample cost of GR00T's worker-side data path, with and without the training augmentation
(`augment: isaac-gr00t`), on one thread as a DataLoader worker runs it (torch sets 1 thread in its workers).

    python scripts/gr00t_augment_cost.py [DATASET] [--samples N] [--batch B]

DATASET: a LeRobot dataset folder (default: the CPU smoke's runs/datasets/libero-synthetic-smoke, made as
`vlabench make-dataset --source synthetic --episodes 4 --out ...` makes it when missing). Prints the median
milliseconds per sample of reading (decode), augmenting and collating, and the worker-side total either way.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.data.dataset import LeRobotV3Dataset  # noqa: E402
from harness.data.lerobot_format import LIBERO_CAMERAS  # noqa: E402
from harness.data.pipeline import sample_generator  # noqa: E402
from models.gr00t.processor import Gr00tProcessor  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", default="runs/datasets/libero-synthetic-smoke")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    root = Path(args.dataset)
    if not (root / "meta" / "info.json").is_file():
        from harness.cli import main as cli

        cli(["make-dataset", "--source", "synthetic", "--episodes", "4", "--out", str(root)])
    torch.set_num_threads(1)
    cameras = tuple(LIBERO_CAMERAS)
    dataset = LeRobotV3Dataset(root, action_horizon=16, cameras=list(cameras))
    augment = Gr00tProcessor.sample_transform("isaac-gr00t", cameras)
    n = min(args.samples, len(dataset))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:n].tolist()
    read, aug, samples = [], [], []
    dataset[order[0]]  # open the decoders once
    for position, i in enumerate(order):
        start = time.perf_counter()
        sample = dataset[i]
        read.append(time.perf_counter() - start)
        start = time.perf_counter()
        augmented = augment(sample, sample_generator(0, position))
        aug.append(time.perf_counter() - start)
        samples.append((sample, augmented))
    collate = {}
    for name, which in (("plain", 0), ("augmented", 1)):
        times = []
        for k in range(0, n - args.batch + 1, args.batch):
            batch = [s[which] for s in samples[k : k + args.batch]]
            start = time.perf_counter()
            Gr00tProcessor.collate(batch, cameras)
            times.append((time.perf_counter() - start) / args.batch)
        collate[name] = statistics.median(times) if times else float("nan")
    opencv = opencv_cost([s[0] for s in samples], cameras)
    frame = samples[0][0][cameras[0]].shape
    ms = lambda xs: 1000 * statistics.median(xs)  # noqa: E731
    print(f"dataset {root} ({len(dataset)} frames, {len(cameras)} views of {tuple(frame)}), {n} samples, 1 thread")
    print(f"  read (decode):           {ms(read):7.2f} ms/sample")
    print(f"  augment (isaac-gr00t):   {ms(aug):7.2f} ms/sample")
    print(f"  collate (batch {args.batch}):     {1000 * collate['plain']:7.2f} ms/sample")
    print(f"  worker total, none:      {ms(read) + 1000 * collate['plain']:7.2f} ms/sample")
    print(f"  worker total, augmented: {ms(read) + ms(aug) + 1000 * collate['augmented']:7.2f} ms/sample")
    if opencv is not None:
        print(f"  the same operations in OpenCV (the reference's library, for scale): {opencv:.2f} ms/sample")
    dataset.close()
    return 0


def opencv_cost(samples: list[dict], cameras: tuple[str, ...]) -> float | None:
    """Median ms per sample of the reference's operations written with OpenCV, as albumentations runs them on
    uint8 (INTER_AREA resizes, a 243x243 crop, the four jitter operations), when cv2 is installed; a scale for
    our torch version's cost, not part of the harness."""
    try:
        import cv2
        import numpy as np
    except ImportError:
        return None
    cv2.setNumThreads(1)
    rng = np.random.default_rng(0)
    hue_lut = lambda f: np.mod(np.arange(256) + 180 * f, 180).astype(np.uint8)  # noqa: E731
    times = []
    for sample in samples:
        start = time.perf_counter()
        top, left = rng.integers(0, 14, 2)
        b, c, s, h = rng.uniform(0.7, 1.3), rng.uniform(0.6, 1.4), rng.uniform(0.5, 1.5), rng.uniform(-0.08, 0.08)
        for camera in cameras:
            img = np.ascontiguousarray(sample[camera].numpy())
            img = cv2.resize(img, (256, 256), interpolation=cv2.INTER_AREA)
            img = cv2.resize(img[top : top + 243, left : left + 243], (256, 256), interpolation=cv2.INTER_AREA)
            img = cv2.LUT(img, np.clip(np.arange(256) * b, 0, 255).astype(np.uint8))
            mean = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY).mean()
            img = cv2.LUT(img, np.clip(np.arange(256) * c + mean * (1 - c), 0, 255).astype(np.uint8))
            grey = cv2.cvtColor(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY), cv2.COLOR_GRAY2RGB)
            img = cv2.addWeighted(img, s, grey, 1 - s, 0)
            hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV)
            hsv[..., 0] = cv2.LUT(hsv[..., 0], hue_lut(h))
            img = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


if __name__ == "__main__":
    raise SystemExit(main())
