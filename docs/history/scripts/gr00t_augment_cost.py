"""Per-sample cost of GR00T's worker-side data path, with and without the training augmentation
(`augment: isaac-gr00t`, in OpenCV as the reference's albumentations), on one thread as a DataLoader worker
runs it (torch sets 1 thread in its workers; OpenCV is set to 1 here too).

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

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # kept under docs/history/scripts/: the repository root

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
    import cv2

    cv2.setNumThreads(1)
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
    frame = samples[0][0][cameras[0]].shape
    ms = lambda xs: 1000 * statistics.median(xs)  # noqa: E731
    print(f"dataset {root} ({len(dataset)} frames, {len(cameras)} views of {tuple(frame)}), {n} samples, 1 thread")
    print(f"  read (decode):           {ms(read):7.2f} ms/sample")
    print(f"  augment (isaac-gr00t):   {ms(aug):7.2f} ms/sample")
    print(f"  collate (batch {args.batch}):     {1000 * collate['plain']:7.2f} ms/sample")
    print(f"  worker total, none:      {ms(read) + 1000 * collate['plain']:7.2f} ms/sample")
    print(f"  worker total, augmented: {ms(read) + ms(aug) + 1000 * collate['augmented']:7.2f} ms/sample")
    dataset.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
