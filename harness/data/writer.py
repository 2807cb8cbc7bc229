"""Write episodes from any source into a LeRobotDataset v3.0 folder.

A source is an iterable of `Episode`s (frames per camera, state, action, task); the writer knows nothing of
where they come from. `write_dataset` builds the dataset in a sibling folder `DIR.tmp-XXXX` and renames it
into place only once complete, so an interrupted run never leaves a DIR that looks like a dataset. Encoding an
episode's videos (and their image stats) is most of the writing: with `encoders`, processes of their own do it
for the next episodes while the writer appends the last one's, in the source's order.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import multiprocessing
import shutil
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from multiprocessing.pool import AsyncResult, Pool
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from . import lerobot_format as fmt
from . import stats as stats_lib
from .errors import DatasetError
from .video import VideoFileWriter, encode_episode

MB = 1024**2


@dataclass
class Episode:
    """One demonstration: T frames per camera (uint8 [H, W, 3] each, as an array [T, H, W, 3] or a list),
    the state [T, S] and action [T, A] of each frame, and the task it performs."""

    task: str
    frames: dict[str, Any]
    state: np.ndarray
    action: np.ndarray


@dataclass
class WriteSettings:
    fps: int = fmt.LIBERO_FPS
    robot_type: str | None = fmt.LIBERO_ROBOT
    encoding: fmt.VideoEncoding = field(default_factory=fmt.VideoEncoding)
    chunks_size: int = fmt.CHUNKS_SIZE
    data_files_size_in_mb: float = fmt.DATA_FILES_SIZE_IN_MB
    video_files_size_in_mb: float = fmt.VIDEO_FILES_SIZE_IN_MB


@dataclass
class EncodedCamera:
    """One camera's frames of an episode as the writer stores them: the MP4 and the frames' image stats."""

    mp4: bytes
    stats: dict[str, np.ndarray]
    height: int
    width: int


def encode_cameras(frames: dict[str, Any], fps: int, encoding: fmt.VideoEncoding) -> dict[str, EncodedCamera]:
    """Each camera's frames encoded and summed up: the bulk of an episode's writing, done in an encoder process
    when `write_dataset` has them (the encode is deterministic: the same bytes wherever it runs)."""
    out = {}
    for key, values in frames.items():
        height, width = np.asarray(values[0]).shape[:2]
        mp4 = encode_episode(values, fps, encoding)
        out[key] = EncodedCamera(mp4, stats_lib.image_stats(values), int(height), int(width))
    return out


def _check_episode(ep: Episode, n: int, features: dict, check_frames: bool = True) -> int:
    """The episode's length, after checking it against the features (its frames too unless `check_frames` is False:
    they were checked before they went to an encoder); one-line errors name the episode."""
    where = f"episode {n}"
    if not isinstance(ep.task, str) or not ep.task.strip():
        raise DatasetError(where, "task", "a non-empty task string", repr(ep.task))
    length = len(ep.state)
    if length < 1:
        raise DatasetError(where, "observation.state", "at least one frame", "none")
    for key, values in (("observation.state", ep.state), ("action", ep.action)):
        array = np.asarray(values)
        want = (length, *features[key]["shape"])
        if array.shape != want or not np.issubdtype(array.dtype, np.floating) or not np.isfinite(array).all():
            raise DatasetError(
                where, key, f"finite floats of shape {list(want)}", f"{array.dtype} of shape {list(array.shape)}"
            )
    for key in fmt.video_keys(features) if check_frames else ():
        frames = ep.frames.get(key)
        if frames is None:
            raise DatasetError(where, key, "frames of this camera", "none")
        if len(frames) != length:
            raise DatasetError(where, key, f"{length} frames (one per state)", f"{len(frames)}")
        first = np.asarray(frames[0])
        if first.dtype != np.uint8 or list(first.shape) != features[key]["shape"]:
            raise DatasetError(
                where,
                key,
                f"uint8 frames of shape {features[key]['shape']}",
                f"{first.dtype} of shape {list(first.shape)}",
            )
    return length


class DatasetWriter:
    """Appends episodes to the data, video and metadata files of `root`; `finish` writes the metadata."""

    def __init__(self, root: Path, features: dict, settings: WriteSettings):
        self.root, self.settings = Path(root), settings
        self.features = {key: dict(ft) for key, ft in features.items()}
        self.cameras = fmt.video_keys(self.features)
        self.tasks: dict[str, int] = {}
        self.episodes: list[dict] = []
        self.episode_stats: list[dict] = []
        self.total_frames = 0
        self._data = None  # (writer, path, chunk, file, first frame in the file)
        self._videos: dict[str, tuple[VideoFileWriter, int, int]] = {}
        self._video_info: dict[str, dict] = {}

    def add(self, ep: Episode, encoded: dict[str, EncodedCamera] | None = None) -> int:
        """Write one episode (its cameras `encoded` already, or encoded here); returns its number of frames."""
        n = len(self.episodes)
        length = _check_episode(ep, n, self.features, check_frames=encoded is None)
        if encoded is None:
            encoded = encode_cameras({key: ep.frames[key] for key in self.cameras}, self.settings.fps,
                                     self.settings.encoding)  # fmt: skip
        task_index = self.tasks.setdefault(ep.task, len(self.tasks))
        frame_index = np.arange(length, dtype=np.int64)
        columns = {
            "observation.state": np.asarray(ep.state, dtype=np.float32),
            "action": np.asarray(ep.action, dtype=np.float32),
            "timestamp": (frame_index / self.settings.fps).astype(np.float32),
            "frame_index": frame_index,
            "episode_index": np.full(length, n, dtype=np.int64),
            "index": np.arange(self.total_frames, self.total_frames + length, dtype=np.int64),
            "task_index": np.full(length, task_index, dtype=np.int64),
        }
        row = {"episode_index": n, "tasks": [ep.task], "length": length}
        row.update(self._write_data(columns))
        for key in self.cameras:
            row.update(self._write_video(key, encoded[key]))
        ep_stats = {key: encoded[key].stats for key in self.cameras}
        ep_stats.update({key: stats_lib.vector_stats(values) for key, values in columns.items()})
        ep_stats = {key: ep_stats[key] for key in self.features if key in ep_stats} | {
            key: ep_stats[key] for key in fmt.INDEX_FEATURES
        }
        row.update({f"stats/{key}/{name}": value.tolist() for key, s in ep_stats.items() for name, value in s.items()})
        self.episodes.append(row)
        self.episode_stats.append(ep_stats)
        self.total_frames += length
        return length

    def _write_data(self, columns: dict[str, np.ndarray]) -> dict:
        """Append the frame rows to the current data file, opening the next one past the size limit."""
        length = len(columns["index"])
        arrays = []
        for values in columns.values():
            if values.ndim == 2:  # a fixed-width vector per row, as HF datasets stores a Sequence of a length
                arrays.append(pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1)), values.shape[1]))
            else:
                arrays.append(pa.array(values))
        table = pa.Table.from_arrays(arrays, names=list(columns))
        chunk, file = 0, 0
        if self._data is not None:
            writer, path, chunk, file, first = self._data
            size = path.stat().st_size
            per_frame = size / max(1, self.total_frames - first)
            if size + per_frame * length >= self.settings.data_files_size_in_mb * MB:
                writer.close()
                chunk, file = fmt.next_file(chunk, file, self.settings.chunks_size)
                self._data = None
        if self._data is None:
            path = self.root / fmt.DATA_PATH.format(chunk_index=chunk, file_index=file)
            path.parent.mkdir(parents=True, exist_ok=True)
            writer = pq.ParquetWriter(path, table.schema, compression="snappy", use_dictionary=True)
            self._data = (writer, path, chunk, file, self.total_frames)
        writer, path, chunk, file, _ = self._data
        writer.write_table(table)  # one row group per episode, as LeRobot writes them
        return {
            "data/chunk_index": chunk,
            "data/file_index": file,
            "dataset_from_index": self.total_frames,
            "dataset_to_index": self.total_frames + length,
        }

    def _write_video(self, key: str, camera: EncodedCamera) -> dict:
        """Append the camera's encoded episode to its current MP4, or to the next past the size limit."""
        mp4 = camera.mp4
        chunk, file = 0, 0
        if key in self._videos:
            writer, chunk, file = self._videos[key]
            if writer.bytes + len(mp4) >= self.settings.video_files_size_in_mb * MB:
                writer.close()
                chunk, file = fmt.next_file(chunk, file, self.settings.chunks_size)
                del self._videos[key]
        if key not in self._videos:
            path = self.root / fmt.VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
            self._videos[key] = (VideoFileWriter(path), chunk, file)
        writer, chunk, file = self._videos[key]
        start, end = writer.append(mp4)
        if key not in self._video_info:
            self._video_info[key] = fmt.video_info(camera.height, camera.width, self.settings.fps,
                                                   self.settings.encoding)  # fmt: skip
        return {
            f"videos/{key}/chunk_index": chunk,
            f"videos/{key}/file_index": file,
            f"videos/{key}/from_timestamp": start,
            f"videos/{key}/to_timestamp": end,
        }

    def finish(self) -> dict:
        """Close the files and write tasks, episodes, stats and, last, info.json; returns the info."""
        if not self.episodes:
            raise DatasetError(self.root, None, "at least one episode", "none")
        if self._data is not None:
            self._data[0].close()
        for writer, _, _ in self._videos.values():
            writer.close()
        self._write_tasks()
        # Every episode row in one file: 100 MB of episode metadata is some 10^5 episodes.
        rows = [{**row, "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0} for row in self.episodes]
        path = self.root / fmt.EPISODES_PATH.format(chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path, compression="snappy")
        stats = stats_lib.aggregate(self.episode_stats)
        _write_json(self.root / fmt.STATS_PATH, stats_lib.to_json(stats))
        features = {
            key: ({**ft, "info": self._video_info[key]} if key in self._video_info else ft)
            for key, ft in self.features.items()
        }
        info = fmt.make_info(
            self.settings.fps,
            {**features, **fmt.INDEX_FEATURES},
            total_episodes=len(self.episodes),
            total_frames=self.total_frames,
            total_tasks=len(self.tasks),
            robot_type=self.settings.robot_type,
            chunks_size=self.settings.chunks_size,
            data_files_size_in_mb=self.settings.data_files_size_in_mb,
            video_files_size_in_mb=self.settings.video_files_size_in_mb,
        )
        _write_json(self.root / fmt.INFO_PATH, info)
        return info

    def abort(self) -> None:
        """Close whatever is open, quietly: the folder is about to be deleted."""
        files = [self._data[0]] if self._data is not None else []
        files += [writer for writer, _, _ in self._videos.values()]
        self._data, self._videos = None, {}
        for f in files:
            with contextlib.suppress(Exception):  # a half-written file may not close cleanly; it goes next
                f.close()

    def _write_tasks(self) -> None:
        """tasks.parquet as pandas writes LeRobot's DataFrame: the task string is the (named) index."""
        table = pa.table(
            {
                "task_index": pa.array(list(self.tasks.values()), pa.int64()),
                "task": pa.array(list(self.tasks), pa.string()),
            }
        )
        pandas_meta = {
            "index_columns": ["task"],
            "column_indexes": [
                {
                    "name": None,
                    "field_name": None,
                    "pandas_type": "unicode",
                    "numpy_type": "object",
                    "metadata": {"encoding": "UTF-8"},
                }
            ],
            "columns": [
                {
                    "name": "task_index",
                    "field_name": "task_index",
                    "pandas_type": "int64",
                    "numpy_type": "int64",
                    "metadata": None,
                },
                {
                    "name": "task",
                    "field_name": "task",
                    "pandas_type": "unicode",
                    "numpy_type": "object",
                    "metadata": None,
                },
            ],
            "creator": {"library": "pyarrow", "version": pa.__version__},
            "pandas_version": "2.2.3",
        }
        table = table.replace_schema_metadata({"pandas": json.dumps(pandas_meta)})
        path = self.root / fmt.TASKS_PATH
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, compression="snappy")


def _write_json(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=4, ensure_ascii=False) + "\n")


@dataclass
class Progress:
    episodes: int
    frames: int
    elapsed_s: float
    writing_s: float = 0.0  # of elapsed_s, in the writer (encoding, files); the rest waited for the episodes


# An episode's two videos take about a second to encode; an encoder with no result after this long is stuck (once,
# on the H200, every process of make-dataset slept with 210 of 300 episodes written, cause unknown: log below).
ENCODER_STALL_S = 300.0


def _encode_watched(frames: dict[str, Any], fps: int, encoding: fmt.VideoEncoding, dump_after_s: float) -> dict:
    """encode_cameras in an encoder process, which prints its stacks to stderr (the run's log) if it runs past
    `dump_after_s`: a stuck encode says where it is stuck."""
    faulthandler.dump_traceback_later(dump_after_s)
    try:
        return encode_cameras(frames, fps, encoding)
    finally:
        faulthandler.cancel_dump_traceback_later()


def _encoded_in_order(
    episodes: Iterable[Episode], writer: DatasetWriter, encoders: int, waited: list[float], stall_s: float
) -> Iterator[tuple[Episode, dict[str, EncodedCamera] | None]]:
    """The source's episodes in its order, each with its cameras encoded by a pool of `encoders` processes (None
    without encoders: the writer encodes them). At most encoders + 1 episodes wait in the pool, so memory stays
    bounded; `waited[0]` sums the time spent waiting for the source. An encode with no result after `stall_s`
    stops the pool: that episode and the rest are encoded by the writer (the same bytes), and stderr says so."""
    source = iter(episodes)

    def next_episode() -> Episode | None:
        began = time.perf_counter()
        ep = next(source, None)
        waited[0] += time.perf_counter() - began
        return ep

    if encoders < 1:
        while (ep := next_episode()) is not None:
            yield ep, None
        return
    s = writer.settings
    # spawned, not forked: the source may run threads (the LIBERO rollouts), which a fork would copy mid-stride
    pool: Pool | None = multiprocessing.get_context("spawn").Pool(encoders)
    pending: deque[tuple[Episode, dict, AsyncResult]] = deque()

    def finished(ep: Episode, frames: dict, job: AsyncResult) -> tuple[Episode, dict[str, EncodedCamera] | None]:
        nonlocal pool
        if pool is not None:
            try:
                return ep, job.get(timeout=stall_s)
            except multiprocessing.TimeoutError:
                print(f"make-dataset: an encoder process gave no result in {stall_s:.0f} s (its stacks are above, if "
                      "it printed them); the encoder processes are stopped and the writer encodes the rest itself",
                      file=sys.stderr, flush=True)  # fmt: skip
                pool.terminate()
                pool = None
        ep.frames = frames  # the writer encodes them
        return ep, None

    try:
        while (ep := next_episode()) is not None:
            _check_episode(ep, len(writer.episodes) + len(pending), writer.features)  # bad input fails here, at once
            frames = {key: ep.frames[key] for key in writer.cameras}
            job = pool.apply_async(_encode_watched, (frames, s.fps, s.encoding, stall_s / 2)) if pool else None
            pending.append((ep, frames, job))
            ep.frames = {}  # kept in `pending` until encoded, for the writer should the pool stall
            while len(pending) > (encoders if pool else 0):
                yield finished(*pending.popleft())
        while pending:
            yield finished(*pending.popleft())
    finally:
        if pool is not None:
            pool.terminate()  # the results are in; an error leaves nothing worth finishing


def write_dataset(
    root: Path,
    episodes: Iterable[Episode],
    features: dict,
    settings: WriteSettings | None = None,
    overwrite: bool = False,
    progress: Callable[[Progress], None] | None = None,
    encoders: int = 0,
    encoder_stall_s: float = ENCODER_STALL_S,
) -> dict:
    """Write `episodes` as a dataset at `root`, atomically; returns its info.json content. With `encoders`, that
    many processes encode the videos while the episodes arrive (the dataset is the same); one with no result after
    `encoder_stall_s` hands its episode and the rest back to the writer.

    An existing `root` is refused unless `overwrite`, and even then only if it is a dataset or empty, so a
    mistyped path cannot delete someone's folder."""
    root = Path(root)
    check_target(root, overwrite)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"{root.name}.tmp-", dir=root.parent))
    writer = DatasetWriter(tmp, features, settings or WriteSettings())
    try:
        start, waited = time.perf_counter(), [0.0]
        for ep, encoded in _encoded_in_order(episodes, writer, encoders, waited, encoder_stall_s):
            writer.add(ep, encoded)
            if progress:
                elapsed = time.perf_counter() - start
                progress(Progress(len(writer.episodes), writer.total_frames, elapsed, elapsed - waited[0]))
        info = writer.finish()
        if root.exists():
            check_target(root, overwrite)  # it may have changed while we wrote
            old = Path(tempfile.mkdtemp(prefix=f"{root.name}.old-", dir=root.parent))
            root.rename(old / root.name)
            tmp.rename(root)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(root)
    except BaseException:
        writer.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return info


def check_target(root: Path, overwrite: bool) -> None:
    """Refuse to write over something that is not ours to replace."""
    if not root.exists():
        return
    if not overwrite:
        raise DatasetError(
            root,
            None,
            "a path where no dataset exists yet (or --overwrite to replace it)",
            "an existing " + ("dataset" if (root / fmt.INFO_PATH).exists() else "path"),
        )
    if not root.is_dir() or not ((root / fmt.INFO_PATH).exists() or not any(root.iterdir())):
        raise DatasetError(
            root,
            None,
            "a dataset folder (with meta/info.json) or an empty folder to overwrite",
            "a file" if not root.is_dir() else "a folder with other files",
        )
