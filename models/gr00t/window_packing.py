"""SigLIP2's window packing as the reference's step does it (option `vision_packing: reference`).

Eagle-Block2A-2B-v2's SigLIP2 (`modeling_siglip2.py`: `Siglip2VisionEmbeddings.forward`,
`split_patch_embeddings_to_windows_with_meta`, `Rope2DPosEmb.get_freqs_cis`, the attention's per-image lengths
and the reverse mapping after `post_layernorm`) patchifies and resizes the position grid image by image, cuts
every image's patches into 14x14-patch windows, reorders the tokens window by window, builds a 2D-RoPE table
per window and, after the encoder, puts every token back with an index made in Python. Its config sets
`use_rope: false` and `use_windows_attn: false`: no layer reads the table, every layer attends over whole
images, so none of this changes a value. It is host work (Python loops over images, windows and patches, a few
thousand small tensor operations, two indexes copied from host lists) that an eager baseline pays on every
step, and this module does the same work so that the community rung pays it too.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import NamedTuple

import torch
import torch.nn.functional as F


class Window(NamedTuple):
    image: int
    top: int  # in patches, inside the image
    left: int
    rows: int  # the window's patches inside the image (edge windows are cut)
    cols: int


def pack_windows(x: torch.Tensor, grids: list[tuple[int, int]], size: int) -> tuple[torch.Tensor, list[Window]]:
    """[1, sum(rows*cols), C] patch tokens, image after image in raster order -> the same tokens window by
    window ([1, sum(rows*cols), C]: each image's windows in raster order, each window's patches in raster order),
    with the windows. Images of one grid are cut together (padded to whole windows, unfolded, the padding then
    dropped window by window), as the reference cuts them."""
    starts = list(itertools.accumulate((r * c for r, c in grids), initial=0))
    channels = x.shape[-1]
    by_grid: dict[tuple[int, int], list[int]] = defaultdict(list)
    for image, grid in enumerate(grids):
        by_grid[grid].append(image)
    pieces, windows = [], []
    for (rows, cols), images in by_grid.items():
        planes = torch.stack(
            [x[0, starts[i] : starts[i] + rows * cols].t().reshape(channels, rows, cols) for i in images]
        )
        planes = F.pad(planes, (0, -cols % size, 0, -rows % size))
        across = planes.shape[-1] // size
        count = across * (planes.shape[-2] // size)
        cut = F.unfold(planes, kernel_size=size, stride=size)  # [images, C*size*size, windows]
        pieces.append(
            cut.view(len(images), channels, size * size, count).permute(0, 3, 2, 1).reshape(-1, size * size, channels)
        )
        for image in images:
            for k in range(count):
                top, left = divmod(k, across)
                top, left = top * size, left * size
                windows.append(Window(image, top, left, min(size, rows - top), min(size, cols - left)))
    order = sorted(range(len(windows)), key=lambda k: windows[k][:3])
    padded = torch.cat(pieces)[order]  # indexed by a host list: copied to the device
    windows = [windows[k] for k in order]
    kept = [
        w
        if win.rows * win.cols == size * size
        else w.view(size, size, channels)[: win.rows, : win.cols].reshape(-1, channels)
        for win, w in zip(windows, padded)
    ]
    return torch.cat(kept).unsqueeze(0), windows


def unpacking_index(windows: list[Window], grids: list[tuple[int, int]]) -> torch.Tensor:
    """A host index that takes the packed tokens back to image raster order, patch by patch."""
    starts = list(itertools.accumulate((r * c for r, c in grids), initial=0))
    back = [0] * starts[-1]
    at = 0
    for win in windows:
        cols = grids[win.image][1]
        for u in range(win.rows):
            row = starts[win.image] + (win.top + u) * cols + win.left
            for v in range(win.cols):
                back[row + v] = at
                at += 1
    return torch.tensor(back, dtype=torch.long)


def window_rope_table(windows: list[Window], table: torch.Tensor) -> torch.Tensor:
    """The 2D-RoPE table rows of every window, concatenated, as the encoder builds them before its layers
    ([1, tokens, head_dim/2] complex64). No layer reads it (`use_rope: false`)."""
    rows = [table[w.top : w.top + w.rows, w.left : w.left + w.cols].reshape(-1, table.shape[-1]) for w in windows]
    return torch.cat(rows).unsqueeze(0)


def image_lengths(windows: list[Window]) -> list[int]:
    """Every image's token count, summed over its windows: what each attention layer recomputes (whole-image
    attention, `use_windows_attn: false`)."""
    lengths: dict[int, int] = defaultdict(int)
    for w in windows:
        lengths[w.image] += w.rows * w.cols
    return [lengths[i] for i in range(len(lengths))]
