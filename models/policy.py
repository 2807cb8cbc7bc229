"""Policies for closed-loop evaluation (`vlabench eval`), as model families provide them: the interface the
evaluation runner drives (`EvalPolicy`), and what every learned-model policy needs (its device and dtype,
random weights for throughput runs, a checkpoint from a path or the Hugging Face Hub).

A policy takes a batch of observations (each: `image` and `wrist_image` uint8 224x224x3, `state` float32 [8],
`prompt` str, `noise_seed` int; a privileged policy's also `sim_state`, and a policy that needs no images gets
only `state`, `prompt` and `noise_seed`) and returns one action chunk [H, 7] per observation. The runner batches
the observations of every environment waiting for a chunk into one `infer` call.
"""

from __future__ import annotations

import abc
import json
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

HUB_PATTERNS = ["*.safetensors", "*.json", "assets/**", "*.model"]
REPLAN_STEPS = 5  # the openpi LIBERO protocol's: actions executed from each chunk before the next observation


def snap_to_values(actions: np.ndarray, values: dict[int, Sequence[float]]) -> np.ndarray:
    """Actions [H, d] with each dimension in `values` set to the nearest of its values: a dimension the
    demonstrations drove with a few discrete commands gets one of them. robosuite's Panda gripper moves by the
    sign of its command every step and holds only at exactly 0, so a regressed 0.03 where the demonstrations held
    would open or close it."""
    out = np.array(actions, copy=True)
    for dim, allowed in values.items():
        if dim < out.shape[-1]:
            grid = np.asarray(allowed, dtype=out.dtype)
            out[..., dim] = grid[np.abs(out[..., dim, None] - grid).argmin(axis=-1)]
    return out


class PolicyError(RuntimeError):
    """A policy that cannot be built (bad checkpoint, missing tokenizer, ...), in one line."""


class EvalPolicy(abc.ABC):
    """The interface `vlabench eval` drives: every evaluation policy subclasses it, and the evaluation reads these
    attributes and calls these methods, nothing else. The defaults are a learned policy's under the openpi
    protocol, on the CPU; a policy overrides what differs (as class attributes, or set in `__init__`)."""

    name: str  # the policy's name in results and in `--policy`; every policy sets it
    # What the policy needs from the environment workers (sent with each episode):
    needs_images: bool = True  # False: the workers never render, observations carry no images
    privileged: bool = False  # True: each observation carries `sim_state` (simulator poses and the task's goal)
    replan_steps: int = REPLAN_STEPS  # actions executed from each chunk before the next observation
    # How the runner calls it and what it reports:
    batches: bool = True  # False: a call costs next to nothing, the runner sends each observation without waiting
    device: torch.device = torch.device("cpu")  # where it computes: a CUDA device names the GPU in the result
    # (batch size, seconds) of each `infer` call's model compute, as the policy timed it; empty for a policy
    # that does not time itself (the runner times every call as a whole anyway)
    latencies: Sequence[tuple[int, float]] = ()

    @abc.abstractmethod
    def infer(self, observations: list[dict]) -> list[np.ndarray]:
        """One action chunk [H, 7] per observation, in order."""

    def warm_up(self, max_batch: int) -> float:
        """One-off set-up before the episodes (e.g. capturing graphs for every batch size); returns seconds."""
        return 0.0

    def covers(self, task: dict) -> bool:
        """Whether the policy can do the task (a scripted policy covers some); a learned policy takes every task."""
        return True

    def check_tasks(self, tasks: list[dict]) -> None:
        """Refuse (raise PolicyError), in one line and before anything runs, tasks the policy cannot do (a scripted
        policy); a learned policy takes every task."""
        return None

    def describe(self) -> dict:
        """What the result file records as `policy`: at least the name, and what identifies the model."""
        return {"name": self.name}


def resolve_checkpoint(spec: str) -> Path:
    """A local file or folder, else a Hugging Face Hub id downloaded (safetensors, JSON, stats, tokenizer)."""
    path = Path(spec).expanduser()
    if path.exists():
        return path
    if re.fullmatch(r"[\w.-]+/[\w.-]+", spec):
        try:
            from huggingface_hub import snapshot_download

            return Path(snapshot_download(spec, allow_patterns=HUB_PATTERNS))
        except Exception as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise PolicyError(
                f"checkpoint {spec!r}: not a local path, and downloading it from the Hugging Face Hub failed ({reason})"
            ) from None
    raise PolicyError(f"checkpoint {spec!r}: no such file or folder (and not a Hub id like lerobot/pi05_libero)")


def device_and_dtype(device: str | None, dtype: str | None) -> tuple[torch.device, torch.dtype]:
    """The policy's device (a GPU when there is one) and dtype (bf16 on a GPU, fp32 on a CPU, unless given)."""
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    default = torch.bfloat16 if dev.type == "cuda" else torch.float32
    return dev, {"bf16": torch.bfloat16, "fp32": torch.float32, None: default}[dtype]


def random_model(model_class, sizes: dict, size: str, device: torch.device, init_weights, seed: int):
    """Random weights, for throughput runs and tests: no files needed."""
    if size not in sizes:
        raise PolicyError(f"--model-size: expected one of {', '.join(sizes)}, got {size!r}")
    with torch.device(device):
        model = model_class(sizes[size])
    init_weights(model, seed)
    return model


def observation_noise(observations: list[dict], shape: tuple[int, ...]) -> torch.Tensor:
    """The initial noise [N, *shape] of a batch of observations on the CPU, one generator per observation seeded with
    its `noise_seed`: an episode's noise does not depend on which others share its batch."""
    return torch.stack(
        [torch.randn(shape, generator=torch.Generator().manual_seed(int(o.get("noise_seed", 0)))) for o in observations]
    )


def read_json(path: Path) -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise PolicyError(f"{path}: unreadable JSON ({e})") from None
