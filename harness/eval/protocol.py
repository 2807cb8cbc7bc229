"""The openpi LIBERO evaluation protocol (docs/libero.md), simulator-agnostic.

One episode: reset, load a stored initial state, 10 steps of the dummy action for objects to settle, then
the policy: an observation (both cameras rotated 180 degrees and resized with padding to 224, the 8-d state
and the task's instruction) goes to the policy whenever the action plan is empty; the first 5 actions of
the returned chunk are executed, then the policy is asked again. Success is the environment's done flag
before the suite's step limit.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable
from dataclasses import dataclass, field
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


@dataclass
class EpisodeOutcome:
    success: bool
    steps: int  # policy steps executed (after the wait steps)
    reason: str | None  # why it failed: "timeout" when the step limit ran out
    chunks: int = 0  # policy calls
    frames: list = field(default_factory=list)  # agentview images as the policy saw them, if recorded
    # a demonstration, if asked for: per step both cameras (256x256, rotated as the policy sees them), the 8-d
    # state and the action executed from it
    demo: dict | None = None


class _SkippableCamera:
    """Wraps a robosuite camera sensor: while off it returns its last image instead of rendering. The
    observable around it keeps its own sampling clock, so a camera switched back on samples at the same
    sub-step, with the same image, as one that was never off."""

    def __init__(self, sensor):
        self.sensor, self.on, self.last = sensor, True, None
        self.__modality__ = sensor.__modality__  # robosuite reads the sensor's modality

    def __call__(self, obs_cache):
        if self.on or self.last is None:
            self.last = self.sensor(obs_cache)
        return self.last


def set_cameras(env, on: bool) -> None:
    """Let the cameras of a LIBERO (robosuite) environment render, or not. Rendering is most of a step's
    time and physics never depends on it, so steps whose images nobody looks at skip it."""
    observables = getattr(getattr(env, "env", None), "_observables", None)
    if observables is None:
        return  # not a robosuite environment: nothing to switch
    for name, observable in observables.items():
        if name.endswith("_image"):
            if not isinstance(observable._sensor, _SkippableCamera):  # a hard reset builds new observables
                observable._sensor = _SkippableCamera(observable._sensor)
            observable._sensor.on = on


def run_episode(
    env,
    init_state: np.ndarray,
    prompt: str,
    max_steps: int,
    get_chunk: Callable[[dict], np.ndarray],
    needs: PolicyNeeds,
    record: bool = False,
    render_every_step: bool = False,
    seed: int | None = None,
    demonstration: bool = False,
) -> EpisodeOutcome:
    """One episode of the protocol. `get_chunk(observation)` returns an action chunk [H, 7]. Cameras render
    only for steps whose observation is used (a re-plan or a recorded frame) unless `render_every_step`;
    never for a policy that needs no images (unless recorded). A privileged policy's observations carry
    `sim_state` (harness/eval/simstate.py).

    `seed` reseeds the environment before its reset. LIBERO places the fixed furniture (cabinets, stoves)
    at every reset from numpy's global generator, and a stored initial state does not move it back. openpi
    seeds once per task and runs the trials in order, so its trial i sees the generator after i resets;
    seeding each episode (seed + trial) makes its scene independent of which worker runs it and when.
    Trial 0 then matches openpi's exactly; later trials draw from the same distribution. The reset is that of
    a newly built environment (env.reset_as_new): nothing an earlier episode did survives it.

    `demonstration` keeps every step's camera images, state and action (`outcome.demo`), for datasets."""
    from .env import reset_as_new

    skip = not (render_every_step or record or demonstration)
    set_cameras(env, True)  # an earlier episode may have left them off
    reset_as_new(env, seed)
    if skip:
        set_cameras(env, False)
    obs = env.set_init_state(init_state)
    reader = None
    if needs.privileged:
        from .simstate import SimStateReader  # after the reset: a hard reset builds a new model

        reader = SimStateReader(env)
    for i in range(WAIT_STEPS):  # done is not checked while objects settle, as in openpi
        if skip and needs.images and i == WAIT_STEPS - 1:
            set_cameras(env, True)  # the last wait step's images go to the first policy call
        obs, _, _, _ = env.step(list(DUMMY_ACTION))

    def observe(obs):
        observation = (
            policy_observation(obs, prompt) if needs.images else {"state": state_vector(obs), "prompt": prompt}
        )
        if reader is not None:
            observation["sim_state"] = reader.read()
        return observation

    plan: collections.deque = collections.deque()
    outcome = EpisodeOutcome(success=False, steps=0, reason="timeout")
    demo = {"image": [], "wrist_image": [], "state": [], "action": []} if demonstration else None
    for step in range(max_steps):
        if record:
            outcome.frames.append(resize_with_pad(flip(obs["agentview_image"])))  # as the policy sees it
        if not plan:
            chunk = np.asarray(get_chunk(observe(obs)), dtype=np.float64)
            if chunk.ndim != 2 or chunk.shape[1] != ACTION_DIM or len(chunk) == 0:
                raise ValueError(f"policy returned an action chunk of shape {chunk.shape}, expected [H, {ACTION_DIM}]")
            plan.extend(chunk[: needs.replan_steps])
            outcome.chunks += 1
        action = plan.popleft()
        if demo is not None:
            demo["image"].append(flip(obs["agentview_image"]))
            demo["wrist_image"].append(flip(obs["robot0_eye_in_hand_image"]))
            demo["state"].append(state_vector(obs))
            demo["action"].append(action.astype(np.float32))
        if skip and needs.images:
            set_cameras(env, not plan)  # images are needed after this step only if the plan runs out
        obs, _, done, _ = env.step(action.tolist())
        outcome.steps = step + 1
        if done:
            outcome.success, outcome.reason = True, None
            break
    if demo is not None:
        outcome.demo = {key: np.stack(values) for key, values in demo.items()}
    return outcome
