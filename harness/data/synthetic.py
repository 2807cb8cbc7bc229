"""Synthetic LIBERO-like episodes: the `synthetic` source of `vlabench make-dataset`.

Fast to make and deterministic (episode n depends on the seed and n only, not on how many are made), and
shaped like LIBERO demonstrations: 80-200 frames at 10 fps, a smooth 7-D action in [-1, 1] whose last
dimension is the gripper command (-1 open, +1 closed), an 8-D state integrated from it (end-effector
position, axis-angle, two finger positions), and two cameras that move with the state: an agent view of a
sliding table texture with the gripper and objects drawn on it, and a wrist view of a texture that shifts
and turns with the end effector. Not photo-real, but textured and moving, so the video compresses like
video rather than like a flat colour.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from .lerobot_format import LIBERO_CAMERAS
from .writer import Episode

TASKS = (
    "put the red block in the basket",
    "open the top drawer of the cabinet",
    "push the plate to the front of the stove",
    "pick up the black bowl and place it on the plate",
    "turn on the stove",
    "put the mug on the left plate",
)
LENGTHS = (80, 200)


def synthetic_episodes(
    count: int, seed: int = 0, image_size: int = 256, lengths: tuple[int, int] = LENGTHS
) -> Iterator[Episode]:
    for n in range(count):
        yield synthetic_episode(n, seed, image_size, lengths)


def _smooth(rng: np.random.Generator, length: int, dims: int, width: int = 12) -> np.ndarray:
    """Low-pass random walk in [-1, 1]: white noise under a moving average, rescaled."""
    noise = rng.normal(size=(length + width, dims))
    kernel = np.ones(width) / width
    out = np.stack([np.convolve(noise[:, d], kernel, mode="valid")[:length] for d in range(dims)], axis=1)
    return np.clip(out * np.sqrt(width) * 0.5, -1, 1)


def synthetic_episode(n: int, seed: int = 0, image_size: int = 256, lengths: tuple[int, int] = LENGTHS) -> Episode:
    rng = np.random.default_rng([seed, n])
    length = int(rng.integers(lengths[0], lengths[1] + 1))
    task_id = int(rng.integers(len(TASKS)))

    # The gripper closes once, partway through, and sometimes opens again near the end.
    close_at = int(rng.integers(length // 4, length // 2))
    open_at = int(rng.integers(3 * length // 4, length)) if rng.random() < 0.5 else length
    gripper = np.where((np.arange(length) >= close_at) & (np.arange(length) < open_at), 1.0, -1.0)
    action = np.concatenate([_smooth(rng, length, 6), gripper[:, None]], axis=1).astype(np.float32)

    position = np.array([-0.2, 0.0, 1.15]) + rng.uniform(-0.05, 0.05, 3) + np.cumsum(action[:, :3], axis=0) * 0.004
    rotation = np.array([3.1, 0.0, 0.0]) + rng.uniform(-0.1, 0.1, 3) + np.cumsum(action[:, 3:6], axis=0) * 0.01
    # The fingers follow the command with a lag: 0.04 m apart open, ~0 closed.
    finger = np.empty(length)
    width = 0.04
    for t in range(length):
        width += ((0.04 if gripper[t] < 0 else 0.002) - width) * 0.3
        finger[t] = width
    state = np.concatenate([position, rotation, finger[:, None], -finger[:, None]], axis=1).astype(np.float32)

    frames = _render(rng, state, task_id, image_size)
    return Episode(task=TASKS[task_id], frames=dict(zip(LIBERO_CAMERAS, frames)), state=state, action=action)


def _texture(rng: np.random.Generator, height: int, width: int, tint: np.ndarray) -> np.ndarray:
    """A smooth coloured texture: a few random sinusoids per channel over a tinted gradient."""
    yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
    out = np.empty((height, width, 3), np.float32)
    for c in range(3):
        wave = sum(
            np.sin(xx * rng.uniform(0.01, 0.08) + yy * rng.uniform(0.01, 0.08) + rng.uniform(0, 6.3)) for _ in range(3)
        )
        out[..., c] = tint[c] + 25 * wave + 40 * yy / height
    # Fine grain (wood, cloth): fixed to the texture, so it moves with the view as real surface detail does.
    grain = rng.normal(0, 1, size=(height // 2 + 1, width // 2 + 1)).repeat(2, 0).repeat(2, 1)[:height, :width]
    return np.clip(out + 4 * grain[..., None], 0, 255).astype(np.uint8)


def _disc(image: np.ndarray, cy: float, cx: float, radius: float, color) -> None:
    h, w = image.shape[:2]
    y0, y1 = max(0, int(cy - radius)), min(h, int(cy + radius) + 1)
    x0, x1 = max(0, int(cx - radius)), min(w, int(cx + radius) + 1)
    if y0 >= y1 or x0 >= x1:
        return
    yy, xx = np.ogrid[y0:y1, x0:x1]
    image[y0:y1, x0:x1][(yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2] = color


def _box(image: np.ndarray, cy: float, cx: float, half_h: float, half_w: float, color) -> None:
    h, w = image.shape[:2]
    image[max(0, int(cy - half_h)) : min(h, int(cy + half_h)), max(0, int(cx - half_w)) : min(w, int(cx + half_w))] = (
        color
    )


def _render(rng: np.random.Generator, state: np.ndarray, task_id: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    length = len(state)
    s = size / 256  # shapes are designed at 256 px and scale with the image
    tint = np.array([90, 80, 70]) + 15 * np.array([task_id % 3, task_id % 2, task_id % 4])
    table = _texture(rng, size, 2 * size, tint)
    wall = _texture(rng, 2 * size, 2 * size, tint[::-1] + 30)
    colors = rng.integers(40, 255, size=(3, 3)).astype(np.uint8)
    objects = rng.uniform(0.25, 0.75, size=(3, 2)) * size
    agent = np.empty((length, size, size, 3), np.uint8)
    wrist = np.empty((length, size, size, 3), np.uint8)
    for t in range(length):
        x, y, z = state[t, :3]
        rx, ry, rz = state[t, 3:6]
        opening = state[t, 6] / 0.04  # 1 open, ~0 closed

        # Agent view: the table slides slowly, objects sit on it, the gripper hovers at the end effector.
        shift = int((t * 0.7 + 40 * x) * s) % size
        frame = agent[t]
        frame[:] = table[:, shift : shift + size]
        for (oy, ox), color in zip(objects, colors):
            _box(frame, oy, (ox - shift) % size, 10 * s, 14 * s, color)
        gy, gx = size * (0.5 - 2.0 * (y - 0.0)), size * (0.5 + 2.0 * (x + 0.2))
        radius = (10 + 20 * (z - 1.0)) * s
        _disc(frame, gy, gx, max(radius, 4 * s), (200, 200, 210))
        for side in (-1, 1):
            _box(frame, gy + 12 * s, gx + side * (4 + 10 * opening) * s, 8 * s, 3 * s, (60, 60, 60))

        # Wrist view: the scene seen from the hand, shifting with position and turning with rotation.
        oy = int(size / 2 + 300 * y * s + 20 * ry * s) % size
        ox = int(size / 2 + 300 * x * s + 20 * rz * s) % size
        frame = wrist[t]
        frame[:] = wall[oy : oy + size, ox : ox + size]
        if abs(rx - 3.1) > 0.05:  # a tilt of the hand darkens one side
            frame[:, : size // 4] //= 2
        for side in (-1, 1):
            _box(frame, size * 0.85, size / 2 + side * (8 + 40 * opening) * s, 30 * s, 8 * s, (50, 50, 55))
    return agent, wrist
