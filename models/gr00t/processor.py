"""GR00T N1.6's input processing for LIBERO, shared by the training data path and LIBERO evaluation: what
Isaac-GR00T's processor (`gr00t/model/gr00t_n1d6/processing_gr00t_n1d6.py`) and its Eagle processor do between
a LeRobot sample (two camera frames, an 8-d state, a 7-d action chunk, an instruction) and the model's batch,
in LoongForge's workload (two 224x224 views, 64 image tokens each, 50-step chunks padded to 128 dimensions).

- Instruction: lower-cased, punctuation removed (`formalize_language`, on by default), then Eagle's chat
  template with the text before the images (`_apply_vlm_processing`; the template renders `<image-k>` for each
  image, Eagle's processor expands it to `<image k><img>` + `<IMG_CONTEXT>` x tokens + `</img>`):
  `<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n<|im_start|>user\\n{text}<image 1><img>...
  </img><image 2><img>...</img><|im_end|>\\n`. Special tokens get their ids from the Eagle tokenizer's
  `added_tokens.json`; the text between them goes through the tokenizer (Qwen3's BPE `tokenizer.json`, or a
  stand-in of its 151,643-token vocabulary). Batches are left-padded to the longest prompt with
  `<|endoftext|>` (the collator's `padding_side = "left"`).
- State and actions: min/max normalisation to [-1, 1] from the dataset statistics' `min` and `max` (N1.6's
  StateActionProcessor with its defaults `use_percentiles=False`, `clip_outliers=True`; LIBERO's modality
  config sets no mean/std keys and no relative actions): a dimension whose min and max are equal becomes 0,
  the rest is clipped to [-1, 1]. The state is one step padded with zeros to 128 values, the actions padded to
  128 dimensions with an `action_mask` of ones over the real dimensions (Isaac-GR00T pads to
  `max_action_dim`, LoongForge to 29 and then in the model to the checkpoint's 128: the same zeros).
- Images: Eagle's image processor does not resize (`do_resize: false`); it rescales by 1/255 and normalises
  with mean 0.5 and std 0.5, so [-1, 1]. The size comes from the transforms before it: a letterbox to a
  square, then a resize to the target size (torchvision's bilinear, antialiased).
- Embodiment `libero_panda`: projector index 2 (`EMBODIMENT_TAG_TO_PROJECTOR_INDEX`).
- Flow matching: the noise and the Beta(1.5, 1) draw, which the reference makes inside the step, come with the
  batch, drawn from the caller's generator in the order models/gr00t/batch.py draws them.

Split where the training path does the work: `collate` in the loader's workers (uint8 frames, raw state and
actions; with the loader option `augment: isaac-gr00t` each sample's views first go through Isaac-GR00T's
training crop, resize and colour jitter there: augment.py, `sample_transform`), `prepare` on the host
(tokenisation, normalisation, the random draws), `finish` on the device
(images resized and normalised, dtypes). With the loader option `preprocess: workers` the workers run `prepare`
and `host_finish` (the images resized and normalised to float32) too, where Isaac-GR00T's workers do them.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..normalize import Normalizer
from ..processing import ProcessorSteps
from ..tokenizers import StandInTokenizer, Tokenizer
from .batch import LIBERO_PANDA, sample_beta
from .config import Gr00tConfig

# The Eagle-Block2A-2B-v2 tokenizer's added tokens the prompt uses (added_tokens.json); <IMG_CONTEXT> and the
# pad token <|endoftext|> come from the model config.
QWEN_SPECIAL = {"<|im_start|>": 151644, "<|im_end|>": 151645, "<img>": 151670, "</img>": 151671}
IMAGE_TOKEN, PAD_TOKEN = "<IMG_CONTEXT>", "<|endoftext|>"
SYSTEM = "You are a helpful assistant."
PIXELS_PER_TOKEN = 28 * 28  # Eagle's processor: one LLM token per 28x28 pixels (14x14 patches, 2x2 unshuffled)


def special_ids(cfg: Gr00tConfig) -> dict[str, int]:
    """Token ids of the chat template's special tokens: Qwen's for the released vocabulary; for a small test
    vocabulary, the ids just below its image and pad tokens."""
    ids = {IMAGE_TOKEN: cfg.image_token_id, PAD_TOKEN: cfg.pad_token_id}
    if max(QWEN_SPECIAL.values()) < cfg.llm.vocab and cfg.image_token_id == 151669:
        return {**ids, **QWEN_SPECIAL}
    low = min(ids.values())
    return {**ids, **{tok: low - len(QWEN_SPECIAL) + i for i, tok in enumerate(QWEN_SPECIAL)}}


def formalize_language(text: str) -> str:
    """Isaac-GR00T's `formalize_language`: lower case, every character that is not a word character or
    whitespace removed."""
    return re.sub(r"[^\w\s]", "", text.lower())


class JsonTokenizer:
    """A Hugging Face `tokenizer.json` (Qwen3's byte-level BPE) through the `tokenizers` package."""

    def __init__(self, path):
        from tokenizers import Tokenizer as HFTokenizer

        self.name = str(path)
        self._tok = HFTokenizer.from_file(str(path))

    def encode(self, text: str, add_bos: bool = False) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids


def load_tokenizer(spec: str | None, cfg: Gr00tConfig) -> Tokenizer:
    """A tokenizer.json file (or a folder holding one), or None for a stand-in of the text vocabulary (the ids
    below the first special token: Qwen3's 151,643); ValueError in one line otherwise."""
    if spec is None:
        return StandInTokenizer(min(special_ids(cfg).values()))
    path = Path(spec).expanduser()
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file() or path.suffix != ".json":
        raise ValueError(f"tokenizer {spec!r}: expected a Qwen tokenizer.json file or a folder holding one")
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        raise ValueError(
            f"tokenizer {spec!r}: a tokenizer.json needs the tokenizers package (pip install "
            "tokenizers); leave the tokenizer unset for a stand-in"
        ) from None
    return JsonTokenizer(path)


def min_max(stats: dict, what: str, percentiles: bool = False, clip: bool = True) -> Normalizer:
    """N1.6's min/max normalisation of one feature to [-1, 1] (`normalize_values_minmax` and its inverse), from
    {min, max}, or {q01, q99} with `percentiles`; ValueError naming what is missing."""
    return Normalizer.from_stats("min_max", stats, what=what, keys=("q01", "q99") if percentiles else None, clip=clip)


@dataclass
class Gr00tProcessor(ProcessorSteps):
    tokenizer: Tokenizer
    special: dict[str, int]  # ids of the template's special tokens (special_ids)
    image_size: int = 224
    state_dim: int = 128  # the model's padded state and action widths
    action_dim: int = 128
    state_norm: Normalizer = field(default_factory=Normalizer)
    action_norm: Normalizer = field(default_factory=Normalizer)
    embodiment_id: int = LIBERO_PANDA
    formalize: bool = True
    beta: tuple[float, float] = (1.5, 1.0)  # the flow-time draw u ~ Beta(alpha, beta)

    @property
    def image_tokens(self) -> int:
        return self.image_size * self.image_size // PIXELS_PER_TOKEN

    # -- prompt
    def prompt_text(self, task: str, views: int) -> str:
        """The chat-template text with the image placeholders expanded, as Eagle's processor tokenises it."""
        text = formalize_language(task) if self.formalize else task
        images = "".join(f"<image {k + 1}><img>{IMAGE_TOKEN * self.image_tokens}</img>" for k in range(views))
        return f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{text}{images}<|im_end|>\n"

    def prompt_ids(self, task: str, views: int) -> list[int]:
        """Special tokens by id, the text between them through the tokenizer (a tokenizer splits at its added
        tokens the same way)."""
        pattern = "(" + "|".join(re.escape(t) for t in self.special) + ")"
        ids = []
        for part in re.split(pattern, self.prompt_text(task, views)):
            if part in self.special:
                ids.append(self.special[part])
            elif part:
                ids.extend(self.tokenizer.encode(part))
        return ids

    def tokenize(self, tasks: list[str], views: int) -> tuple[torch.Tensor, torch.Tensor]:
        """input_ids [B, L] left-padded to the longest prompt, and the attention mask (bool)."""
        prompts = [self.prompt_ids(t, views) for t in tasks]
        longest = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), longest), self.special[PAD_TOKEN], dtype=torch.long)
        mask = torch.zeros((len(prompts), longest), dtype=torch.bool)
        for i, p in enumerate(prompts):
            input_ids[i, longest - len(p) :] = torch.tensor(p, dtype=torch.long)
            mask[i, longest - len(p) :] = True
        return input_ids, mask

    # -- images
    def images(self, frames: torch.Tensor) -> torch.Tensor:
        """uint8 [B, V, H, W, 3] -> float [B, V, 3, S, S] in [-1, 1]: letterboxed to a square (black, centred),
        resized to S (bilinear, antialiased, rounded to uint8 values as the reference's uint8 transforms do),
        then Eagle's rescale and normalise (x / 255 - 0.5) / 0.5."""
        b, v, h, w, _ = frames.shape
        x = frames.flatten(0, 1).permute(0, 3, 1, 2).float()
        if h != w:
            side = max(h, w)
            top, left = (side - h) // 2, (side - w) // 2
            x = F.pad(x, (left, side - w - left, top, side - h - top))
        if x.shape[-1] != self.image_size:
            x = (
                F.interpolate(
                    x, size=(self.image_size, self.image_size), mode="bilinear", align_corners=False, antialias=True
                )
                .round_()
                .clamp_(0, 255)
            )
        return (x / 127.5 - 1.0).unflatten(0, (b, v))

    # -- the three places the training path does the work
    @staticmethod
    def raw_frames(pixels: torch.Tensor) -> torch.Tensor:
        """Frames stay uint8 [B, V, H, W, 3] (a quarter of float32's bytes)."""
        return pixels

    @staticmethod
    def collate_fields(samples: list[dict]) -> dict:
        """The raw state and actions and the task strings of the samples."""
        return {
            "state": torch.stack([torch.as_tensor(s["observation.state"], dtype=torch.float32) for s in samples]),
            "actions": torch.stack([torch.as_tensor(s["action"], dtype=torch.float32) for s in samples]),
            "task": [s["task"] for s in samples],
        }

    def prepare(self, raw: dict, generator: torch.Generator | None = None) -> dict:
        """On the host, in the training process: the prompt tokenised, state and actions normalised and padded,
        the action mask, the embodiment, and (with actions) the noise and Beta draw from `generator`."""
        frames = raw["frames"]
        b = frames.shape[0]
        input_ids, attention_mask = self.tokenize(list(raw["task"]), frames.shape[1])
        state = torch.as_tensor(raw["state"]).numpy().astype(np.float64)
        if state.shape[-1] > self.state_dim:
            raise ValueError(f"the state has {state.shape[-1]} values, the model takes {self.state_dim}")
        padded_state = torch.zeros((b, 1, self.state_dim))
        padded_state[:, 0, : state.shape[-1]] = torch.from_numpy(self.state_norm.normalize(state)).float()
        out = {
            "frames": frames,
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "state": padded_state,
            "embodiment_id": torch.full((b,), self.embodiment_id, dtype=torch.long),
        }
        if "actions" not in raw:  # inference: no targets, no draws
            return out
        actions = torch.as_tensor(raw["actions"]).numpy().astype(np.float64)
        _, horizon, dims = actions.shape
        if dims > self.action_dim:
            raise ValueError(f"the actions have {dims} dimensions, the model takes {self.action_dim}")
        padded = torch.zeros((b, horizon, self.action_dim))
        padded[..., :dims] = torch.from_numpy(self.action_norm.normalize(actions)).float()
        mask = torch.zeros_like(padded)
        mask[..., :dims] = 1.0
        out.update(
            actions=padded,
            action_mask=mask,
            noise=torch.randn((b, horizon, self.action_dim), generator=generator),
            beta_sample=sample_beta(b, generator, *self.beta),
        )
        return out

    def host_finish(self, batch: dict) -> dict:
        """In the loader's workers (`preprocess: workers`): the frames become the model's float32 images on the
        CPU, as Isaac-GR00T's collator ships its normalised pixel values (four times uint8's bytes to pin and
        copy)."""
        out = dict(batch)
        out["images"] = self.images(out.pop("frames"))
        return out

    def finish(self, batch: dict, dtype: torch.dtype) -> dict:
        """On the device, inside the step: the frames become the model's images (unless the workers made them:
        host_finish); floating inputs in the model's input dtype except the Beta draw (the model casts it
        itself), as batch.to_device does."""
        out = self.host_finish(batch) if "frames" in batch else batch
        return {k: v.to(dtype) if v.is_floating_point() and k != "beta_sample" else v for k, v in out.items()}

    @staticmethod
    def sample_transform(name: str, cameras: tuple[str, ...]):
        """The training augmentation `name` (loader option `augment`) as the per-sample step the DataLoader
        workers run before `collate` (augment.py: Isaac-GR00T's crop, resize and colour jitter); None for a name
        this family does not have. Training only: evaluation (`observation_batch`) never runs it."""
        from .augment import AUGMENTATIONS, SampleAugment, opencv

        augment = AUGMENTATIONS.get(name)
        if augment is None:
            return None
        opencv()  # ImportError with the install line here, not in a DataLoader worker
        return SampleAugment(tuple(cameras), augment)

    # -- evaluation
    def observation_batch(self, observations: list[dict], cameras=("image", "wrist_image")) -> dict:
        """Inference inputs from LIBERO observations ({camera: uint8 HxWx3, "state", "prompt"}), on the CPU;
        `finish` completes them on the device."""
        frames = torch.stack([torch.stack([torch.as_tensor(np.asarray(o[c])) for c in cameras]) for o in observations])
        raw = {
            "frames": frames,
            "state": torch.as_tensor(np.stack([o["state"] for o in observations])),
            "task": [o["prompt"] for o in observations],
        }
        return self.prepare(raw)

    def describe(self) -> dict:
        return {
            "tokenizer": self.tokenizer.name,
            "image_size": self.image_size,
            "image_tokens": self.image_tokens,
            "state_norm": self.state_norm.mode,
            "action_norm": self.action_norm.mode,
            "state_dim": self.state_dim,
            "action_dim": self.action_dim,
            "embodiment_id": self.embodiment_id,
            "formalize_language": self.formalize,
        }


def make_processor(
    cfg: Gr00tConfig, stats: dict | None, tokenizer: str | None, percentiles: bool = False, clip: bool = True
) -> Gr00tProcessor:
    """The training preprocessing for a model of `cfg` on a LeRobot dataset with these per-feature statistics
    (`observation.state` and `action` need min and max); stats None means no normalisation (identity)."""
    norms = {}
    for key in ("observation.state", "action"):
        norms[key] = Normalizer() if stats is None else min_max(stats.get(key, {}), key, percentiles, clip)
    h = cfg.head
    return Gr00tProcessor(
        load_tokenizer(tokenizer, cfg),
        special_ids(cfg),
        image_size=cfg.vision.image_size,
        state_dim=h.state_dim,
        action_dim=h.action_dim,
        state_norm=norms["observation.state"],
        action_norm=norms["action"],
        embodiment_id=min(LIBERO_PANDA, h.embodiments - 1),
        beta=(h.beta_alpha, h.beta_beta),
    )


# ----------------------------------------------------------------------------- a checkpoint's processor files

LIBERO_GROUPS = ("x", "y", "z", "roll", "pitch", "yaw", "gripper")  # examples/LIBERO/modality.json, in order


@dataclass
class CheckpointProcessing:
    """What an Isaac-GR00T checkpoint folder says about inference besides its weights (the processor's
    `save_pretrained` files): statistics.json, processor_config.json, embodiment_id.json, config.json."""

    state_norm: Normalizer = field(default_factory=Normalizer)
    action_norm: Normalizer = field(default_factory=Normalizer)
    horizon: int | None = None  # the model's chunk (config.json action_horizon)
    steps: int | None = None  # the action steps the processor decodes (the modality's delta_indices)
    embodiment_id: int = LIBERO_PANDA
    stats_source: str | None = None


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: unreadable JSON ({e})") from None


def _groups(stats: dict, what: str, percentiles: bool, clip: bool) -> Normalizer:
    """A modality's per-group statistics ({x: {min: [..]}, ...}) concatenated in LIBERO's group order."""
    missing = [g for g in LIBERO_GROUPS if g not in stats]
    if missing:
        raise ValueError(f"{what}: no statistics for the LIBERO group(s) {', '.join(missing)}")
    keys = ("q01", "q99") if percentiles else ("min", "max")
    merged = {
        k: np.concatenate([np.asarray(stats[g][k], dtype=np.float64).reshape(-1) for g in LIBERO_GROUPS])
        for k in keys
        if all(k in stats[g] for g in LIBERO_GROUPS)
    }
    return min_max(merged, what, percentiles, clip)


def checkpoint_processing(folder: Path, tag: str = "libero_panda") -> CheckpointProcessing:
    """Read a checkpoint folder's processor files; absent files leave the defaults (identity normalisation)."""
    out = CheckpointProcessing()
    config = folder / "config.json"
    if config.is_file():
        horizon = _json(config).get("action_horizon")
        out.horizon = int(horizon) if horizon else None
    kwargs = {}
    if (folder / "processor_config.json").is_file():
        kwargs = _json(folder / "processor_config.json").get("processor_kwargs", {})
        delta = kwargs.get("modality_configs", {}).get(tag, {}).get("action", {}).get("delta_indices")
        out.steps = len(delta) if delta else None
    if (folder / "embodiment_id.json").is_file():
        out.embodiment_id = int(_json(folder / "embodiment_id.json").get(tag, out.embodiment_id))
    stats_file = folder / "statistics.json"
    if stats_file.is_file():
        stats = _json(stats_file)
        if tag not in stats:
            raise ValueError(f"{stats_file}: no statistics for {tag} (found {', '.join(sorted(stats)) or 'none'})")
        percentiles, clip = bool(kwargs.get("use_percentiles", False)), bool(kwargs.get("clip_outliers", True))
        out.state_norm = _groups(stats[tag].get("state", {}), f"{stats_file}: state", percentiles, clip)
        out.action_norm = _groups(stats[tag].get("action", {}), f"{stats_file}: action", percentiles, clip)
        out.stats_source = str(stats_file)
    return out
