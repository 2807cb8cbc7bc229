"""Isaac-GR00T N1.6's training augmentation in the DataLoader workers (models/gr00t/augment.py, loader option
`augment: isaac-gr00t`): its parameters, seen in what it does to known images; the same batch for a seed and
batch index whatever the worker count; training only (CPU, tiny, a dataset made by `vlabench make-dataset`).
It runs in OpenCV, as the reference's albumentations does."""

import hashlib
import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.cli import main
from harness.data.pipeline import DatasetFeed, DataSpec, LoaderOptions
from models.gr00t import FAMILY
from models.gr00t.augment import AUGMENTATIONS, IsaacGr00tAugment, JitterDraw
from models.workload import Workload

cv2 = pytest.importorskip("cv2", reason="the isaac-gr00t augmentation runs in OpenCV (the sim extra installs it)")

AUG = AUGMENTATIONS["isaac-gr00t"]
NO_JITTER = replace(AUG, brightness=0.0, contrast=0.0, saturation=0.0, hue=0.0)  # the geometry alone
WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=50, action_horizon=4, lr=1e-4, model_size="tiny", dtype="fp32")


def gen(seed):
    return torch.Generator().manual_seed(seed)


def ramp(height=256, width=256):
    """One view whose red channel is the column and green channel the row."""
    y, x = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")
    return torch.stack([x, y, torch.zeros_like(x)], dim=-1).clamp(max=255).to(torch.uint8)[None]


def test_the_reference_defaults():
    assert AUG == IsaacGr00tAugment(256, 0.95, 0.3, 0.4, 0.5, 0.08)


def test_a_random_95_percent_crop_resized_back_to_256():
    lefts, tops = set(), set()
    for seed in range(200):
        out = NO_JITTER(ramp(), gen(seed))[0].int()
        assert out.shape == (256, 256, 3)
        left, top = int(out[0, 0, 0]), int(out[0, 0, 1])
        # the crop is int(256 * 0.95) = 243 pixels wide and high: the ramp spans 242 over the 256 output pixels
        assert abs(int(out[0, -1, 0]) - left - 242) <= 1 and abs(int(out[-1, 0, 1]) - top - 242) <= 1
        lefts.add(left)
        tops.add(top)
    assert lefts == tops == set(range(14))  # every position of the 243 crop in 256, uniformly drawn


def test_the_shortest_edge_becomes_256_first():
    out = NO_JITTER(ramp(100, 150), gen(0))
    # 100x150 -> 256x384, cropped to 243x364, the shortest edge back to 256: 256 x round(364 * 256 / 243)
    assert out.shape == (1, 256, 383, 3)


def test_jitter_ranges_seen_on_a_grey_image():
    """On a uniform grey image only brightness acts (contrast, saturation and hue keep grey): x U[0.7, 1.3]."""
    grey = torch.full((1, 256, 256, 3), 100, dtype=torch.uint8)
    values = [int(AUG(grey, gen(seed))[0, 0, 0, 0]) for seed in range(200)]
    assert min(values) >= 70 and max(values) <= 130 and min(values) <= 72 and max(values) >= 128


def test_jitter_draws_cover_the_documented_ranges_in_every_order():
    draws = [AUG.draw_jitter(gen(seed)) for seed in range(3000)]
    for name, low, high in (
        ("brightness", 0.7, 1.3),
        ("contrast", 0.6, 1.4),
        ("saturation", 0.5, 1.5),
        ("hue", -0.08, 0.08),
    ):
        got = [getattr(d, name) for d in draws]
        assert low <= min(got) < low + 0.01 and high - 0.01 < max(got) <= high, name
    assert {d.order for d in draws} == set(itertools.permutations(range(4)))


def test_each_jitter_operation():
    def one(op, **factors):
        return JitterDraw(
            **{"brightness": 1.0, "contrast": 1.0, "saturation": 1.0, "hue": 0.0, **factors, "order": (op,)}
        )

    x = np.zeros((2, 2, 3), dtype=np.uint8)
    x[0] = 200  # top row grey 200, bottom row black: mean grey 100
    before = x.copy()
    assert AUG.jitter(x, one(0, brightness=1.3))[0, 0].tolist() == [255] * 3  # clipped
    assert AUG.jitter(x, one(0, brightness=0.7))[0, 0].tolist() == [140] * 3
    contrast = AUG.jitter(x, one(1, contrast=0.6))[..., 0]
    assert contrast[0, 0] == 160 and contrast[1, 0] == 40  # towards the mean grey 100
    red = np.array([[[255, 0, 0]]], dtype=np.uint8)
    assert AUG.jitter(red, one(2, saturation=0.0)).flatten().tolist() == [76] * 3  # its grey
    assert AUG.jitter(red, one(3, hue=0.5)).flatten().tolist() == [0, 255, 255]  # half a turn: cyan
    assert AUG.jitter(red, one(3, hue=1 / 3)).flatten().tolist() == [0, 255, 0]
    # OpenCV's hue has 180 levels: a shift of 1/360 of a turn (half a level) truncates to no change
    assert AUG.jitter(red, one(3, hue=1 / 360)).flatten().tolist() == [255, 0, 0]
    assert np.array_equal(x, before)  # the input is never changed in place


def test_the_geometry_resizes_with_opencv_inter_area():
    """The reference's SmallestMaxSize(256, INTER_AREA): a 512x512 view is halved by 2x2 block means."""
    view = torch.from_numpy(np.random.default_rng(2).integers(0, 256, (512, 512, 3), dtype=np.uint8))
    halved = AUG.resize_shortest(view.numpy())
    blocks = view.double().reshape(256, 2, 256, 2, 3).mean(dim=(1, 3))
    assert halved.shape == (256, 256, 3) and (torch.from_numpy(halved).double() - blocks).abs().max() <= 0.5


def test_without_opencv_the_feed_refuses_in_one_line(dataset, monkeypatch):
    import sys

    from harness.data.errors import DatasetError

    monkeypatch.setitem(sys.modules, "cv2", None)  # what `import cv2` meets when OpenCV is not installed
    with pytest.raises(
        DatasetError,
        match="loader.augment: expected an augmentation whose library is installed.*pip install opencv-python-headless",
    ):
        feed(dataset)


GOLDEN = Path(__file__).parent / "fixtures" / "isaac-gr00t-augment-golden.json"


def test_bit_for_bit_the_reference_transform_given_its_draws():
    """The reference's own transform (Isaac-GR00T's image_augmentations.py through apply_with_replay, with
    albumentations 1.4.18) was run on seeded random views by scripts/gr00t_augment_vs_albumentations.py, which
    recorded its replayed draws and the SHA-256 of every output view. Ours, given those draws, must give the
    same bytes. OpenCV's resize and colour conversion can change between its versions (the reference's would
    change with them), so the hashes are checked under the OpenCV version they were made with."""
    golden = json.loads(GOLDEN.read_text())
    if cv2.__version__ != golden["opencv"]:
        pytest.skip(f"golden made with OpenCV {golden['opencv']}, this is {cv2.__version__}: rerun the script")
    assert len(golden["samples"]) == 8
    for sample in golden["samples"]:
        views = [
            np.random.default_rng([sample["seed"], v]).integers(0, 256, (256, 256, 3), dtype=np.uint8) for v in range(2)
        ]
        jitter = sample["jitter"]
        draw = JitterDraw(
            jitter["brightness"], jitter["contrast"], jitter["saturation"], jitter["hue"], tuple(jitter["order"])
        )
        ours = [
            AUG.jitter(v, draw)
            for v in AUG.crop_and_resize([AUG.resize_shortest(v) for v in views], tuple(sample["crop"]))
        ]
        assert [hashlib.sha256(o.tobytes()).hexdigest() for o in ours] == sample["sha256"], sample["seed"]


def test_both_views_get_the_same_draws():
    view = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8))
    out = AUG(torch.stack([view, view]), gen(5))
    assert torch.equal(out[0], out[1]) and not torch.equal(out[0], AUG(view[None], gen(6))[0])


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("data") / "libero-synthetic"
    args = ["make-dataset", "--source", "synthetic", "--episodes", "2", "--image-size", "32", "--out", str(root)]
    assert main(args) == 0
    return root


def feed(root, augment="isaac-gr00t", workers=0, seed=0, kind="torch", start=0):
    return DatasetFeed(
        DataSpec(dataset=str(root)),
        LoaderOptions(kind=kind, workers=workers, augment=augment),
        FAMILY,
        "tiny",
        WORKLOAD,
        torch.device("cpu"),
        torch.float32,
        seed=seed,
        start=start,
    )


def batches(root, n=3, **kwargs):
    f = feed(root, **kwargs)
    try:
        return [f.fetch(i)[0] for i in range(n)], f.describe()
    finally:
        f.close()


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_the_same_batches_whatever_the_worker_count(dataset):
    serial, described = batches(dataset, workers=0)
    parallel, _ = batches(dataset, workers=2)
    asynchronous, _ = batches(dataset, workers=2, kind="async")
    assert all(same(a, b) and same(a, c) for a, b, c in zip(serial, parallel, asynchronous))
    resumed, _ = batches(dataset, n=1, workers=2, start=2)  # batch 2 of a resumed run is batch 2
    assert same(resumed[0], serial[2])
    other, _ = batches(dataset, workers=0, seed=1)
    assert not torch.equal(other[0]["images"], serial[0]["images"])
    assert described["loader"]["augment"] == {"name": "isaac-gr00t", **vars(AUG), "opencv": cv2.__version__}


def test_the_augmentation_changes_the_images_only(dataset):
    augmented, _ = batches(dataset)
    plain, described = batches(dataset, augment="none")
    assert "augment" not in described["loader"]  # an option left off records nothing new
    for a, p in zip(augmented, plain):
        assert not torch.equal(a["images"], p["images"]) and a["images"].shape == p["images"].shape
        assert same({k: v for k, v in a.items() if k != "images"}, {k: v for k, v in p.items() if k != "images"})


def test_training_only(dataset):
    """Evaluation builds its batches with observation_batch, which never runs the workers' transform: an
    observation's images are the frames resized, whatever the training loader augments."""
    processor = FAMILY.data_processor("tiny", WORKLOAD, None, None)
    frame = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8))
    obs = {"image": frame, "wrist_image": frame, "state": np.zeros(8), "prompt": "pick it up"}
    images = processor.finish(processor.observation_batch([obs]), torch.float32)["images"]
    assert torch.equal(images, processor.images(torch.stack([frame, frame])[None]))
    assert processor.sample_transform("none", ("a",)) is None


def test_a_family_without_the_augmentation_is_one_line(dataset):
    from harness.data.errors import DatasetError
    from models.pi05 import FAMILY as PI05

    with pytest.raises(DatasetError, match="loader.augment: expected an augmentation pi05's processor has"):
        DatasetFeed(
            DataSpec(dataset=str(dataset)),
            LoaderOptions(kind="torch", workers=0, augment="isaac-gr00t"),
            PI05,
            "tiny",
            replace(WORKLOAD, text_tokens=64),
            torch.device("cpu"),
            torch.float32,
            seed=0,
        )
