"""SigLIP2's window packing as the reference runs it (`vision_packing: reference`, models/gr00t/window_packing.py):
the windows it cuts, the tokens it reorders and puts back, and the vision tower's values unchanged by it."""

from dataclasses import replace

import pytest
import torch

from models.gr00t.config import TINY
from models.gr00t.model import SiglipVision
from models.gr00t.window_packing import Window, image_lengths, pack_windows, unpacking_index, window_rope_table


def tokens(grids, channels=3):
    total = sum(r * c for r, c in grids)
    return torch.arange(total * channels, dtype=torch.float32).view(1, total, channels)


def test_an_18x18_grid_is_cut_into_the_references_four_windows_and_put_back():
    grids = [(18, 18), (18, 18)]
    x = tokens(grids)
    packed, windows = pack_windows(x, grids, 14)
    assert windows[:4] == [
        Window(0, 0, 0, 14, 14),
        Window(0, 0, 14, 14, 4),
        Window(0, 14, 0, 4, 14),
        Window(0, 14, 14, 4, 4),
    ]
    assert [w.image for w in windows] == [0] * 4 + [1] * 4
    assert packed.shape == x.shape and not torch.equal(packed, x)
    # the first window is the top-left 14x14 patches of image 0, row by row; the second starts at column 14
    assert torch.equal(packed[0, :14], x[0, :14]) and torch.equal(packed[0, 14:28], x[0, 18:32])
    assert torch.equal(packed[0, 196], x[0, 14])
    assert image_lengths(windows) == [324, 324]
    assert torch.equal(packed[:, unpacking_index(windows, grids)], x)


@pytest.mark.parametrize("grids", [[(4, 4)], [(5, 7), (5, 7), (3, 3)], [(3, 3), (6, 2)]])
def test_packing_then_the_unpacking_index_is_the_identity(grids):
    x = tokens(grids)
    packed, windows = pack_windows(x, grids, 3)
    assert sorted(packed.flatten().tolist()) == x.flatten().tolist()  # every token once
    assert torch.equal(packed[:, unpacking_index(windows, grids)], x)
    assert image_lengths(windows) == [r * c for r, c in grids]
    assert sum(w.rows * w.cols for w in windows) == x.shape[1]


def test_the_rope_table_is_cut_per_window():
    grids = [(5, 4)]
    _, windows = pack_windows(tokens(grids), grids, 3)
    table = torch.arange(5 * 4 * 2, dtype=torch.float32).view(5, 4, 2).to(torch.complex64)
    rows = window_rope_table(windows, table)
    assert rows.shape == (1, 20, 2) and rows.dtype == torch.complex64
    assert torch.equal(rows[0, :3], table[0, :3]) and torch.equal(rows[0, 9], table[0, 3])  # second window: column 3


@pytest.mark.parametrize("window", [14, 3])
def test_the_vision_tower_gives_the_same_values_through_the_references_packing(window):
    """The tiny tower (4x4 patches): one cut window per image at the reference's 14, four windows at 3; whole-image
    attention makes the order irrelevant, so the output is the batched path's up to summation order."""
    torch.manual_seed(0)
    vision = SiglipVision(replace(TINY.vision, window=window)).eval()
    images = torch.rand(3, 3, TINY.vision.image_size, TINY.vision.image_size) * 2 - 1
    with torch.no_grad():
        plain = vision(images)
        vision.reference_packing = True
        packed = vision(images)
    assert packed.shape == plain.shape
    assert torch.allclose(packed, plain, rtol=1e-5, atol=1e-5)
    assert vision._rope_table.shape == (4, 4, TINY.vision.width // TINY.vision.heads // 2)
