"""The LeRobotDataset v3.0 layout: paths, feature declarations and `meta/info.json`, as LeRobot writes them.

    meta/info.json                                   schema, fps, counts, path templates
    meta/stats.json                                  per-feature min/max/mean/std/count/q01..q99
    meta/tasks.parquet                               task string -> task_index
    meta/episodes/chunk-000/file-000.parquet         one row per episode: length, tasks, file indices,
                                                     row range, per-camera video time span, episode stats
    data/chunk-000/file-000.parquet                  one row per frame, many episodes per file
    videos/<camera>/chunk-000/file-000.mp4           many episodes per file, back to back in time
                                                     (cameras of dtype image have their PNGs in the data
                                                     files instead; see images.py)

Facts from huggingface/lerobot (src/lerobot/datasets/utils.py, feature_utils.py, dataset_metadata.py,
dataset_writer.py, configs/video.py, utils/constants.py); the LIBERO feature names from the info.json of
the v3.0 LIBERO datasets on the Hub (1693 episodes, 273465 frames, 40 tasks at 10 fps).
"""

from __future__ import annotations

from dataclasses import dataclass

CODEBASE_VERSION = "v3.0"
CHUNKS_SIZE = 1000  # files per chunk-XXX folder
DATA_FILES_SIZE_IN_MB = 100  # a data or episodes parquet file is closed past this size
VIDEO_FILES_SIZE_IN_MB = 200  # likewise an MP4 file

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_PATH = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"

# Every frame row carries these (LeRobot adds them to every dataset's features, in this order).
INDEX_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}

# LIBERO: the agent-view and wrist cameras, an 8-D end-effector state and the 7-D delta end-effector action
# with the gripper command; names spelled as the Hub dataset spells them.
LIBERO_CAMERAS = ("observation.images.image", "observation.images.wrist_image")
LIBERO_STATE_NAMES = ["x", "y", "z", "rx", "ry", "rz", "rw", "gripper"]
LIBERO_ACTION_NAMES = ["x", "y", "z", "roll", "pitch", "yaw", "gripper"]
LIBERO_FPS = 10
LIBERO_ROBOT = "panda"


@dataclass(frozen=True)
class VideoEncoding:
    """LeRobot's default RGB encoder (configs/video.py): AV1 through SVT-AV1, a keyframe every 2 frames so
    that a random frame costs at most two decodes, CRF 30, the fastest preset."""

    codec: str = "libsvtav1"
    pix_fmt: str = "yuv420p"
    g: int = 2
    crf: int = 30
    preset: int = 12
    fast_decode: int = 0

    def options(self) -> dict[str, str]:
        """Encoder options as PyAV takes them."""
        opts = {"g": str(self.g), "crf": str(self.crf), "preset": str(self.preset)}
        if self.codec == "libsvtav1":
            opts["svtav1-params"] = f"fast-decode={self.fast_decode}"
        return opts


def libero_features(image_size: int = 256) -> dict[str, dict]:
    """The user features of a LIBERO dataset with MP4 cameras of `image_size` squared pixels."""
    camera = {"dtype": "video", "shape": [image_size, image_size, 3], "names": ["height", "width", "channel"]}
    return {
        **{key: dict(camera) for key in LIBERO_CAMERAS},
        "observation.state": {
            "dtype": "float32",
            "shape": [len(LIBERO_STATE_NAMES)],
            "names": {"motors": list(LIBERO_STATE_NAMES)},
        },
        "action": {
            "dtype": "float32",
            "shape": [len(LIBERO_ACTION_NAMES)],
            "names": {"motors": list(LIBERO_ACTION_NAMES)},
        },
    }


def video_keys(features: dict) -> list[str]:
    return [key for key, ft in features.items() if ft.get("dtype") == "video"]


def camera_keys(features: dict) -> list[str]:
    """Cameras in declaration order: MP4 ones (dtype video) and ones stored in the parquet files (dtype image)."""
    return [key for key, ft in features.items() if ft.get("dtype") in ("video", "image")]


def video_info(height: int, width: int, fps: int, encoding: VideoEncoding) -> dict:
    """The `info` block LeRobot stores under a video feature: what the stream is, then how it was encoded.
    The codec is the stream's canonical name (av1), not the encoder's (libsvtav1)."""
    canonical = {"libsvtav1": "av1", "libaom-av1": "av1", "libx264": "h264", "libx265": "hevc"}
    return {
        "video.height": height,
        "video.width": width,
        "video.codec": canonical.get(encoding.codec, encoding.codec),
        "video.pix_fmt": encoding.pix_fmt,
        "video.fps": fps,
        "video.channels": 3,
        "has_audio": False,
        "video.g": encoding.g,
        "video.crf": encoding.crf,
        "video.preset": encoding.preset,
        "video.fast_decode": encoding.fast_decode,
        "video.video_backend": "pyav",
        "video.extra_options": {},
        "is_depth_map": False,
    }


def make_info(
    fps: int,
    features: dict,
    *,
    total_episodes: int,
    total_frames: int,
    total_tasks: int,
    robot_type: str | None = LIBERO_ROBOT,
    chunks_size: int = CHUNKS_SIZE,
    data_files_size_in_mb: float = DATA_FILES_SIZE_IN_MB,
    video_files_size_in_mb: float = VIDEO_FILES_SIZE_IN_MB,
) -> dict:
    """`meta/info.json`, keys in the order of the files LeRobot writes; `features` must already hold the
    index features."""
    return {
        "codebase_version": CODEBASE_VERSION,
        "robot_type": robot_type,
        "total_episodes": total_episodes,
        "total_frames": total_frames,
        "total_tasks": total_tasks,
        "chunks_size": chunks_size,
        "data_files_size_in_mb": data_files_size_in_mb,
        "video_files_size_in_mb": video_files_size_in_mb,
        "fps": fps,
        "splits": {"train": f"0:{total_episodes}"},
        "data_path": DATA_PATH,
        "video_path": VIDEO_PATH if video_keys(features) else None,
        "features": features,
    }


def next_file(chunk_index: int, file_index: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk, file) after this one: a chunk folder holds `chunks_size` files."""
    if file_index == chunks_size - 1:
        return chunk_index + 1, 0
    return chunk_index, file_index + 1
