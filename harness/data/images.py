"""Camera frames stored in the parquet files themselves: LeRobot's image features (`use_videos=False`).

LeRobot 0.6.1 writes a feature of dtype "image" as Hugging Face `datasets.Image()`: each frame is saved as a
PNG file (compress level 6) and `embed_images` moves its bytes into the data file's row, a struct column
`{bytes: binary, path: string}` (path: the PNG's file name); info.json's `video_path` is null when no feature is
a video, and the episode table has no `videos/...` columns. (src/lerobot/datasets/dataset_writer.py
`add_frame` and `_save_episode_data`, io_utils.py `embed_images`, feature_utils.py
`get_hf_features_from_features` and `create_empty_dataset_info`.)

Reading a frame reads the row group that holds it (LeRobot writes one per episode) for that camera and
decodes the PNG (or JPEG) bytes with PyAV, already a dependency of the data path; the last few row groups
stay in memory per process, so frames read in episode order cost one row-group read per episode.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .errors import DatasetError
from .video import rgb_array

ROW_GROUPS_KEPT = 8  # per process and dataset
_CODECS = {b"\x89PNG\r\n\x1a\n": "png", b"\xff\xd8\xff": "mjpeg"}


def image_bytes(column: pa.Array, path: Path, key: str) -> pa.Array:
    """The encoded images of a column as LeRobot stores them (a struct with `bytes`, or plain binary)."""
    if pa.types.is_struct(column.type) and column.type.get_field_index("bytes") >= 0:
        return column.field("bytes")
    if pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type):
        return column
    raise DatasetError(
        path,
        key,
        "a column of encoded images (struct of bytes and path, as LeRobot's image features)",
        str(column.type),
    )


def decode_image(data: bytes | None, where: str, path: Path, key: str) -> np.ndarray:
    """uint8 [H, W, 3] from PNG or JPEG bytes. A fresh decoder per image: FFmpeg's PNG decoder, reused across
    unrelated images, returns wrong pixels."""
    if not data:
        raise DatasetError(path, key, f"the encoded image of {where}", "no bytes (an image stored by path only)")
    codec = next((name for magic, name in _CODECS.items() if data.startswith(magic)), None)
    if codec is None:
        raise DatasetError(path, key, f"a PNG or JPEG image at {where}", f"bytes starting {data[:8]!r}")
    try:
        frames = av.CodecContext.create(codec, "r").decode(av.Packet(data))
    except (av.FFmpegError, ValueError) as exc:
        raise DatasetError(path, key, f"a decodable image at {where}", " ".join(str(exc).split())[:120]) from None
    if not frames:
        raise DatasetError(path, key, f"a decodable image at {where}", "no frame (truncated or damaged)")
    return rgb_array(frames[0])


class ImageRows:
    """Frames of image features, by data file and row in that file, reading a row group at a time."""

    def __init__(self):
        self._groups: dict[Path, np.ndarray] = {}  # first row of each row group, then the file's row count
        self._kept: OrderedDict[tuple[Path, int, str], pa.Array] = OrderedDict()

    def _starts(self, path: Path) -> np.ndarray:
        starts = self._groups.get(path)
        if starts is None:
            try:
                meta = pq.ParquetFile(path).metadata
            except (pa.ArrowException, OSError) as exc:
                raise DatasetError(path, None, "a readable parquet file", " ".join(str(exc).split())[:200]) from None
            sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
            starts = self._groups[path] = np.concatenate([[0], np.cumsum(sizes)])
        return starts

    def frame(self, path: Path, row: int, key: str, where: str) -> np.ndarray:
        starts = self._starts(path)
        if not 0 <= row < starts[-1]:
            raise DatasetError(path, key, f"a row {row} for {where} (per meta/episodes)", f"{starts[-1]} rows")
        group = int(np.searchsorted(starts, row, side="right")) - 1
        column = self._kept.get((path, group, key))
        if column is None:
            try:
                table = pq.ParquetFile(path).read_row_group(group, columns=[key])
            except (pa.ArrowException, OSError, KeyError) as exc:
                raise DatasetError(
                    path, key, f"a readable image column ({where})", " ".join(str(exc).split())[:200]
                ) from None
            column = self._kept[(path, group, key)] = image_bytes(table[key].combine_chunks(), path, key)
            if len(self._kept) > ROW_GROUPS_KEPT:
                self._kept.popitem(last=False)
        self._kept.move_to_end((path, group, key))
        return decode_image(column[row - int(starts[group])].as_py(), where, path, key)

    def clear(self) -> None:
        self._kept.clear()
