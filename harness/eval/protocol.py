"""The openpi LIBERO evaluation protocol (docs/libero.md), simulator-agnostic: its constants, what the policy
sees, and what a policy needs from the workers. episode.py runs it in a LIBERO environment.

One episode: reset, load a stored initial state, 10 steps of the dummy action for objects to settle, then
the policy: an observation (both cameras rotated 180 degrees and resized with padding to 224, the 8-d state
and the task's instruction) goes to the policy whenever the action plan is empty; the first 5 actions of
the returned chunk are executed, then the policy is asked again. Success is the environment's done flag
before the suite's step limit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

import numpy as np

if TYPE_CHECKING:  # the workers import this module and never need torch, which models.policy imports
    from models.policy import EvalPolicy

Suite = Literal["libero_spatial", "libero_object", "libero_goal", "libero_10", "libero_90"]
SUITES = get_args(Suite)
SUITE_MAX_STEPS = dict(zip(SUITES, (220, 280, 300, 520, 400)))
WAIT_STEPS = 10
DUMMY_ACTION = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0)  # no motion, gripper open
RENDER_SIZE = 256
IMAGE_SIZE = 224
SEED = 7
TRIALS = 50
ACTION_DIM = 7  # 6-d end-effector delta + gripper
STATE_DIM = 8  # eef position (3) + axis-angle (3) + gripper finger positions (2)


def flip(image: np.ndarray) -> np.ndarray:
    """MuJoCo renders upside down (OpenGL convention): rotate 180 degrees."""
    return np.ascontiguousarray(image[::-1, ::-1])


def resize_with_pad(image: np.ndarray, size: int = IMAGE_SIZE) -> np.ndarray:
    """Resize an HxWx3 uint8 image to fit size x size keeping its aspect ratio (bilinear), then pad with black
    to size x size, centred. A square image is simply resized."""
    from PIL import Image

    h, w = image.shape[:2]
    if (h, w) == (size, size):
        return image
    ratio = max(w / size, h / size)
    new_w, new_h = int(w / ratio), int(h / ratio)
    resized = np.asarray(Image.fromarray(image).resize((new_w, new_h), resample=Image.BILINEAR))
    out = np.zeros((size, size, image.shape[2]), dtype=image.dtype)
    top, left = (size - new_h) // 2, (size - new_w) // 2
    out[top : top + new_h, left : left + new_w] = resized
    return out


def quat_to_axis_angle(quat) -> np.ndarray:
    """Unit quaternion (x, y, z, w), robosuite's order, to an axis-angle vector (axis * angle)."""
    x, y, z, w = (float(v) for v in quat)
    w = min(1.0, max(-1.0, w))
    den = math.sqrt(1.0 - w * w)
    if math.isclose(den, 0.0):
        return np.zeros(3)  # no rotation: any axis, zero angle
    return np.array([x, y, z]) * 2.0 * math.acos(w) / den


def state_vector(obs: dict) -> np.ndarray:
    return np.concatenate(
        [obs["robot0_eef_pos"], quat_to_axis_angle(obs["robot0_eef_quat"]), obs["robot0_gripper_qpos"]]
    ).astype(np.float32)


def policy_observation(obs: dict, prompt: str) -> dict:
    """What the policy sees: both 224x224 camera images (uint8), the 8-d state and the instruction."""
    return {
        "image": resize_with_pad(flip(obs["agentview_image"])),
        "wrist_image": resize_with_pad(flip(obs["robot0_eye_in_hand_image"])),
        "state": state_vector(obs),
        "prompt": prompt,
    }


def demonstration_observation(sample: dict, cameras: tuple[str, str]) -> dict:
    """What the policy would be shown at a frame of a LIBERO demonstration dataset (a LeRobotV3Dataset sample;
    `cameras`: its agent-view and wrist keys): the stored images, which are rotated as the policy sees them, turned
    back into the simulator's and put through `policy_observation`, then the recorded state."""
    raw = {
        "agentview_image": flip(sample[cameras[0]].numpy()),
        "robot0_eye_in_hand_image": flip(sample[cameras[1]].numpy()),
        "robot0_eef_pos": np.zeros(3),  # the state comes from the sample below
        "robot0_eef_quat": np.array([0.0, 0.0, 0.0, 1.0]),
        "robot0_gripper_qpos": np.zeros(2),
    }
    return {**policy_observation(raw, sample["task"]), "state": sample["observation.state"].numpy()}


@dataclass(frozen=True)
class PolicyNeeds:
    """What a policy needs from the environment workers, as the policy declares it (models/policy.py:
    `needs_images`, `privileged`, `replan_steps`), carried in each episode message."""

    images: bool  # False: the workers never render (physics-only steps, ~10x faster on a CPU)
    privileged: bool  # True: observations carry `sim_state` (simulator poses; scripted experts only)
    replan_steps: int  # actions executed from each chunk before the policy is asked again

    @classmethod
    def of(cls, policy: EvalPolicy) -> PolicyNeeds:
        return cls(images=policy.needs_images, privileged=policy.privileged, replan_steps=policy.replan_steps)
