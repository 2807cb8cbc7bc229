"""Read a LeRobotDataset v3.0 folder as a map-style torch Dataset of raw training samples.

Our own reader, not LeRobot's `LeRobotDataset`: no LeRobot release installs beside torch 2.13 (docs/data.md
says what breaks). It reads the layout LeRobot writes (see lerobot_format) with pyarrow and PyAV: cameras of
dtype video from MP4 files, cameras of dtype image (LeRobot's `use_videos=False`) from the PNGs embedded in the
data files (see images.py).

Opening checks what is cheap to check, so that a broken dataset fails at once with one line naming the file:
info.json (version, features, templates), tasks, the episode table, every data file (present, readable,
columns as info.json declares them, rows in order), every video file (present, frame size as declared,
long enough, its last needed frame decodable: a truncated MP4 fails here) and every image column (present,
holding encoded images, its last image of the declared size). Frames that fail to decode later fail with the
same kind of line.

A sample (`dataset[i]`, i a frame of the whole dataset) holds:
    <camera key>      uint8 [H, W, 3], the camera's frame at the sample's timestamp
    observation.state float32 [S]
    action            float32 [action_horizon, A], the actions of this frame and the next ones of its episode;
                      past the episode's end the last action repeats (LeRobot's delta_timestamps padding)
    action_is_pad     bool [action_horizon], True where the chunk ran past the episode's end
    task              str
    episode_index, frame_index, index, task_index: int; timestamp: float (s from the episode's start)
"""

from __future__ import annotations

import copy
import json
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch

from . import lerobot_format as fmt
from .errors import DatasetError
from .images import ImageRows, image_bytes
from .stats import from_json
from .video import VideoDecoder, probe

TOLERANCE_S = 1e-4  # how far a decoded frame's time may be from the asked one (LeRobot's default)
DECODERS_KEPT = 16  # open video files per process
_INHERITED_DECODERS: list = []  # a forked worker's copies of its parent's decoders, kept from being freed


@dataclass(frozen=True)
class VideoSpan:
    path: Path
    from_s: float  # where the episode starts in the file
    to_s: float


@dataclass(frozen=True)
class EpisodeInfo:
    index: int
    length: int
    tasks: tuple[str, ...]
    rows: tuple[int, int]  # [first, last + 1) frame rows of the dataset
    data_file: Path
    videos: dict[str, VideoSpan]  # cameras of dtype video; those of dtype image are read from `data_file`


@dataclass
class DatasetMeta:
    root: Path
    info: dict
    fps: float
    features: dict
    cameras: list[str]
    tasks: list[str]  # by task_index
    episodes: list[EpisodeInfo]
    total_frames: int

    def feature_shape(self, key: str) -> tuple[int, ...]:
        return tuple(self.features[key]["shape"])

    @property
    def image_cameras(self) -> list[str]:
        """Cameras whose frames are encoded images in the data files (LeRobot's `use_videos=False`)."""
        return [key for key in self.cameras if self.features[key]["dtype"] == "image"]

    def file_first_rows(self) -> dict[Path, int]:
        """The dataset row each data file starts at."""
        first: dict[Path, int] = {}
        for ep in self.episodes:
            first.setdefault(ep.data_file, ep.rows[0])
        return first


# ----------------------------------------------------------------------------------------------- opening


def _json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise DatasetError(path, None, what, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(path, None, what, f"an unreadable file ({exc})") from None
    except json.JSONDecodeError as exc:
        raise DatasetError(path, None, f"{what} in JSON", f"{exc.msg} at line {exc.lineno}") from None
    if not isinstance(data, dict):
        raise DatasetError(path, None, f"{what}: a JSON object", type(data).__name__)
    return data


def _table(path: Path, what: str, columns: list[str] | None = None) -> pa.Table:
    if not path.exists():
        raise DatasetError(path, None, what, "no such file")
    try:
        names = pq.read_schema(path).names
        missing = [c for c in columns or () if c not in names]
        if missing:
            raise DatasetError(
                path, missing[0], f"a column {missing[0]!r} ({what})", f"only {', '.join(names) or 'no columns'}"
            )
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise DatasetError(path, None, f"a readable parquet file ({what})", " ".join(str(exc).split())[:200]) from None


def _check_info(path: Path, info: dict) -> tuple[float, dict, list[str]]:
    """fps, features and camera keys of a valid info.json."""

    def fail(key, expected, got):
        raise DatasetError(path, key, expected, got)

    if info.get("codebase_version") != fmt.CODEBASE_VERSION:
        fail(
            "codebase_version",
            f"{fmt.CODEBASE_VERSION!r} (the LeRobotDataset v3.0 layout)",
            repr(info.get("codebase_version")),
        )
    fps = info.get("fps")
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or fps <= 0:
        fail("fps", "a positive number", repr(fps))
    features = info.get("features")
    if not isinstance(features, dict):
        fail("features", "a mapping of feature name to dtype and shape", repr(features)[:60])
    templates = [("data_path", ("chunk_index", "file_index"))]
    if fmt.video_keys(features):  # LeRobot writes video_path: null when every camera is an image feature
        templates.append(("video_path", ("video_key", "chunk_index", "file_index")))
    for key, fields in templates:
        template = info.get(key)
        if not isinstance(template, str) or any("{" + f not in template for f in fields):
            why = " (features of dtype video need one)" if key == "video_path" else ""
            fail(key, f"a path template with {', '.join('{' + f + '}' for f in fields)}{why}", repr(template))
    cameras = fmt.camera_keys(features)
    for key in ("observation.state", "action", *cameras):
        ft = features.get(key)
        if ft is None:
            fail(f"features.{key}", "a float32 feature of shape [n]", "nothing")
        if (
            not isinstance(ft, dict)
            or not isinstance(ft.get("shape"), list)
            or not ft["shape"]
            or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in ft["shape"])
        ):
            fail(f"features.{key}", "a dtype and a shape (a list of positive integers)", repr(ft)[:60])
    for key in ("observation.state", "action"):
        ft = features[key]
        if ft.get("dtype") not in ("float32", "float64") or len(ft["shape"]) != 1:
            fail(f"features.{key}", "a float32 feature of shape [n]", f"{ft.get('dtype')} of shape {ft['shape']}")
    for key, want in fmt.INDEX_FEATURES.items():
        if key not in features:
            fail(f"features.{key}", f"a {want['dtype']} feature (every LeRobot frame has one)", "nothing")
    if not cameras:
        fail("features", "at least one camera (a feature of dtype video or image)", "none")
    for key in cameras:
        _frame_size(path, key, features[key])
    return float(fps), features, cameras


def _frame_size(path: Path, key: str, ft: dict) -> tuple[int, int]:
    """(height, width) of a camera feature; LeRobot writes [H, W, 3], some datasets [3, H, W]."""
    shape, names = ft["shape"], ft.get("names") or []
    if len(shape) == 3 and shape[-1] == 3 and not (names and str(names[0]).startswith("channel")):
        return shape[0], shape[1]
    if len(shape) == 3 and shape[0] == 3:
        return shape[1], shape[2]
    raise DatasetError(path, f"features.{key}.shape", "[height, width, 3]", str(shape))


def _path(info_path: Path, info: dict, template: str, **fields) -> Path:
    try:
        return info_path.parent.parent / info[template].format(**fields)
    except (KeyError, IndexError, ValueError) as exc:
        raise DatasetError(
            info_path,
            template,
            f"a path template of {', '.join(fields)}",
            f"{info[template]!r} ({type(exc).__name__}: {exc})",
        ) from None


def load_meta(root: Path) -> DatasetMeta:
    """The dataset's metadata, checked: info.json, tasks and the episode table."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(root, None, "a LeRobotDataset v3.0 folder", "no such folder")
    info_path = root / fmt.INFO_PATH
    info = _json(info_path, "the info.json of a LeRobotDataset v3.0")
    fps, features, cameras = _check_info(info_path, info)
    tasks = _load_tasks(root / fmt.TASKS_PATH)
    video_keys = fmt.video_keys(features)  # image cameras have no video columns: their frames are in the data files
    rows = _episode_rows(root, video_keys)
    episodes, next_row = [], 0
    for n, (path, row) in enumerate(rows):
        episodes.append(_episode_info(info_path, info, video_keys, n, len(rows), path, row, next_row))
        next_row = row["dataset_to_index"]
    for key, total in (("total_episodes", len(episodes)), ("total_frames", next_row)):
        if info.get(key) != total:
            raise DatasetError(info_path, key, f"{total} (what meta/episodes holds)", repr(info.get(key)))
    return DatasetMeta(root, info, fps, features, cameras, tasks, episodes, next_row)


def _load_tasks(tasks_path: Path) -> list[str]:
    """The task strings in task_index order; the indices must be 0..n-1."""
    tasks_table = _table(tasks_path, "the task strings", ["task", "task_index"]).to_pydict()
    by_index = dict(zip(tasks_table["task_index"], tasks_table["task"]))
    if sorted(by_index) != list(range(len(by_index))):
        raise DatasetError(tasks_path, "task_index", f"0..{len(by_index) - 1}", str(sorted(by_index))[:60])
    return [by_index[i] for i in range(len(by_index))]


def _episode_rows(root: Path, video_keys) -> list[tuple[Path, dict]]:
    """Every row of the episode table (meta/episodes/chunk-*/file-*.parquet) with the file it came from, in
    episode order."""
    episode_files = sorted((root / "meta/episodes").glob("chunk-*/file-*.parquet"))
    if not episode_files:
        raise DatasetError(root / "meta/episodes", None, "episode files chunk-XXX/file-XXX.parquet", "none")
    columns = [
        "episode_index",
        "tasks",
        "length",
        "data/chunk_index",
        "data/file_index",
        "dataset_from_index",
        "dataset_to_index",
    ]
    for key in video_keys:
        columns += [f"videos/{key}/{c}" for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")]
    rows = []
    for path in episode_files:
        table = _table(path, "the episode table", columns).to_pylist()
        rows += [(path, row) for row in table]
    rows.sort(key=lambda pr: pr[1]["episode_index"])
    return rows


def _episode_info(
    info_path: Path, info: dict, video_keys, n: int, count: int, path: Path, row: dict, next_row: int
) -> EpisodeInfo:
    """Episode n of `count` from its row of the episode table, checked: its index, and its frames starting at
    `next_row` where the episode before it ended."""
    if row["episode_index"] != n:
        raise DatasetError(
            path,
            "episode_index",
            f"episodes 0..{count - 1}, each once",
            f"episode {row['episode_index']} where episode {n} belongs",
        )
    start, stop = row["dataset_from_index"], row["dataset_to_index"]
    if start != next_row or stop - start != row["length"] or row["length"] < 1:
        raise DatasetError(
            path, f"episode {n}", f"frames from row {next_row}, {row['length']} of them", f"rows {start}..{stop}"
        )
    data_file = _path(
        info_path, info, "data_path", chunk_index=row["data/chunk_index"], file_index=row["data/file_index"]
    )
    videos = {
        key: VideoSpan(
            _path(
                info_path,
                info,
                "video_path",
                video_key=key,
                chunk_index=row[f"videos/{key}/chunk_index"],
                file_index=row[f"videos/{key}/file_index"],
            ),
            row[f"videos/{key}/from_timestamp"],
            row[f"videos/{key}/to_timestamp"],
        )
        for key in video_keys
    }
    return EpisodeInfo(n, row["length"], tuple(row["tasks"] or ()), (start, stop), data_file, videos)


def _vectors(column: pa.ChunkedArray, path: Path, key: str, width: int, info_path: Path) -> np.ndarray:
    """A fixed-width vector column as [rows, width]; a width that is not info.json's is info.json's error."""
    array = column.combine_chunks()
    if isinstance(array.type, pa.FixedSizeListType):
        found = array.type.list_size
    elif pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        lengths = np.unique(np.diff(array.offsets.to_numpy()))
        found = int(lengths[0]) if len(lengths) == 1 else None
        if found is None:
            raise DatasetError(path, key, f"rows of {width} values each", f"rows of {lengths.tolist()} values")
    else:
        raise DatasetError(path, key, f"a list of {width} values per row", str(array.type))
    if found != width:
        raise DatasetError(
            info_path,
            f"features.{key}.shape",
            f"[{found}] (the width of {key} in {path.relative_to(info_path.parent.parent)})",
            f"[{width}]",
        )
    values = array.flatten().to_numpy(zero_copy_only=False)
    return values.astype(np.float32, copy=False).reshape(len(array), width)


def load_frames(meta: DatasetMeta) -> dict[str, np.ndarray]:
    """Every frame row of the data files, as columns; checks the rows against the episode table."""
    info_path = meta.root / fmt.INFO_PATH
    files: dict[Path, list[EpisodeInfo]] = {}
    for ep in meta.episodes:
        files.setdefault(ep.data_file, []).append(ep)
    parts = []
    for path, eps in sorted(files.items()):
        what = (
            f"the frames of episode{'s' if len(eps) > 1 else ''} "
            + (f"{eps[0].index}-{eps[-1].index}" if len(eps) > 1 else f"{eps[0].index}")
            + " (per meta/episodes)"
        )
        table = _table(path, what, ["observation.state", "action", *fmt.INDEX_FEATURES])
        part = {
            key: _vectors(table[key], path, key, meta.feature_shape(key)[0], info_path)
            for key in ("observation.state", "action")
        }
        part.update({key: table[key].to_numpy() for key in fmt.INDEX_FEATURES})
        parts.append((path, part))
    frames = {key: np.concatenate([p[key] for _, p in parts]) for key in parts[0][1]}
    lengths = np.array([ep.length for ep in meta.episodes])
    expected = {
        "index": np.arange(meta.total_frames),
        "episode_index": np.repeat(np.arange(len(meta.episodes)), lengths),
        "frame_index": np.arange(meta.total_frames) - np.repeat([ep.rows[0] for ep in meta.episodes], lengths),
    }
    for key, want in expected.items():
        got = frames[key]
        if len(got) != len(want):
            raise DatasetError(
                parts[-1][0],
                None,
                f"{len(want)} frame rows in all (per meta/episodes)",
                f"{len(got)} in {', '.join(str(p.relative_to(meta.root)) for p, _ in parts)}",
            )
        if not np.array_equal(got, want):
            row = int(np.argmax(got != want))
            raise DatasetError(
                _file_of_row(parts, row),
                key,
                f"{want[row]} at row {row} (frames in episode order, per meta/episodes)",
                str(got[row]),
            )
    if len(meta.tasks) and frames["task_index"].max() >= len(meta.tasks):
        raise DatasetError(
            meta.root / fmt.TASKS_PATH,
            None,
            f"task_index up to {frames['task_index'].max()}",
            f"{len(meta.tasks)} tasks",
        )
    return frames


def _file_of_row(parts, row: int) -> Path:
    for path, part in parts:
        if row < len(part["index"]):
            return path
        row -= len(part["index"])
    return parts[-1][0]


def check_videos(meta: DatasetMeta, frames: dict[str, np.ndarray], tolerance_s: float = TOLERANCE_S) -> None:
    """Every video file: present, not empty, at info.json's fps, of the declared frame size, and holding its last
    needed frame."""
    info_path = meta.root / fmt.INFO_PATH
    for key in meta.cameras:
        if key in meta.image_cameras:
            continue
        height, width = _frame_size(info_path, key, meta.features[key])
        files: dict[Path, list[EpisodeInfo]] = {}
        for ep in meta.episodes:
            files.setdefault(ep.videos[key].path, []).append(ep)
        for path, eps in files.items():
            if not path.exists():
                raise DatasetError(
                    path,
                    None,
                    f"the {key} video of episodes {eps[0].index}-{eps[-1].index} (per meta/episodes)",
                    "no such file",
                )
            if path.stat().st_size == 0:
                raise DatasetError(
                    path, None, f"the {key} video of episodes {eps[0].index}-{eps[-1].index}", "an empty file"
                )
            found = probe(path)
            # timestamps are frame indices over info.json's fps: another frame rate in the file reads other frames
            if found["fps"] is not None and abs(found["fps"] - meta.fps) > 1e-3 * meta.fps:
                raise DatasetError(
                    info_path,
                    "fps",
                    f"{found['fps']:g} (the frame rate of {path.relative_to(meta.root)})",
                    f"{meta.fps:g}",
                )
            if (found["height"], found["width"]) != (height, width):
                raise DatasetError(
                    info_path,
                    f"features.{key}.shape",
                    f"[{found['height']}, {found['width']}, 3] (the frame size of {path.relative_to(meta.root)})",
                    str(meta.features[key]["shape"]),
                )
            last = max(eps, key=lambda ep: ep.videos[key].from_s)
            ts = last.videos[key].from_s + float(frames["timestamp"][last.rows[1] - 1])
            decoder = VideoDecoder(path, tolerance_s)
            try:
                decoder.frame_at(ts, f"the last frame of episode {last.index}")
            finally:
                decoder.close()


def check_images(meta: DatasetMeta, images: ImageRows) -> None:
    """Every data file of an image-only camera: the column is there, holds encoded images, and the file's last
    image decodes to the declared frame size."""
    info_path = meta.root / fmt.INFO_PATH
    first_rows = meta.file_first_rows()
    last_episode = {ep.data_file: ep for ep in meta.episodes}
    for key in meta.image_cameras:
        height, width = _frame_size(info_path, key, meta.features[key])
        for path, ep in last_episode.items():
            schema = pq.read_schema(path)
            if key not in schema.names:
                raise DatasetError(
                    path,
                    key,
                    f"a column {key!r} (an image feature in meta/info.json)",
                    f"only {', '.join(schema.names)}",
                )
            image_bytes(pa.array([], type=schema.field(key).type), path, key)  # the column's type, one line
            where = f"the last frame of episode {ep.index}"
            frame = images.frame(path, ep.rows[1] - 1 - first_rows[path], key, where)
            if frame.shape[:2] != (height, width):
                raise DatasetError(
                    info_path,
                    f"features.{key}.shape",
                    f"[{frame.shape[0]}, {frame.shape[1]}, 3] (the size of the {key} images in "
                    f"{path.relative_to(meta.root)})",
                    str(meta.features[key]["shape"]),
                )


def preflight(root: str | Path) -> DatasetMeta:
    """Every check opening the dataset makes (info.json, tasks, the episode table, every data file read, every video
    file and image column as check_videos and check_images see them), made before a rung builds or a training starts:
    a broken dataset is one line then, not an error inside each rung after its model is built."""
    dataset = LeRobotV3Dataset(root)
    dataset.close()
    return dataset.meta


# ----------------------------------------------------------------------------------------------- the dataset


class LeRobotV3Dataset(torch.utils.data.Dataset):
    """Frames of a LeRobotDataset v3.0 folder as raw samples (see the module docstring).

    Video files stay open between samples, one decoder per file and process (DataLoader workers each open
    their own); `cameras` limits which cameras are decoded (default: all)."""

    def __init__(
        self,
        root: str | Path,
        action_horizon: int = 50,
        cameras: list[str] | None = None,
        tolerance_s: float = TOLERANCE_S,
        check_video_files: bool = True,
    ):
        if action_horizon < 1:
            raise DatasetError("action_horizon", None, "a positive number of actions", str(action_horizon))
        self.meta = load_meta(Path(root))
        self.root = self.meta.root
        unknown = [c for c in cameras or () if c not in self.meta.cameras]
        if unknown:
            raise DatasetError(
                self.root / fmt.INFO_PATH,
                "features",
                f"a camera {unknown[0]!r}",
                f"only {', '.join(self.meta.cameras)}",
            )
        self.cameras = list(cameras) if cameras is not None else list(self.meta.cameras)
        self.action_horizon = action_horizon
        self.tolerance_s = tolerance_s
        self._frames = load_frames(self.meta)
        self._images = ImageRows()  # cameras of dtype image: their PNGs are in the data files
        self._file_first_row = self.meta.file_first_rows()
        if check_video_files:
            check_videos(self.meta, self._frames, tolerance_s)
            check_images(self.meta, self._images)
        # For each frame row: where its episode's rows end, and which episode it belongs to.
        lengths = np.array([ep.length for ep in self.meta.episodes])
        self._episode_of_row = np.repeat(np.arange(len(lengths)), lengths)
        self._episode_end = np.repeat([ep.rows[1] for ep in self.meta.episodes], lengths)
        stats_path = self.root / fmt.STATS_PATH
        self.stats = None  # LeRobot allows a dataset without stats
        if stats_path.exists():
            try:
                self.stats = from_json(_json(stats_path, "per-feature statistics"))
            except (TypeError, ValueError, AttributeError) as exc:
                if isinstance(exc, DatasetError):
                    raise
                raise DatasetError(
                    stats_path,
                    None,
                    "numbers (or nested lists of them) per feature and statistic",
                    " ".join(str(exc).split())[:120],
                ) from None
        self._decoders: OrderedDict[Path, VideoDecoder] = OrderedDict()
        self._pid = os.getpid()

    def __len__(self) -> int:
        return self.meta.total_frames

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < len(self):
            raise IndexError(f"frame {i} of a dataset of {len(self)}")
        ep = self.meta.episodes[self._episode_of_row[i]]
        end = self._episode_end[i]
        steps = i + np.arange(self.action_horizon)
        timestamp = float(self._frames["timestamp"][i])
        sample = {}
        for key in self.cameras:
            where = f"episode {ep.index}, frame {i - ep.rows[0]}"
            span = ep.videos.get(key)
            if span is None:  # an image feature: the frame's PNG is in its data file's row
                frame = self._images.frame(ep.data_file, i - self._file_first_row[ep.data_file], key, where)
            else:
                frame = self._decoder(span.path).frame_at(span.from_s + timestamp, where)
            sample[key] = torch.from_numpy(frame)
        sample["observation.state"] = torch.from_numpy(self._frames["observation.state"][i].copy())
        sample["action"] = torch.from_numpy(self._frames["action"][np.minimum(steps, end - 1)])
        sample["action_is_pad"] = torch.from_numpy(steps >= end)
        task_index = int(self._frames["task_index"][i])
        sample["task"] = self.meta.tasks[task_index]
        sample["task_index"] = task_index
        sample["episode_index"] = ep.index
        sample["frame_index"] = int(self._frames["frame_index"][i])
        sample["index"] = i
        sample["timestamp"] = timestamp
        return sample

    def discrete_action_values(self, most: int = 3) -> dict[int, list[float]]:
        """The action dimensions whose values in the whole dataset are at most `most` distinct ones (a scripted
        gripper's open, hold and close), with those values."""
        actions = self._frames["action"]
        found = {}
        for dim in range(actions.shape[1]):
            values = np.unique(actions[:, dim])
            if len(values) <= most:
                found[dim] = [float(v) for v in values]
        return found

    def without_cameras(self) -> LeRobotV3Dataset:
        """The same rows without camera frames (state, actions, task...): read from the tables alone."""
        fields = copy.copy(self)
        fields.cameras, fields._decoders, fields._images = [], OrderedDict(), ImageRows()
        return fields

    def _decoder(self, path: Path) -> VideoDecoder:
        if os.getpid() != self._pid:  # a forked worker opens its own files
            # ... and never closes the parent's: freeing a decoder whose threads stayed in the parent hangs.
            _INHERITED_DECODERS.append(self._decoders)
            self._decoders, self._pid = OrderedDict(), os.getpid()
        decoder = self._decoders.get(path)
        if decoder is None:
            decoder = self._decoders[path] = VideoDecoder(path, self.tolerance_s)
            if len(self._decoders) > DECODERS_KEPT:
                self._decoders.popitem(last=False)[1].close()
        self._decoders.move_to_end(path)
        return decoder

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_decoders"] = OrderedDict()  # open files do not pickle (spawned workers reopen them)
        state["_images"] = ImageRows()  # nor need the images read so far
        return state

    def close(self) -> None:
        for decoder in self._decoders.values():
            decoder.close()
        self._decoders.clear()
        self._images.clear()
