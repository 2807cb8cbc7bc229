"""Pi0.5's input processing, shared by LIBERO evaluation and the training data path: what openpi and LeRobot
do between a robot observation (camera images, an 8-d state, an instruction) and the model's batch.

- Images: uint8 HxWx3 -> resized with padding to the model's square size (bilinear; a square image is just
  resized), scaled to [-1, 1], channels first. The LIBERO evaluation (openpi's protocol, harness/eval/protocol.py)
  hands the policy camera images already resized with padding to 224 (PIL's antialiased bilinear, uint8), while
  a dataset stores them at 256: for a model whose image size is not 224, training frames first go through that
  same resize (`presented`), so that the model trains on the pixels the evaluation shows it (a 224 model keeps
  LeRobot's training path, the ladder's baseline, which resizes 256 -> 224 without antialiasing). Without it a model whose
  image size is not 224 (small: 112) saw 256 -> 112 in training (bilinear without antialiasing, which skips
  pixels) but 256 -> 224 -> 112 in evaluation (tests/test_train_openloop.py).
- State: normalised (quantile by default, from the dataset statistics), padded with zeros to `state_pad`
  values and discretised into 256 bins inside the prompt "Task: <instruction>, State: <bins>;\\nAction: "
  (LeRobot and openpi with discrete state), or left out of the prompt (openpi's pi05_libero: the cleaned
  instruction, then "\\n" tokenised on its own).
- Prompt: tokenised, truncated and padded to `max_tokens` (200) with a mask.
- Actions (training): normalised like the state, padded with zeros to the model's action dimension; the
  chunk's `action_is_pad` mask (steps past the episode's end) is kept beside them. Neither reference masks the
  Pi0.5 loss with it (LeRobot averages over the chunk's real action dimensions, openpi over all 32), and
  neither does our model: the mask is carried for information.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from ..normalize import Normalizer
from ..processing import ProcessorSteps
from ..tokenizers import Tokenizer
from .batch import sample_flow_time


def clean_prompt(text: str) -> str:
    return text.strip().replace("_", " ").replace("\n", " ")


def discretize_state(state: np.ndarray) -> np.ndarray:
    """A normalised state in [-1, 1] as 256-bin indices, as both reference implementations do."""
    return np.digitize(state, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1


def resize_with_pad(images: torch.Tensor, size: int) -> torch.Tensor:
    """[N, 3, H, W] float -> [N, 3, size, size]: resized to fit keeping the aspect ratio (bilinear), the rest
    padded with -1 (black in [-1, 1]), centred."""
    h, w = images.shape[-2:]
    if (h, w) == (size, size):
        return images
    ratio = max(w / size, h / size)
    new_h, new_w = int(h / ratio), int(w / ratio)
    resized = F.interpolate(images, size=(new_h, new_w), mode="bilinear", align_corners=False)
    if (new_h, new_w) == (size, size):
        return resized
    top, left = (size - new_h) // 2, (size - new_w) // 2
    return F.pad(resized, (left, size - new_w - left, top, size - new_h - top), value=-1.0)


PRESENTED_SIZE = 224  # openpi's LIBERO client resizes camera images with padding to this before the policy


def presented(frames: torch.Tensor, size: int = PRESENTED_SIZE) -> torch.Tensor:
    """[N, 3, H, W] float in [0, 1] -> [N, 3, size, size]: what the evaluation's resize with padding
    (harness/eval/protocol.py: PIL bilinear, antialiased, uint8, black padding) makes of the same uint8 frames;
    torch's antialiased bilinear gives PIL's values within one uint8 level."""
    h, w = frames.shape[-2:]
    if (h, w) == (size, size):
        return frames
    ratio = max(w / size, h / size)
    new_h, new_w = int(h / ratio), int(w / ratio)
    x = F.interpolate(frames * 255.0, size=(new_h, new_w), mode="bilinear", align_corners=False, antialias=True)
    x = x.round_().clamp_(0.0, 255.0).div_(255.0)
    top, left = (size - new_h) // 2, (size - new_w) // 2
    return F.pad(x, (left, size - new_w - left, top, size - new_h - top), value=0.0)


@dataclass
class Pi05Processor(ProcessorSteps):
    tokenizer: Tokenizer
    max_tokens: int = 200
    state_in_prompt: bool = True
    state_pad: int | None = 32  # pad the normalised state to this many values before discretising (LeRobot)
    state_norm: Normalizer = field(default_factory=Normalizer)
    action_norm: Normalizer = field(default_factory=Normalizer)
    image_size: int = 224
    action_dim: int = 32  # the model's (padded) action dimension
    # the size at which the evaluation presents camera images (training frames are resized to it first); None:
    # training frames go to the model's size directly
    presented_size: int | None = PRESENTED_SIZE

    # -- prompt
    def prompt_tokens(self, task: str, state: np.ndarray) -> list[int]:
        text = clean_prompt(task)
        if not self.state_in_prompt:  # openpi without discrete state: text, then "\n" on its own
            return self.tokenizer.encode(text, add_bos=True) + self.tokenizer.encode("\n")
        norm = self.state_norm.normalize(np.asarray(state, dtype=np.float64))
        if self.state_pad and len(norm) < self.state_pad:
            norm = np.concatenate([norm, np.zeros(self.state_pad - len(norm))])
        state_str = " ".join(str(int(v)) for v in discretize_state(norm))
        return self.tokenizer.encode(f"Task: {text}, State: {state_str};\nAction: ", add_bos=True)

    def tokenize(self, tasks: list[str], states: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids [B, max_tokens] (right-padded with 0) and their mask."""
        tokens = torch.zeros((len(tasks), self.max_tokens), dtype=torch.long)
        masks = torch.zeros((len(tasks), self.max_tokens), dtype=torch.bool)
        for i, (task, state) in enumerate(zip(tasks, states)):
            ids = self.prompt_tokens(task, state)[: self.max_tokens]
            tokens[i, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            masks[i, : len(ids)] = True
        return tokens, masks

    # -- images
    def images(self, pixels) -> torch.Tensor:
        """uint8 [B, V, H, W, 3] (numpy or torch) -> float [B, V, 3, S, S] in [-1, 1]."""
        pixels = torch.as_tensor(np.asarray(pixels) if not isinstance(pixels, torch.Tensor) else pixels)
        b, v = pixels.shape[:2]
        x = pixels.flatten(0, 1).permute(0, 3, 1, 2).float() / 127.5 - 1.0
        return resize_with_pad(x, self.image_size).unflatten(0, (b, v))

    # -- batches
    def observation_batch(self, observations: list[dict], cameras=("image", "wrist_image")) -> dict:
        """Inference inputs from LIBERO observations ({camera: uint8 HxWx3, "state", "prompt"}), on the CPU."""
        pixels = np.stack([np.stack([o[c] for c in cameras]) for o in observations])
        tokens, masks = self.tokenize([o["prompt"] for o in observations], [o["state"] for o in observations])
        return {
            "images": self.images(pixels),
            "image_masks": torch.ones((len(observations), len(cameras)), dtype=torch.bool),
            "tokens": tokens,
            "token_masks": masks,
        }

    # -- training batches, in the three places the reference training path does the work
    @staticmethod
    def raw_frames(pixels: torch.Tensor) -> torch.Tensor:
        """uint8 [B, V, H, W, 3] -> what LeRobot's dataset and default collate give the training loop: float32
        [B, V, 3, H, W] in [0, 1]."""
        return pixels.permute(0, 1, 4, 2, 3).float().div_(255.0)

    @staticmethod
    def collate_fields(samples: list[dict]) -> dict:
        """The raw state and actions, the action padding mask and the task strings of the samples."""
        return {
            "state": torch.stack([torch.as_tensor(s["observation.state"], dtype=torch.float32) for s in samples]),
            "actions": torch.stack([torch.as_tensor(s["action"], dtype=torch.float32) for s in samples]),
            "action_is_pad": torch.stack([torch.as_tensor(s["action_is_pad"]) for s in samples]),
            "task": [s["task"] for s in samples],
        }

    def row_fields(self, raw: dict) -> dict:
        """What `prepare` derives from each row alone: the prompt's tokens (task and discretised state) and their
        mask. The memory loader's prepared rows hold them for every row, and `prepare` then takes them as given."""
        tokens, masks = self.tokenize(raw["task"], list(raw["state"].numpy()))
        return {"tokens": tokens, "token_masks": masks}

    def prepare(self, raw: dict, generator: torch.Generator) -> dict:
        """On the host, in the training process (LeRobot's preprocessor): state and actions normalised, the
        prompt tokenised with the discretised state (unless `raw` holds its `row_fields` already), actions padded
        to the model's width, and the flow matching noise and time drawn from `generator` (so a batch is the same
        whichever loader made it)."""
        row = raw if "tokens" in raw else self.row_fields(raw)
        tokens, masks = row["tokens"], row["token_masks"]
        actions = self.action_norm.normalize(raw["actions"].numpy().astype(np.float64))
        b, horizon, d = actions.shape
        padded = torch.zeros((b, horizon, self.action_dim))
        padded[..., :d] = torch.from_numpy(actions).float()
        return {
            "frames": raw["frames"],
            "image_masks": torch.ones(raw["frames"].shape[:2], dtype=torch.bool),
            "tokens": tokens,
            "token_masks": masks,
            "actions": padded,
            "action_is_pad": raw["action_is_pad"],
            "noise": torch.randn((b, horizon, self.action_dim), generator=generator),
            "time": sample_flow_time(b, generator),
        }

    def finish(self, batch: dict, dtype: torch.dtype) -> dict:
        """On the device, inside the step (the model's own preprocessing in LeRobot): frames as the evaluation
        presents them (`presented`), resized with padding to the model's size and scaled to [-1, 1]; floats in
        the model dtype, the flow time in fp32."""
        out = dict(batch)
        frames = out.pop("frames")
        b, v = frames.shape[:2]
        frames = frames.flatten(0, 1)
        if self.presented_size and self.presented_size != self.image_size:
            # a model at the evaluation's size (full: 224) keeps LeRobot's training path, the ladder's baseline
            frames = presented(frames, self.presented_size)
        out["images"] = resize_with_pad(frames * 2.0 - 1.0, self.image_size).unflatten(0, (b, v))
        return {k: t.to(dtype) if t.is_floating_point() and k != "time" else t for k, t in out.items()}

    def describe(self) -> dict:
        return {
            "tokenizer": self.tokenizer.name,
            "max_tokens": self.max_tokens,
            "state_in_prompt": self.state_in_prompt,
            "state_pad": self.state_pad,
            "state_norm": self.state_norm.mode,
            "action_norm": self.action_norm.mode,
            "image_size": self.image_size,
        }
