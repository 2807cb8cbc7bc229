"""The LeRobotDataset v3.0 writer and reader (harness/data): what is written is what is read, the layout is
LeRobot's, broken datasets fail with one line naming the file, and `vlabench make-dataset` is atomic."""

from __future__ import annotations

import json
import os
import shutil
import time

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from harness.cli import main
from harness.data import lerobot_format as fmt
from harness.data.dataset import LeRobotV3Dataset
from harness.data.errors import DatasetError
from harness.data.fingerprint import dataset_fingerprint, fingerprint_difference
from harness.data.make import stall_dumps
from harness.data.synthetic import synthetic_episode, synthetic_episodes
from harness.data.writer import Episode, WriteSettings, write_dataset

SIZE = 64
LENGTHS = (17, 23, 9)  # the last shorter than an action chunk
TASKS = ("stack the blocks", "open the drawer", "stack the blocks")


def marked_episode(e: int, length: int) -> Episode:
    """Frames that differ clearly from their neighbours (soft bars that move several pixels a frame, a level
    per frame), so that reading frame k+1 for frame k cannot pass a closeness test."""
    rng = np.random.default_rng(e)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    cams = {}
    for c, key in enumerate(fmt.LIBERO_CAMERAS):
        frames = np.empty((length, SIZE, SIZE, 3), np.uint8)
        for k in range(length):
            bx, by = (7 * k + 20 * c) % SIZE, (5 * k + 9 * e) % SIZE
            bars = 120 * np.exp(-((xx - bx) ** 2) / 18) - 90 * np.exp(-((yy - by) ** 2) / 18)
            level = np.full_like(xx, 30 + (37 * k + 11 * e) % 150)
            frames[k] = np.clip(np.stack([60 + 2 * xx + 30 * c + bars, 40 + 2 * yy + bars, level + bars], -1), 0, 255)
        cams[key] = frames
    state = rng.normal(size=(length, 8)).astype(np.float32)
    action = rng.uniform(-1, 1, size=(length, 7)).astype(np.float32)
    return Episode(task=TASKS[e], frames=cams, state=state, action=action)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    episodes = [marked_episode(e, n) for e, n in enumerate(LENGTHS)]
    root = tmp_path_factory.mktemp("data") / "ds"
    info = write_dataset(root, iter(episodes), fmt.libero_features(SIZE))
    return root, episodes, info


def one_line_error(excinfo, path_part: str) -> str:
    text = str(excinfo.value)
    assert "\n" not in text and path_part in text, text
    return text


def test_reader_returns_what_was_written(written):
    root, episodes, _ = written
    ds = LeRobotV3Dataset(root, action_horizon=5)
    assert len(ds) == sum(LENGTHS) and ds.cameras == list(fmt.LIBERO_CAMERAS)
    i = 0
    for e, ep in enumerate(episodes):
        for k in range(len(ep.state)):
            s = ds[i]
            assert (s["episode_index"], s["frame_index"], s["index"]) == (e, k, i)
            assert s["task"] == ep.task and s["task_index"] == ("stack the blocks", "open the drawer").index(ep.task)
            assert s["timestamp"] == pytest.approx(k / 10)
            torch.testing.assert_close(s["observation.state"], torch.from_numpy(ep.state[k]))
            valid = min(5, len(ep.state) - k)
            torch.testing.assert_close(s["action"][:valid], torch.from_numpy(ep.action[k : k + valid]))
            for key in fmt.LIBERO_CAMERAS:
                got = s[key]
                assert got.dtype == torch.uint8 and got.shape == (SIZE, SIZE, 3)
                err = {
                    d: np.abs(got.numpy().astype(int) - ep.frames[key][k + d]).mean()
                    for d in (-1, 0, 1)
                    if 0 <= k + d < len(ep.state)
                }
                assert err[0] < 5, (e, k, key, err)  # AV1 at CRF 30 is lossy, but not by much
                assert all(err[0] < err[d] / 3 for d in err if d), (e, k, key, err)  # and not off by one
            i += 1


def test_action_chunks_are_padded_past_the_episode_end(written):
    root, episodes, _ = written
    ds = LeRobotV3Dataset(root, cameras=[], action_horizon=50)
    last = episodes[0].action[-1]
    s = ds[LENGTHS[0] - 3]  # three actions left in episode 0
    assert s["action"].shape == (50, 7) and s["action_is_pad"].tolist() == [False] * 3 + [True] * 47
    torch.testing.assert_close(s["action"][:3], torch.from_numpy(episodes[0].action[-3:]))
    torch.testing.assert_close(s["action"][3:], torch.from_numpy(np.tile(last, (47, 1))))  # the last repeats
    s = ds[LENGTHS[0]]  # the first frame of episode 1 does not see episode 0
    assert s["action_is_pad"].sum() == 50 - LENGTHS[1]
    torch.testing.assert_close(s["action"][0], torch.from_numpy(episodes[1].action[0]))


def test_layout_info_and_stats_are_lerobots(written):
    root, episodes, info = written
    assert json.loads((root / fmt.INFO_PATH).read_text()) == info
    assert info["codebase_version"] == "v3.0" and info["fps"] == 10 and info["splits"] == {"train": "0:3"}
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, sum(LENGTHS), 2)
    features = info["features"]
    assert list(features) == [
        *fmt.LIBERO_CAMERAS,
        "observation.state",
        "action",
        "timestamp",
        "frame_index",
        "episode_index",
        "index",
        "task_index",
    ]
    for key in fmt.LIBERO_CAMERAS:
        assert features[key]["dtype"] == "video" and features[key]["shape"] == [SIZE, SIZE, 3]
        assert features[key]["info"]["video.codec"] == "av1" and features[key]["info"]["video.height"] == SIZE
    assert (features["observation.state"]["shape"], features["action"]["shape"]) == ([8], [7])
    # Episode table: rows and video spans back to back, as many episodes per file as fit.
    eps = pq.read_table(root / fmt.EPISODES_PATH.format(chunk_index=0, file_index=0)).to_pylist()
    assert [ep["dataset_from_index"] for ep in eps] == [0, LENGTHS[0], LENGTHS[0] + LENGTHS[1]]
    for key in fmt.LIBERO_CAMERAS:
        spans = [ep[f"videos/{key}/{end}_timestamp"] for ep in eps for end in ("from", "to")]
        assert spans == pytest.approx([0.0, 1.7, 1.7, 4.0, 4.0, 4.9])
        assert {ep[f"videos/{key}/file_index"] for ep in eps} == {0}
    assert eps[1]["tasks"] == ["open the drawer"] and eps[1]["stats/action/count"] == [LENGTHS[1]]
    tasks = pq.read_table(root / fmt.TASKS_PATH)
    assert tasks.to_pydict() == {"task_index": [0, 1], "task": ["stack the blocks", "open the drawer"]}
    assert json.loads(tasks.schema.metadata[b"pandas"])["index_columns"] == ["task"]  # LeRobot reads it so
    # Stats: every feature, LeRobot's statistics, consistent with the data.
    stats = LeRobotV3Dataset(root, cameras=[]).stats
    assert set(stats) == set(features)
    states = np.concatenate([ep.state for ep in episodes])
    s = stats["observation.state"]
    assert set(s) == {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
    np.testing.assert_allclose(s["min"], states.min(0), rtol=1e-6)
    np.testing.assert_allclose(s["max"], states.max(0), rtol=1e-6)
    np.testing.assert_allclose(s["mean"], states.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s["std"], states.std(0), rtol=1e-4)
    assert s["count"].tolist() == [sum(LENGTHS)]
    # Quantiles between min and max (LeRobot's histogram edges lie 1e-10 outside them).
    assert np.all(s["min"] - 1e-9 <= s["q01"]) and np.all(s["q01"] <= s["q50"]) and np.all(s["q50"] <= s["q99"])
    assert np.all(s["q99"] <= s["max"] + 1e-9) and np.all(s["q01"] < s["q99"])
    image = stats["observation.images.image"]
    assert image["mean"].shape == (3, 1, 1) and 0 <= image["min"].min() and image["max"].max() <= 1
    assert stats["index"]["max"].tolist() == [sum(LENGTHS) - 1]


def test_dataset_quantiles_are_the_count_weighted_mean_of_the_episodes(written):
    """stats.json's quantiles follow LeRobot 0.6.1's `aggregate_feature_stats`: per feature, the episodes'
    quantiles (meta/episodes' stats/<feature>/qNN) averaged with their counts as weights. The envelope of
    LeRobot's later main branch (min of the lower quantiles, max of the upper) would differ from it here."""
    root, _, _ = written
    stats = LeRobotV3Dataset(root, cameras=[]).stats
    eps = pq.read_table(root / fmt.EPISODES_PATH.format(chunk_index=0, file_index=0)).to_pylist()
    for feature in ("observation.state", "action", "observation.images.image", "timestamp"):
        counts = np.array([ep[f"stats/{feature}/count"][0] for ep in eps], dtype=np.float64)
        for q in ("q01", "q10", "q50", "q90", "q99"):
            per_episode = np.stack([np.asarray(ep[f"stats/{feature}/{q}"], dtype=np.float64) for ep in eps])
            weights = counts.reshape((-1,) + (1,) * (per_episode.ndim - 1))
            expected = (per_episode * weights).sum(axis=0) / counts.sum()
            np.testing.assert_allclose(stats[feature][q], expected, rtol=1e-12, err_msg=f"{feature} {q}")
    # the two rules part on these episodes: the weighted mean lies strictly inside the envelope somewhere
    per_episode = np.stack([ep["stats/action/q01"] for ep in eps])
    assert np.any(stats["action"]["q01"] > per_episode.min(axis=0) + 1e-6)


def test_aggregate_follows_lerobot_061_on_a_hand_made_case():
    """Two episodes, 1 and 3 frames' worth of count: quantiles 0 and 4 aggregate to (1*0 + 3*4) / 4 = 3 (the
    envelope would give 0 for q01 and 4 for q99); mean and variance pool as before, min/max are the extremes."""
    from harness.data import stats as stats_lib

    def episode(q, mean, std, lo, hi, count):
        one = lambda v: np.array([float(v)])  # noqa: E731
        return {
            "x": {
                "min": one(lo),
                "max": one(hi),
                "mean": one(mean),
                "std": one(std),
                "count": np.array([count]),
                **{k: one(q) for k in stats_lib.QUANTILE_KEYS},
            }
        }

    merged = stats_lib.aggregate([episode(0, 0, 1, -2, 2, 1), episode(4, 4, 1, 2, 6, 3)])["x"]
    assert all(merged[k].tolist() == [3.0] for k in stats_lib.QUANTILE_KEYS)
    assert merged["mean"].tolist() == [3.0] and merged["count"].tolist() == [4]
    # pooled: (1 * (1 + 9) + 3 * (1 + 1)) / 4 = 4
    assert merged["std"].tolist() == [2.0]
    assert (merged["min"].tolist(), merged["max"].tolist()) == ([-2.0], [6.0])


def test_files_roll_over_at_their_size_limit(tmp_path):
    episodes = [marked_episode(e, n) for e, n in enumerate(LENGTHS)]
    settings = WriteSettings(data_files_size_in_mb=0.001, video_files_size_in_mb=0.001, chunks_size=2)
    write_dataset(tmp_path / "ds", iter(episodes), fmt.libero_features(SIZE), settings)
    files = sorted(p.relative_to(tmp_path / "ds").as_posix() for p in (tmp_path / "ds").rglob("file-*.*"))
    assert (
        "data/chunk-001/file-000.parquet" in files
        and "videos/observation.images.wrist_image/chunk-001/file-000.mp4" in files
    )  # 3 files, 2 per chunk
    ds = LeRobotV3Dataset(tmp_path / "ds")
    s = ds[LENGTHS[0] + LENGTHS[1] + 4]
    torch.testing.assert_close(s["observation.state"], torch.from_numpy(episodes[2].state[4]))
    assert (
        np.abs(s["observation.images.image"].numpy().astype(int) - episodes[2].frames[fmt.LIBERO_CAMERAS[0]][4]).mean()
        < 5
    )


def test_progress_splits_the_time_between_writing_and_waiting_for_the_episodes(tmp_path):
    """make-dataset says where its time went: a source that takes 0.2 s per episode shows as waiting."""
    import time

    from harness.data.writer import Progress

    def slow_source():
        for e, n in enumerate(LENGTHS[:3]):
            time.sleep(0.2)
            yield marked_episode(e, n)

    seen: list[Progress] = []
    write_dataset(tmp_path / "ds", slow_source(), fmt.libero_features(SIZE), progress=seen.append)
    last = seen[-1]
    assert [p.episodes for p in seen] == [1, 2, 3] and 0 < last.writing_s < last.elapsed_s
    assert last.elapsed_s - last.writing_s >= 0.6  # the three sleeps


def test_encoder_processes_write_the_same_dataset_and_refuse_bad_episodes_at_once(tmp_path):
    """--encoders: the videos encoded in processes of their own while the episodes arrive, appended in the
    source's order: every file the same bytes as the writer's own encoding. A bad episode fails in one line, with
    nothing left behind."""
    episodes = [marked_episode(e, n) for e, n in enumerate(LENGTHS)]
    write_dataset(tmp_path / "inline", iter(episodes), fmt.libero_features(SIZE))
    episodes = [marked_episode(e, n) for e, n in enumerate(LENGTHS)]  # the writer let go of the frames it sent
    write_dataset(tmp_path / "pool", iter(episodes), fmt.libero_features(SIZE), encoders=2)
    same_files(tmp_path / "inline", tmp_path / "pool")
    bad = marked_episode(2, 5)
    bad.frames[fmt.LIBERO_CAMERAS[1]] = bad.frames[fmt.LIBERO_CAMERAS[1]][:4]
    with pytest.raises(DatasetError) as excinfo:
        write_dataset(tmp_path / "bad", iter([marked_episode(0, 5), marked_episode(1, 6), bad]),
                      fmt.libero_features(SIZE), encoders=2)  # fmt: skip
    assert one_line_error(excinfo, "episode 2: observation.images.wrist_image: expected 5 frames (one per state)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inline", "pool"]  # nothing left of the bad one


def same_files(a, b) -> None:
    files = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert any(f.suffix == ".mp4" for f in files)
    for f in files:
        assert (a / f).read_bytes() == (b / f).read_bytes(), f


def test_the_fingerprint_tells_the_same_data_from_other_tables_or_other_videos(written, tmp_path):
    """The digest a training run records of its dataset (harness/data/fingerprint.py): a copy reads the same; a video's
    byte changed leaves the tables' digest alone (the same trajectories, rendered differently); a table's changes
    both. A file changed in place is digested again, not served from the process's cache."""
    root = written[0]
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    first = dataset_fingerprint(root)
    files = [p for p in root.rglob("*") if p.is_file()]
    assert first == dataset_fingerprint(copy)
    assert first["files"] == len(files) and first["bytes"] == sum(p.stat().st_size for p in files)
    assert fingerprint_difference(first, dataset_fingerprint(copy)) is None
    video = sorted((copy / "videos").rglob("*.mp4"))[0]
    data = bytearray(video.read_bytes())
    data[len(data) // 2] ^= 0xFF
    video.write_bytes(bytes(data))
    rendered = dataset_fingerprint(copy)
    assert rendered["tables_sha256"] == first["tables_sha256"] and rendered["sha256"] != first["sha256"]
    assert fingerprint_difference(first, rendered) == "their videos only (the same trajectories, rendered differently)"
    table = pq.read_table(sorted((copy / "data").rglob("*.parquet"))[0])
    pq.write_table(table.slice(1), sorted((copy / "data").rglob("*.parquet"))[0])
    other = dataset_fingerprint(copy)
    assert other["tables_sha256"] != first["tables_sha256"]
    assert fingerprint_difference(first, other).startswith("their tables")
    assert fingerprint_difference(first, None) is None and fingerprint_difference({}, first) is None
    assert first["videos"] == "whole"


def test_videos_past_the_bound_are_fingerprinted_by_their_size_and_ends(written, tmp_path, monkeypatch):
    """A real dataset's videos can be hundreds of GB, read by every rung process: past the bound each video is
    digested by its size and its first and last bytes, and the fingerprint says so; the tables stay whole."""
    from harness.data import fingerprint

    copy = tmp_path / "copy"
    shutil.copytree(written[0], copy)
    monkeypatch.setattr(fingerprint, "WHOLE_VIDEO_BYTES", 1)
    monkeypatch.setattr(fingerprint, "END_BYTES", 64)
    first = dataset_fingerprint(copy)
    assert first["videos"] == "ends" and first["tables_sha256"] == dataset_fingerprint(written[0])["tables_sha256"]
    video = sorted((copy / "videos").rglob("*.mp4"))[0]
    data = bytearray(video.read_bytes())
    data[len(data) // 2] ^= 0xFF  # the middle: not read past the bound
    video.write_bytes(bytes(data))
    assert dataset_fingerprint(copy)["sha256"] == first["sha256"]
    data[-1] ^= 0xFF  # its last bytes: read
    video.write_bytes(bytes(data))
    assert dataset_fingerprint(copy)["sha256"] != first["sha256"]


def _decode_first_frame(path: str) -> None:
    from pathlib import Path

    from harness.data.video import VideoDecoder

    decoder = VideoDecoder(Path(path))
    assert decoder.frame_at(0.0).shape == (SIZE, SIZE, 3)
    decoder.close()


def test_a_worker_forked_after_the_parent_decoded_decodes_too(written):
    """DataLoader workers are forked. PyAV's converter to RGB runs on a pool of swscale slice threads by default; a
    child forked after the parent converted a frame inherited the converter without its threads and waited for
    them forever (av 18.1.1: tests/test_data_path.py hung a CI run). Frames are converted in the calling thread."""
    import multiprocessing

    video = str(sorted((written[0] / "videos").rglob("*.mp4"))[0])
    _decode_first_frame(video)  # the parent converts first
    child = multiprocessing.get_context("fork").Process(target=_decode_first_frame, args=(video,))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        pytest.fail("a forked child hung converting a frame after its parent had converted one")
    assert child.exitcode == 0


def test_a_stalled_encoder_hands_its_episodes_back_to_the_writer(tmp_path, capsys):
    """An encoder process with no result in time (here at once: 1 ms) is stopped, and the writer encodes that
    episode and the rest itself: the dataset is complete, the same bytes, and stderr says what happened."""
    write_dataset(tmp_path / "inline", iter([marked_episode(e, n) for e, n in enumerate(LENGTHS)]),
                  fmt.libero_features(SIZE))  # fmt: skip
    write_dataset(tmp_path / "stalled", iter([marked_episode(e, n) for e, n in enumerate(LENGTHS)]),
                  fmt.libero_features(SIZE), encoders=2, encoder_stall_s=0.001)  # fmt: skip
    same_files(tmp_path / "inline", tmp_path / "stalled")
    err = capsys.readouterr().err
    assert "an encoder process gave no result in 0 s" in err and "the writer encodes the rest itself" in err


def test_stall_dumps_print_every_threads_stack_until_progress_comes(capfd):
    """make-dataset's watch: no progress for the given time prints where each thread is, to stderr; progress
    re-arms it, so a run that moves prints nothing."""
    with stall_dumps(1.0) as alive:
        for _ in range(40):  # 2 s, twice the watch's time, with progress every 0.05 s
            time.sleep(0.05)
            alive()
    assert "Thread" not in capfd.readouterr().err
    with stall_dumps(0.2):
        time.sleep(1.0)
    err = capfd.readouterr().err
    assert "Thread 0x" in err and "test_stall_dumps_print_every_threads_stack_until_progress_comes" in err


@pytest.fixture
def copy_of(written, tmp_path):
    shutil.copytree(written[0], tmp_path / "ds")
    return tmp_path / "ds"


def test_truncated_video_fails_at_open_with_one_line(copy_of):
    video = copy_of / fmt.VIDEO_PATH.format(video_key=fmt.LIBERO_CAMERAS[1], chunk_index=0, file_index=0)
    video.write_bytes(video.read_bytes()[: video.stat().st_size * 2 // 3])
    with pytest.raises(DatasetError) as excinfo:
        LeRobotV3Dataset(copy_of)
    assert "expected a frame at" in one_line_error(excinfo, str(video))


def test_video_damaged_after_open_fails_at_read_with_one_line(copy_of):
    ds = LeRobotV3Dataset(copy_of)
    video = copy_of / fmt.VIDEO_PATH.format(video_key=fmt.LIBERO_CAMERAS[0], chunk_index=0, file_index=0)
    video.write_bytes(video.read_bytes()[: video.stat().st_size // 2])
    with pytest.raises(DatasetError) as excinfo:
        ds[len(ds) - 1]
    assert f"episode 2, frame {LENGTHS[2] - 1}" in one_line_error(excinfo, str(video))


def test_missing_data_file_fails_with_one_line(copy_of):
    data = copy_of / fmt.DATA_PATH.format(chunk_index=0, file_index=0)
    data.unlink()
    with pytest.raises(DatasetError) as excinfo:
        LeRobotV3Dataset(copy_of)
    assert "expected the frames of episodes 0-2" in one_line_error(excinfo, str(data))


@pytest.mark.parametrize(
    "change, key, expected",
    [
        (
            lambda f: f["observation.images.image"].update(shape=[32, 32, 3]),
            "features.observation.images.image.shape",
            f"expected [{SIZE}, {SIZE}, 3]",
        ),
        (lambda f: f["observation.state"].update(shape=[9]), "features.observation.state.shape", "expected [8]"),
        (lambda f: f.pop("action"), "features.action", "expected a float32 feature"),
    ],
)
def test_wrong_info_json_fails_with_one_line(copy_of, change, key, expected):
    path = copy_of / fmt.INFO_PATH
    info = json.loads(path.read_text())
    change(info["features"])
    path.write_text(json.dumps(info))
    with pytest.raises(DatasetError) as excinfo:
        LeRobotV3Dataset(copy_of)
    text = one_line_error(excinfo, str(path))
    assert f": {key}: " in text and expected in text


def test_dataloader_workers_decode_and_report_errors_in_one_line(copy_of):
    from torch.utils.data._utils import ExceptionWrapper

    ds = LeRobotV3Dataset(copy_of, action_horizon=4)
    ds[0]  # the parent opens decoders; the worker must open its own
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1)))
    assert batch["observation.images.image"].shape == (4, SIZE, SIZE, 3) and batch["action"].shape == (4, 4, 7)
    assert batch["task"] == ["stack the blocks"] * 4 and batch["frame_index"].tolist() == [0, 1, 2, 3]
    video = copy_of / fmt.VIDEO_PATH.format(video_key=fmt.LIBERO_CAMERAS[0], chunk_index=0, file_index=0)
    video.write_bytes(b"")
    try:
        LeRobotV3Dataset(copy_of, check_video_files=False)[0]
    except DatasetError:  # what a worker sends back, and how the DataLoader re-raises it in the main process
        wrapped = ExceptionWrapper(where="in DataLoader worker process 0")
    with pytest.raises(DatasetError) as excinfo:
        wrapped.reraise()
    text = one_line_error(excinfo, str(video))
    assert text.endswith(
        "expected a readable MP4 with a video stream, got InvalidDataError: Invalid data found when processing input"
    )


# --------------------------------------------------------------------- image-only datasets (use_videos=False)


def write_image_only(root, episodes) -> None:
    """`episodes` as LeRobot 0.6.1 writes them with `use_videos=False`: cameras of dtype "image" (no video info),
    `video_path: null`, each frame a PNG (PIL, compress level 6) whose bytes sit in its data row as
    `{bytes, path}` (HF `datasets.Image()`, path the PNG's file name), image columns first (features order), one
    row group per episode, and no `videos/...` columns in the episode table. The rest (tasks, episode rows,
    stats, index columns) is what it is for a video dataset, so it comes from our writer."""
    import io

    import pyarrow as pa

    Image = pytest.importorskip("PIL.Image")
    write_dataset(root, iter(episodes), fmt.libero_features(SIZE))
    info = json.loads((root / fmt.INFO_PATH).read_text())
    info["video_path"] = None
    for key in fmt.LIBERO_CAMERAS:
        info["features"][key] = {"dtype": "image", "shape": [SIZE, SIZE, 3], "names": ["height", "width", "channel"]}
    (root / fmt.INFO_PATH).write_text(json.dumps(info, indent=4))
    data_path = root / fmt.DATA_PATH.format(chunk_index=0, file_index=0)
    data = pq.read_table(data_path)
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    writer, start = None, 0
    for ep in episodes:
        rows = data.slice(start, len(ep.state))
        start += len(ep.state)
        columns = {}
        for key in fmt.LIBERO_CAMERAS:
            cells = []
            for k, frame in enumerate(ep.frames[key]):
                png = io.BytesIO()
                Image.fromarray(frame).save(png, format="png", compress_level=6)
                cells.append({"bytes": png.getvalue(), "path": f"frame-{k:06d}.png"})
            columns[key] = pa.array(cells, type=image_type)
        table = pa.table({**columns, **{name: rows[name] for name in rows.column_names}})
        writer = writer or pq.ParquetWriter(data_path, table.schema, compression="snappy")
        writer.write_table(table)
    writer.close()
    episodes_path = root / fmt.EPISODES_PATH.format(chunk_index=0, file_index=0)
    table = pq.read_table(episodes_path)
    pq.write_table(table.select([c for c in table.column_names if not c.startswith("videos/")]), episodes_path)
    shutil.rmtree(root / "videos")


@pytest.fixture(scope="module")
def image_only(tmp_path_factory):
    episodes = [marked_episode(e, n) for e, n in enumerate(LENGTHS)]
    root = tmp_path_factory.mktemp("data") / "images"
    write_image_only(root, episodes)
    return root, episodes


def test_an_image_only_dataset_reads_its_frames_exactly(image_only):
    """Cameras stored as PNGs in the data files read back bit for bit (PNG is lossless), beside the same states,
    action chunks and indices as a video dataset; a DataLoader worker reads them as well."""
    root, episodes = image_only
    assert json.loads((root / fmt.INFO_PATH).read_text())["video_path"] is None and not (root / "videos").exists()
    ds = LeRobotV3Dataset(root, action_horizon=5)
    assert ds.cameras == list(fmt.LIBERO_CAMERAS) and ds.meta.image_cameras == list(fmt.LIBERO_CAMERAS)
    assert len(ds) == sum(LENGTHS)
    i = 0
    for e, ep in enumerate(episodes):
        for k in range(len(ep.state)):
            s = ds[i]
            assert (s["episode_index"], s["frame_index"], s["task"]) == (e, k, ep.task)
            for key in fmt.LIBERO_CAMERAS:
                assert s[key].dtype == torch.uint8 and np.array_equal(s[key].numpy(), ep.frames[key][k]), (e, k, key)
            torch.testing.assert_close(s["observation.state"], torch.from_numpy(ep.state[k]))
            valid = min(5, len(ep.state) - k)
            torch.testing.assert_close(s["action"][:valid], torch.from_numpy(ep.action[k : k + valid]))
            i += 1
    assert np.array_equal(
        ds[LENGTHS[0] + 3]["observation.images.wrist_image"].numpy(), episodes[1].frames[fmt.LIBERO_CAMERAS[1]][3]
    )
    batch = next(iter(torch.utils.data.DataLoader(ds, batch_size=4, num_workers=1)))
    assert batch["observation.images.image"].shape == (4, SIZE, SIZE, 3)
    assert np.array_equal(batch["observation.images.image"][2].numpy(), episodes[0].frames[fmt.LIBERO_CAMERAS[0]][2])


def test_a_broken_image_only_dataset_fails_with_one_line(image_only, tmp_path):
    root = tmp_path / "ds"
    shutil.copytree(image_only[0], root)
    info_path = root / fmt.INFO_PATH
    info = json.loads(info_path.read_text())
    # a declared size the images do not have
    info["features"]["observation.images.image"]["shape"] = [32, 32, 3]
    info_path.write_text(json.dumps(info))
    with pytest.raises(DatasetError) as excinfo:
        LeRobotV3Dataset(root)
    assert f"features.observation.images.image.shape: expected [{SIZE}, {SIZE}, 3] (the size of" in one_line_error(
        excinfo, str(info_path)
    )
    # a video camera needs the video_path template that an image-only dataset leaves null
    info["features"]["observation.images.image"] = {"dtype": "video", "shape": [SIZE, SIZE, 3]}
    info_path.write_text(json.dumps(info))
    with pytest.raises(DatasetError) as excinfo:
        LeRobotV3Dataset(root)
    assert "video_path: expected a path template with" in one_line_error(excinfo, str(info_path))
    assert "(features of dtype video need one), got None" in str(excinfo.value)
    # an image feature whose column the data file lacks
    info["features"]["observation.images.image"] = {"dtype": "image", "shape": [SIZE, SIZE, 3]}
    info["features"]["observation.images.side"] = {"dtype": "image", "shape": [SIZE, SIZE, 3]}
    info_path.write_text(json.dumps(info))
    data_path = root / fmt.DATA_PATH.format(chunk_index=0, file_index=0)
    with pytest.raises(DatasetError) as excinfo:
        LeRobotV3Dataset(root)
    assert "observation.images.side: expected a column 'observation.images.side'" in one_line_error(
        excinfo, str(data_path)
    )


def test_writer_rejects_an_episode_that_does_not_fit_the_features(tmp_path):
    bad = marked_episode(0, 5)
    bad.state = bad.state[:, :7]
    with pytest.raises(DatasetError) as excinfo:
        write_dataset(tmp_path / "ds", [bad], fmt.libero_features(SIZE))
    assert one_line_error(excinfo, "episode 0: observation.state: expected finite floats of shape [5, 8]")
    assert list(tmp_path.iterdir()) == []  # nothing left behind


def test_an_interrupted_write_leaves_nothing_that_looks_like_a_dataset(tmp_path):
    def source():
        yield marked_episode(0, 5)
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_dataset(tmp_path / "ds", source(), fmt.libero_features(SIZE))
    assert list(tmp_path.iterdir()) == []


def test_synthetic_episodes_are_deterministic_and_libero_shaped():
    a, b = synthetic_episode(3, seed=1, image_size=SIZE), synthetic_episode(3, seed=1, image_size=SIZE)
    assert a.task == b.task and np.array_equal(a.action, b.action)
    assert np.array_equal(a.frames[fmt.LIBERO_CAMERAS[0]], b.frames[fmt.LIBERO_CAMERAS[0]])
    assert not np.array_equal(synthetic_episode(3, seed=2, image_size=SIZE).action[:5], a.action[:5])
    assert np.array_equal(list(synthetic_episodes(4, seed=1, image_size=SIZE))[3].state, a.state)
    assert 80 <= len(a.state) <= 200 and a.state.shape[1] == 8 and a.action.shape[1] == 7
    assert a.frames[fmt.LIBERO_CAMERAS[1]].shape == (len(a.state), SIZE, SIZE, 3)
    assert np.abs(a.action).max() <= 1 and set(np.unique(a.action[:, 6])) == {-1.0, 1.0}
    assert np.abs(np.diff(a.frames[fmt.LIBERO_CAMERAS[0]].astype(int), axis=0)).mean() > 0.5  # it moves


def test_make_dataset_cli_writes_then_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "ds"
    args = ["make-dataset", "--source", "synthetic", "--episodes", "2", "--out", str(out), "--image-size", "64"]
    assert main(args) == 0
    assert "2/2 episodes" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no temporary folder left
    ds = LeRobotV3Dataset(out, cameras=[])
    assert ds.meta.info["total_episodes"] == 2 and ds.meta.tasks
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"{out}: expected a path where no dataset exists yet" in err
    assert main(["make-dataset", "--source", "carla", "--episodes", "1", "--out", str(tmp_path / "x")]) == 2
    assert "--source: expected synthetic or libero, got 'carla'" in capsys.readouterr().err


@pytest.mark.slow
def test_libero_source_writes_expert_demonstrations_from_real_renders(tmp_path):
    """`make-dataset --source libero` of two suites: one expert episode each (libero_spatial's task 0, then
    libero_goal's first task that the expert covers, 1: the suites take turns), rendered by MuJoCo with the test
    assets, read back: each task's instruction, 256x256 frames of both cameras, 8-d states, 7-d actions."""
    from harness.eval import sim

    assets = os.environ.get(sim.ASSETS_ENV)
    if sim.missing_packages() or not assets:
        pytest.skip("needs the sim extra and LIBERO assets (VLABENCH_LIBERO_ASSETS)")
    out = tmp_path / "libero"
    argv = ["make-dataset", "--source", "libero", "--policy", "expert", "--suite", "libero_spatial,libero_goal"]
    assert main([*argv, "--episodes", "2", "--sim-workers", "2", "--out", str(out), "--assets", assets]) == 0
    data = LeRobotV3Dataset(out, action_horizon=4)
    assert len(data.meta.episodes) == 2 and data.meta.tasks == [
        "pick up the black bowl between the plate and the ramekin and place it on the plate",
        "put the bowl on the stove",
    ]
    for episode in data.meta.episodes:
        first, last = data[episode.rows[0]], data[episode.rows[1] - 1]
        assert 40 < episode.length < 300 and first["task"] == last["task"]
        for camera in ("observation.images.image", "observation.images.wrist_image"):
            assert first[camera].shape == (256, 256, 3) and first[camera].float().std() > 5  # a rendered scene
        assert first["observation.state"].shape == (8,) and first["action"].shape == (4, 7)
        assert not torch.equal(first["observation.state"], last["observation.state"])  # the arm moved


def test_writing_videos_leaves_the_process_scheduling_alone(tmp_path):
    """SVT-AV1 switched the thread opening an encoder to real-time SCHED_FIFO when run as root; every process
    started afterwards inherited it (a busy loop then starved a measurement on its CPU). Writing gives it back."""
    before = os.sched_getscheduler(0)
    write_dataset(tmp_path / "d", synthetic_episodes(1, seed=3, image_size=32, lengths=(4, 5)), fmt.libero_features(32))
    assert os.sched_getscheduler(0) == before


def test_an_episode_the_muxer_refuses_is_encoded_again_then_refused_in_one_line(monkeypatch):
    """SVT-AV1's rare EINVAL at the muxer (twice in loaded CI runs) costs a second encode, not the dataset; one
    that keeps coming is a one-line DatasetError."""
    import av

    from harness.data import video

    frames = [np.full((16, 16, 3), i * 10, dtype=np.uint8) for i in range(4)]
    expected = video.encode_episode(frames, 10, fmt.VideoEncoding())  # SVT-AV1 opened only inside own_scheduling
    real, calls = video._encode, []

    def flaky(*args):
        calls.append(1)
        if len(calls) < 3:
            raise av.error.ArgumentError(22, "Invalid argument", "<none>")
        return real(*args)

    monkeypatch.setattr(video, "_encode", flaky)
    mp4 = video.encode_episode(frames, 10, fmt.VideoEncoding())
    assert len(calls) == 3 and mp4 == expected  # the same bytes: the encode is deterministic

    def refused(*args):
        raise av.error.ArgumentError(22, "Invalid argument", "<none>")

    monkeypatch.setattr(video, "_encode", refused)
    with pytest.raises(DatasetError, match=r"^video: expected an MP4 the muxer accepts \(libsvtav1\), got Invalid"):
        video.encode_episode(frames, 10, fmt.VideoEncoding())
