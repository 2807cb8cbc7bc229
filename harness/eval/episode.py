"""One episode of the openpi protocol (protocol.py) in a LIBERO environment: reset as a new environment, the
stored initial state, the wait steps, then action chunks from the policy until success or the step limit.
Cameras render only on steps whose images are read."""

from __future__ import annotations

import collections
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .env import reset_as_new
from .protocol import (
    ACTION_DIM,
    DUMMY_ACTION,
    WAIT_STEPS,
    PolicyNeeds,
    flip,
    policy_observation,
    resize_with_pad,
    state_vector,
)
from .simstate import SimStateReader


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
    action_noise: float | tuple[float, float] = 0.0,
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

    `demonstration` keeps every step's camera images, state and action (`outcome.demo`), for datasets. With
    `action_noise` the arm's six action values are executed with Gaussian noise of that deviation added (seeded
    by `seed`; a pair gives the position's and the rotation's deviations), while the demonstration records the
    policy's own action."""
    skip = not (render_every_step or record or demonstration)
    obs, reader = _start_episode(env, init_state, seed, skip, needs)
    plan: collections.deque = collections.deque()
    outcome = EpisodeOutcome(success=False, steps=0, reason="timeout")
    demo = {"image": [], "wrist_image": [], "state": [], "action": []} if demonstration else None
    deviations = arm_noise_deviations(action_noise)
    noise = np.random.default_rng(seed) if deviations.any() else None
    for step in range(max_steps):
        if record:
            outcome.frames.append(resize_with_pad(flip(obs["agentview_image"])))  # as the policy sees it
        if not plan:
            plan.extend(_action_chunk(get_chunk, _observe(obs, prompt, needs, reader))[: needs.replan_steps])
            outcome.chunks += 1
        action = plan.popleft()
        if demo is not None:
            _keep_demo_step(demo, obs, action)
        if skip and needs.images:
            set_cameras(env, not plan)  # images are needed after this step only if the plan runs out
        if noise is not None:
            action = _perturbed(action, noise, deviations)
        obs, _, done, _ = env.step(action.tolist())
        outcome.steps = step + 1
        if done:
            outcome.success, outcome.reason = True, None
            break
    if demo is not None:
        outcome.demo = {key: np.stack(values) for key, values in demo.items()}
    return outcome


def _start_episode(env, init_state: np.ndarray, seed: int | None, skip: bool, needs: PolicyNeeds):
    """Reset as a new environment, set the stored initial state and run the wait steps; returns the last
    observation and the sim-state reader of a privileged policy (else None). With `skip` the cameras stay off
    until the last wait step, whose images go to the first policy call (if the policy reads images)."""
    set_cameras(env, True)  # an earlier episode may have left them off
    reset_as_new(env, seed)
    if skip:
        set_cameras(env, False)
    obs = env.set_init_state(init_state)
    reader = None
    if needs.privileged:
        reader = SimStateReader(env)  # after the reset: a hard reset builds a new model
    for i in range(WAIT_STEPS):  # done is not checked while objects settle, as in openpi
        if skip and needs.images and i == WAIT_STEPS - 1:
            set_cameras(env, True)  # the last wait step's images go to the first policy call
        obs, _, _, _ = env.step(list(DUMMY_ACTION))
    return obs, reader


def _observe(obs: dict, prompt: str, needs: PolicyNeeds, reader: SimStateReader | None) -> dict:
    """What the policy is given: images, state and prompt (or only state and prompt for a policy that needs no
    images), and the sim state for a privileged one."""
    observation = policy_observation(obs, prompt) if needs.images else {"state": state_vector(obs), "prompt": prompt}
    if reader is not None:
        observation["sim_state"] = reader.read()
    return observation


def _action_chunk(get_chunk: Callable[[dict], np.ndarray], observation: dict) -> np.ndarray:
    """The policy's action chunk for an observation, checked to be [H, 7] with H >= 1."""
    chunk = np.asarray(get_chunk(observation), dtype=np.float64)
    if chunk.ndim != 2 or chunk.shape[1] != ACTION_DIM or len(chunk) == 0:
        raise ValueError(f"policy returned an action chunk of shape {chunk.shape}, expected [H, {ACTION_DIM}]")
    return chunk


ARM_DIMS = 6  # the action's position and rotation deltas; the seventh, the gripper, is executed as given


def arm_noise_deviations(action_noise: float | tuple[float, float] | list[float]) -> np.ndarray:
    """The noise deviation of each of the arm's six action values: one for all, or (position, rotation)."""
    position, rotation = (action_noise, action_noise) if np.isscalar(action_noise) else action_noise
    return np.array([position] * 3 + [rotation] * 3, dtype=np.float64)


def _perturbed(action: np.ndarray, rng: np.random.Generator, deviations: np.ndarray) -> np.ndarray:
    """The action with Gaussian noise on the arm's values, kept in the controller's [-1, 1] range."""
    out = np.array(action, dtype=np.float64)
    out[:ARM_DIMS] = np.clip(out[:ARM_DIMS] + rng.normal(0.0, deviations, ARM_DIMS), -1.0, 1.0)
    return out


def _keep_demo_step(demo: dict, obs: dict, action: np.ndarray) -> None:
    """One step of a demonstration: both cameras as the policy sees them, the 8-d state, the action executed."""
    demo["image"].append(flip(obs["agentview_image"]))
    demo["wrist_image"].append(flip(obs["robot0_eye_in_hand_image"]))
    demo["state"].append(state_vector(obs))
    demo["action"].append(action.astype(np.float32))
