"""MP4 through PyAV: encode an episode's frames, append episodes to a shared file, decode a frame by time.

LeRobot v3 stores many episodes per MP4, one after the other in time: each episode is encoded on its own
(so it starts on a keyframe) and its packets are appended with their timestamps shifted by the duration
already in the file; `from_timestamp` of an episode is that duration. LeRobot re-muxes the whole file for
every episode (ffmpeg's concat demuxer); we keep the file open and append, which writes the same stream.
"""

from __future__ import annotations

import contextlib
import io
import os
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

from .errors import DatasetError
from .lerobot_format import VideoEncoding

# SVT-AV1 prints a banner per encoder straight to stderr; level 1 keeps its errors only.
os.environ.setdefault("SVT_LOG", "1")


@contextlib.contextmanager
def own_scheduling():
    """Run a block and give the calling thread its scheduling policy back afterwards. SVT-AV1, run as root,
    switches the thread that opens an encoder to real-time SCHED_FIFO at priority 99 (seen with PyAV 18 here),
    and every process that thread starts afterwards inherits it: a busy loop started then never yields its CPU,
    and a measurement on that CPU would hang."""
    if not hasattr(os, "sched_getscheduler"):  # not Linux: nothing to keep
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if os.sched_getscheduler(0) != policy:
            os.sched_setscheduler(0, policy, param)


ENCODE_ATTEMPTS = 3


def encode_episode(frames, fps: int, encoding: VideoEncoding) -> bytes:
    """The frames (uint8 [H, W, 3] each) as an MP4 in memory. The encode is deterministic; it is run again when
    the MP4 muxer refuses a packet with EINVAL, which SVT-AV1 (PyAV 18) made twice in the CI's loaded runs,
    on a flushed packet, and never in 900 encodes of the same frames on an idle machine."""
    for _ in range(ENCODE_ATTEMPTS):
        try:
            with own_scheduling():
                return _encode(frames, fps, encoding)
        except av.error.ArgumentError as e:
            error = e
    raise DatasetError(
        "video", None, f"an MP4 the muxer accepts ({encoding.codec})", f"{error}, {ENCODE_ATTEMPTS} times"
    )


def _encode(frames, fps: int, encoding: VideoEncoding) -> bytes:
    first = np.asarray(frames[0])
    height, width = first.shape[:2]
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        stream = out.add_stream(encoding.codec, rate=fps, options=encoding.options())
        stream.width, stream.height, stream.pix_fmt = width, height, encoding.pix_fmt
        try:
            for frame in frames:
                image = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
                out.mux(stream.encode(image))
        except BaseException:  # interrupted: drain the encoder anyway, SVT-AV1 complains when torn down mid-stream
            with contextlib.suppress(Exception):
                stream.encode()
            raise
        out.mux(stream.encode())  # flush
    return buf.getvalue()


class VideoFileWriter:
    """One camera's current MP4 file, to which encoded episodes are appended."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.duration_s = 0.0  # the from_timestamp of the next episode
        self.bytes = 0
        # faststart puts the index first, as LeRobot's files have it: a reader gets it in one read.
        self._out = av.open(str(path), "w", options={"movflags": "faststart"})
        self._stream = None

    def append(self, episode_mp4: bytes) -> tuple[float, float]:
        """Append one episode; returns its (from_timestamp, to_timestamp) in this file."""
        with av.open(io.BytesIO(episode_mp4)) as src:
            stream = src.streams.video[0]
            if self._stream is None:
                self._stream = self._out.add_stream_from_template(stream, opaque=True)
                self._stream.time_base = stream.time_base
            shift = round(Fraction(self.duration_s) / stream.time_base)
            for packet in src.demux(stream):
                if packet.dts is None:  # the demuxer's end-of-stream marker
                    continue
                packet.pts += shift
                packet.dts += shift
                packet.stream = self._stream
                self.bytes += packet.size
                self._out.mux(packet)
            episode_s = float(stream.duration * stream.time_base)
        start = self.duration_s
        self.duration_s += episode_s
        return start, self.duration_s

    def close(self) -> None:
        self._out.close()


def probe(path: Path) -> dict:
    """What the file's first video stream is: width, height, codec, frames, duration_s, fps (None where the container
    does not say); read from the container's metadata, nothing decoded."""
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise DatasetError(path, None, "an MP4 with a video stream", "no video stream")
            stream = container.streams.video[0]
            duration = stream.duration * stream.time_base if stream.duration else container.duration / av.time_base
            return {
                "width": stream.codec_context.width,
                "height": stream.codec_context.height,
                "codec": stream.codec_context.name,
                "frames": stream.frames,
                "duration_s": float(duration or 0),
                "fps": float(stream.average_rate) if stream.average_rate else None,
            }
    except av.FFmpegError as exc:
        raise DatasetError(path, None, "a readable MP4", f"{type(exc).__name__}: {exc.strerror or exc}") from None


class VideoDecoder:
    """Frames of one MP4 by timestamp, keeping the file open between calls.

    A request seeks to the keyframe at or before the time and decodes forward (LeRobot stores a keyframe
    every 2 frames, so at most two decodes); a request just after the previous one decodes on without
    seeking; the same time twice returns the kept frame."""

    def __init__(self, path: Path, tolerance_s: float = 1e-4):
        self.path = path
        self.tolerance_s = tolerance_s
        try:
            self._container = av.open(str(path))
            self._stream = self._container.streams.video[0]
        except (av.FFmpegError, IndexError) as exc:
            raise DatasetError(path, None, "a readable MP4 with a video stream", _why(exc)) from None
        self._stream.codec_context.thread_count = 1  # one thread per DataLoader worker: no oversubscription
        self._time_base = float(self._stream.time_base)
        self._frame_ticks = None  # ticks between frames, learnt from the first two decoded
        self._frames = None  # the decode iterator
        self._position: int | None = None  # pts of the frame it decoded last
        self._kept: tuple[int, np.ndarray] | None = None  # the frame returned last

    def frame_at(self, ts: float, what: str = "") -> np.ndarray:
        """The frame at `ts` seconds, uint8 [H, W, 3]; `what` names it in errors (e.g. "episode 3, frame 7")."""
        target = ts / self._time_base
        if self._kept is not None and abs(self._kept[0] - target) * self._time_base <= self.tolerance_s:
            return self._kept[1].copy()  # a copy: the caller may change its frame in place
        near = (
            self._frame_ticks is not None
            and self._position is not None
            and 0 < target - self._position <= 2 * self._frame_ticks
        )
        frame = None
        try:
            if not near:
                self._container.seek(max(0, round(target) - 1), stream=self._stream, backward=True, any_frame=False)
                self._frames = self._container.decode(self._stream)
                self._position = None
            for decoded in self._frames:
                if decoded.pts is None:
                    continue
                if self._position is not None and self._frame_ticks is None and decoded.pts > self._position:
                    self._frame_ticks = decoded.pts - self._position
                self._position = decoded.pts
                if (decoded.pts - target) * self._time_base >= -self.tolerance_s:
                    frame = decoded
                    break
        except av.FFmpegError as exc:
            self._frames = self._position = None
            raise DatasetError(self.path, None, f"a decodable frame at {ts:.4f} s{_of(what)}", _why(exc)) from None
        if frame is None:
            self._frames = self._position = None
            raise DatasetError(
                self.path, None, f"a frame at {ts:.4f} s{_of(what)}", "the end of the file (truncated or damaged)"
            )
        found = frame.pts * self._time_base
        if abs(found - ts) > self.tolerance_s:
            raise DatasetError(
                self.path,
                None,
                f"a frame at {ts:.4f} s{_of(what)} within {self.tolerance_s} s",
                f"the nearest at {found:.4f} s",
            )
        image = rgb_array(frame)
        self._kept = (frame.pts, image)
        return image.copy()

    def close(self) -> None:
        self._container.close()


def rgb_array(frame) -> np.ndarray:
    """The frame as an RGB uint8 array [H, W, 3], converted in the calling thread. swscale's default (threads=0)
    converts on a pool of slice threads that PyAV keeps with its converter; a DataLoader worker forked from a process
    that converted a frame inherits that converter without the threads, and waits for them forever (av 18.1.1 hung
    tests/test_data_path.py so). One frame is small work: a thread of its own costs more than it saves."""
    return frame.to_ndarray(format="rgb24", threads=1)


def _of(what: str) -> str:
    return f" ({what})" if what else ""


def _why(exc: BaseException) -> str:
    text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return " ".join(f"{type(exc).__name__}: {text}".split())
