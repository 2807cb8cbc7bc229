"""Isaac-GR00T's training augmentation, ours (models/gr00t/augment.py) against the reference's own: Isaac-GR00T's
`build_image_transformations_albumentations` run through its `apply_with_replay` (image_augmentations.py at the
N1.6 release), with albumentations 1.4.18 as the reference's environment pins it.

For each sample the reference transforms both views (its draws, replayed on the second view); its replay record's
crop and jitter draws are then given to ours, and the outputs compared value by value. Each jitter operation is
also compared alone, and both transforms are timed on one thread, as a DataLoader worker runs them.

    pip install albumentations==1.4.18                     # not a vlabench dependency
    git -C MIRROR show 4e62473:gr00t/model/gr00t_n1d6/image_augmentations.py > SRC/gr00t/model/gr00t_n1d6/image_augmentations.py
    python scripts/gr00t_augment_vs_albumentations.py --reference SRC [DATASET] [--samples N] [--noise]

SRC: a folder holding Isaac-GR00T's `gr00t/` (scripts/isaac-gr00t-reference/prepare.sh extracts it into .isaac/;
the default). DATASET: a LeRobot dataset folder (default: the CPU smoke's runs/datasets/libero-synthetic-smoke,
made when missing); --noise uses uniform random frames of the same shape.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import time
import types
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")

from harness.data.dataset import LeRobotV3Dataset  # noqa: E402
from harness.data.lerobot_format import LIBERO_CAMERAS  # noqa: E402
from models.gr00t.augment import AUGMENTATIONS, JitterDraw  # noqa: E402

OURS = AUGMENTATIONS["isaac-gr00t"]
NAMES = ("brightness", "contrast", "saturation", "hue")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dataset", nargs="?", default="runs/datasets/libero-synthetic-smoke")
    parser.add_argument("--reference", default=str(ROOT / ".isaac"), help="folder holding Isaac-GR00T's gr00t/")
    parser.add_argument("--samples", type=int, default=64)
    parser.add_argument("--noise", action="store_true", help="uniform random frames instead of the dataset's")
    parser.add_argument(
        "--golden",
        type=Path,
        help="also write the reference's outputs on seeded random frames (their hashes and draws) to this JSON, "
        "which tests/test_gr00t_augment.py checks ours against without albumentations",
    )
    args = parser.parse_args()
    reference = load_reference(Path(args.reference))
    import albumentations as A
    import albumentations.augmentations.functional as AF
    import cv2

    cv2.setNumThreads(1)
    torch.set_num_threads(1)
    train, _ = reference.build_image_transformations_albumentations(
        [256, 256], None, None, {n: getattr(OURS, n) for n in NAMES}, OURS.shortest_edge, OURS.crop_fraction
    )
    their_ops = [getattr(AF, f"adjust_{n}_torchvision") for n in NAMES]
    samples = frames(Path(args.dataset), args.samples, args.noise)
    per_op, whole, times = {n: [] for n in NAMES}, [], {"reference": [], "ours": []}
    for k, views in enumerate(samples):
        np.random.seed(k)
        start = time.perf_counter()
        theirs, replay = reference.apply_with_replay(train, views)
        times["reference"].append(time.perf_counter() - start)
        start = time.perf_counter()
        OURS(torch.from_numpy(np.stack(views)), torch.Generator().manual_seed(k))
        times["ours"].append(time.perf_counter() - start)
        crop, draw = replayed_draws(replay)
        ours = [OURS.jitter(v, draw) for v in OURS.crop_and_resize([OURS.resize_shortest(v) for v in views], crop)]
        whole += [compare(o, t.permute(1, 2, 0).numpy()) for o, t in zip(ours, theirs)]
        factors = [getattr(draw, n) for n in NAMES]
        for op, name in enumerate(NAMES):  # each operation alone, on the frame as read
            alone = JitterDraw(**{**dict(zip(NAMES, (1.0, 1.0, 1.0, 0.0))), name: factors[op], "order": (op,)})
            per_op[name].append(compare(OURS.jitter(views[0], alone), their_ops[op](views[0].copy(), factors[op])))
    source = "uniform random frames" if args.noise else args.dataset
    shape = samples[0][0].shape
    print(f"{source}: {len(samples)} samples of {len(samples[0])} views {shape}; albumentations {A.__version__}")
    for name in NAMES:
        print(f"  {name:11s} alone:  {summary(per_op[name])}")
    print(f"  whole transform:   {summary(whole)}")
    for name, ts in times.items():
        print(f"  {name:9s} ms/sample, 1 thread: median {1000 * statistics.median(ts):.2f}")
    if args.golden:
        write_golden(args.golden, reference, train, A.__version__, cv2.__version__)
    return 0


GOLDEN_SAMPLES, GOLDEN_SHAPE = 8, (256, 256, 3)


def golden_views(seed: int) -> list[np.ndarray]:
    """The two random LIBERO-shaped views of golden sample `seed` (tests/test_gr00t_augment.py makes the same)."""
    return [np.random.default_rng([seed, v]).integers(0, 256, GOLDEN_SHAPE, dtype=np.uint8) for v in range(2)]


def write_golden(path: Path, reference, train, albumentations: str, opencv: str) -> None:
    import hashlib
    import json

    samples = []
    for seed in range(GOLDEN_SAMPLES):
        np.random.seed(seed)
        outputs, replay = reference.apply_with_replay(train, golden_views(seed))
        crop, draw = replayed_draws(replay)
        samples.append(
            {
                "seed": seed,
                "crop": list(crop),
                "jitter": {**{n: getattr(draw, n) for n in NAMES}, "order": list(draw.order)},
                "sha256": [
                    hashlib.sha256(o.permute(1, 2, 0).contiguous().numpy().tobytes()).hexdigest() for o in outputs
                ],
            }
        )
    doc = {
        "what": "Isaac-GR00T's training image transform (build_image_transformations_albumentations through "
        "apply_with_replay, image_augmentations.py at NVIDIA/Isaac-GR00T 4e62473) on seeded uniform random "
        "256x256 views: its replayed draws and the SHA-256 of each output view (uint8 HWC)",
        "made_by": "python scripts/gr00t_augment_vs_albumentations.py --reference SRC --golden PATH",
        "albumentations": albumentations,
        "opencv": opencv,
        "views": "np.random.default_rng([seed, view]).integers(0, 256, (256, 256, 3), dtype=np.uint8), view 0 and 1",
        "samples": samples,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {path}: {len(samples)} samples")


def load_reference(source: Path):
    """Isaac-GR00T's image_augmentations module, from its source tree. It imports torchvision's transforms for
    its torchvision variant, which this comparison does not use; a stand-in is put in when torchvision does not
    import."""
    path = source / "gr00t" / "model" / "gr00t_n1d6" / "image_augmentations.py"
    if not path.is_file():
        sys.exit(f"{path}: expected Isaac-GR00T's image_augmentations.py (see this script's docstring)")
    try:
        import torchvision.transforms.v2  # noqa: F401
    except Exception:
        stand_in = {
            n: types.ModuleType(n) for n in ("torchvision", "torchvision.transforms", "torchvision.transforms.v2")
        }
        sys.modules.update(stand_in)
    try:
        import albumentations  # noqa: F401
    except ImportError as e:
        sys.exit(f"needs albumentations 1.4.18 (pip install albumentations==1.4.18): {e}")
    spec = importlib.util.spec_from_file_location("isaac_image_augmentations", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def frames(root: Path, n: int, noise: bool) -> list[list[np.ndarray]]:
    if not (root / "meta" / "info.json").is_file():
        from harness.cli import main as cli

        cli(["make-dataset", "--source", "synthetic", "--episodes", "4", "--out", str(root)])
    dataset = LeRobotV3Dataset(root, action_horizon=16, cameras=list(LIBERO_CAMERAS))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[: min(n, len(dataset))]
    out = []
    for k, i in enumerate(order.tolist()):
        views = [np.ascontiguousarray(np.asarray(dataset[i][c])) for c in LIBERO_CAMERAS]
        if noise:  # every value at every position: the lookup tables' and HSV's edges all get hit
            views = [
                np.random.default_rng([k, v]).integers(0, 256, w.shape, dtype=np.uint8) for v, w in enumerate(views)
            ]
        out.append(views)
    dataset.close()
    return out


def replayed_draws(replay: dict) -> tuple[tuple[int, int, int, int], JitterDraw]:
    """The reference's crop, as ours takes it (top, left, height, width), and its colour-jitter draws."""
    params = {t["__class_fullname__"].rsplit(".", 1)[-1]: t["params"] for t in replay["transforms"]}
    x_min, y_min, x_max, y_max = params["FractionalRandomCrop"]["crop_coords"]
    jitter = params["ColorJitter"]
    draw = JitterDraw(*(float(jitter[n]) for n in NAMES), tuple(jitter["order"]))
    return (y_min, x_min, y_max - y_min, x_max - x_min), draw


def compare(a: np.ndarray, b: np.ndarray) -> tuple[int, int, int]:
    assert a.shape == b.shape, (a.shape, b.shape)
    diff = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return int((diff > 0).sum()), int(diff.max()), diff.size


def summary(rows: list[tuple[int, int, int]]) -> str:
    differ, worst, size = sum(r[0] for r in rows), max(r[1] for r in rows), sum(r[2] for r in rows)
    return f"{differ} of {size} values differ ({100 * differ / size:.4f}%), by at most {worst}"


if __name__ == "__main__":
    raise SystemExit(main())
