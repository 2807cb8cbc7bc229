"""Pi0.5 as a LIBERO evaluation policy: our model's `sample_actions` on batched observations.

Pi0.5 follows its checkpoint: normalisation statistics (quantile or mean/std) and prompt format come from
the checkpoint's files, which differ between the two layouts:
- openpi (converted): `config.json` (action_horizon; discrete_state_input, which openpi's pi05_libero
  turns off) and `assets/<dataset>/norm_stats.json`; without discrete state the prompt is the cleaned
  instruction and a newline, tokenised separately, as openpi does.
- LeRobot: `config.json` (chunk_size, max_state_dim, tokenizer_max_length, normalization_mapping) and the
  normaliser statistics named by `policy_preprocessor.json`; the state, padded to max_state_dim, is
  discretised into 256 bins inside the prompt "Task: ..., State: ...;\\nAction: ".
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..normalize import Normalizer
from ..policy import (
    EvalPolicy,
    PolicyError,
    device_and_dtype,
    observation_noise,
    random_model,
    read_json,
    resolve_checkpoint,
    snap_to_values,
)
from ..tokenizers import BUILTIN, SentencePieceTokenizer, builtin_tokenizer, load_sentencepiece
from .processor import Pi05Processor

PALIGEMMA_VOCAB = 257152
PALIGEMMA_TOKENIZER_REPO = "google/paligemma-3b-pt-224"
ACTION_DIM = 7  # LIBERO's action (a 6-d end-effector delta and the gripper), unless the caller says otherwise
SEED = 7


# ----------------------------------------------------------------------------- tokenizers


def _sentencepiece(path) -> SentencePieceTokenizer:
    try:
        return SentencePieceTokenizer(path)
    except ValueError as e:
        raise PolicyError(str(e)) from None


def find_tokenizer(checkpoint_dir: Path | None, explicit: str | None):
    """--tokenizer, else a tokenizer.model in the checkpoint, else PaliGemma's from the Hub."""
    if explicit:
        if not Path(explicit).is_file():
            raise PolicyError(f"--tokenizer: expected a SentencePiece model file, got {explicit!r} (no such file)")
        return _sentencepiece(explicit)
    for name in ("tokenizer.model", "paligemma_tokenizer.model"):
        if checkpoint_dir is not None and (checkpoint_dir / name).is_file():
            return _sentencepiece(checkpoint_dir / name)
    try:
        return load_sentencepiece(PALIGEMMA_TOKENIZER_REPO)
    except ValueError as e:
        raise PolicyError(
            f"no PaliGemma tokenizer: none in the checkpoint, and {e}; pass --tokenizer PATH/tokenizer.model"
        ) from None


# ----------------------------------------------------------------------------- normalisation


def _normalizer(mode: str, stats: dict, eps: float, eps_always: bool, what: str) -> Normalizer:
    try:
        return Normalizer.from_stats(mode, stats, eps, eps_always, what)
    except ValueError as e:
        raise PolicyError(str(e)) from None


@dataclass
class CheckpointMeta:
    """What a Pi0.5 checkpoint says about inference besides its weights."""

    layout: str
    horizon: int = 50
    max_tokens: int = 200
    state_in_prompt: bool = True
    state_pad: int | None = None  # pad the state to this many values before discretising (LeRobot)
    sample_steps: int = 10
    state_norm: Normalizer = field(default_factory=Normalizer)
    action_norm: Normalizer = field(default_factory=Normalizer)
    stats_source: str | None = None
    # action dimensions the training demonstrations drove with a few discrete values (ours: config.json's
    # vlabench.action_values); the policy's outputs there are snapped to the nearest (models/policy.py)
    action_values: dict[int, list[float]] = field(default_factory=dict)
    # the file-free tokenizer a checkpoint of `vlabench train` names (config.json's vlabench.tokenizer)
    tokenizer: str | None = None


def openpi_meta(folder: Path) -> CheckpointMeta:
    config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    # openpi's pi05_libero trains without the discretised state; its converted config.json does not say so.
    meta = CheckpointMeta(
        layout="openpi",
        horizon=int(config.get("action_horizon", 10)),
        max_tokens=int(config.get("max_token_len", 200)),
        state_in_prompt=bool(config.get("discrete_state_input", False)),
    )
    found = sorted((folder / "assets").glob("**/norm_stats.json")) if (folder / "assets").is_dir() else []
    if len(found) > 1:
        raise PolicyError(
            f"{folder}: several norm_stats.json under assets/ ({', '.join(str(p) for p in found)}); "
            "keep the one of the evaluated dataset"
        )
    if found:
        stats = read_json(found[0]).get("norm_stats", {})
        # openpi normalises Pi0.5 inputs with quantiles (its use_quantile_norm), epsilon 1e-6 always added.
        meta.state_norm = _normalizer("quantile", stats.get("state", {}), 1e-6, True, f"{found[0]}: state")
        meta.action_norm = _normalizer("quantile", stats.get("actions", {}), 1e-6, True, f"{found[0]}: actions")
        meta.stats_source = str(found[0])
    return meta


def lerobot_meta(folder: Path) -> CheckpointMeta:
    config = read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    ours = config.get("vlabench") or {}  # what a checkpoint of `vlabench train` adds
    meta = CheckpointMeta(
        layout="lerobot",
        horizon=int(config.get("chunk_size", 50)),
        max_tokens=int(config.get("tokenizer_max_length", 200)),
        # ours (models/pi05/export.py) says when the state stayed out of the prompt; LeRobot's always has it
        state_in_prompt=bool(ours.get("state_in_prompt", True)),
        action_values={int(dim): [float(v) for v in values] for dim, values in ours.get("action_values", {}).items()},
        tokenizer=ours.get("tokenizer") if ours.get("tokenizer") in BUILTIN else None,
        state_pad=int(config.get("max_state_dim", 32)),
        sample_steps=int(config.get("num_inference_steps", 10)),
    )
    pre = folder / "policy_preprocessor.json"
    if not pre.is_file():
        return meta
    steps = read_json(pre).get("steps", [])
    step = next((s for s in steps if s.get("registry_name") == "normalizer_processor"), None)
    if step is None or not step.get("state_file"):
        return meta
    from safetensors.torch import load_file

    flat = load_file(str(folder / step["state_file"]))
    stats: dict[str, dict] = {}
    for key, tensor in flat.items():
        feature, stat = key.rsplit(".", 1)
        stats.setdefault(feature, {})[stat] = tensor.float().numpy()
    cfg = step.get("config", {})
    norm_map = {**config.get("normalization_mapping", {}), **cfg.get("norm_map", {})}
    eps = float(cfg.get("eps", 1e-8))
    modes = {"QUANTILES": "quantile", "MEAN_STD": "mean_std", "IDENTITY": "identity"}
    for kind, feature, attr in (("STATE", "observation.state", "state_norm"), ("ACTION", "action", "action_norm")):
        mode = norm_map.get(kind, "IDENTITY")
        if mode not in modes:
            raise PolicyError(f"{pre}: {kind} normalisation {mode!r} is not supported ({', '.join(modes)})")
        setattr(meta, attr, _normalizer(modes[mode], stats.get(feature, {}), eps, False, f"{pre}: {feature}"))
    meta.stats_source = str(folder / step["state_file"])
    return meta


class Pi05Policy(EvalPolicy):
    """Our Pi0.5 model's `sample_actions` on batched LIBERO observations."""

    name = "pi05"

    def __init__(
        self,
        checkpoint: str,
        device: str | None = None,
        dtype: str | None = None,
        model_size: str = "full",
        tokenizer: str | None = None,
        seed: int = SEED,
        action_dim: int = ACTION_DIM,
        options: dict | None = None,
        cuda_graphs: bool | None = None,
    ):
        from models.pi05 import SIZES, Pi05Model, apply_options, init_weights, parse_options
        from models.pi05.checkpoint import CheckpointError, load_pi05
        from models.pi05.inference import GraphedSampler

        self.device, self.dtype = device_and_dtype(device, dtype)
        self.action_dim = action_dim  # the robot's action dimensions each chunk is cut to
        self.seed = seed
        self.checkpoint = checkpoint
        if checkpoint == "random":  # random weights: for throughput runs and tests, no files needed
            model = random_model(Pi05Model, SIZES, model_size, self.device, init_weights, seed)
            self.model_size, folder = model_size, None
            self.meta = CheckpointMeta(layout="random", state_pad=32)
        else:
            path = resolve_checkpoint(checkpoint)
            folder = path if path.is_dir() else path.parent
            try:
                model, self.model_size, layout = load_pi05(path, self.device)
            except CheckpointError as e:
                raise PolicyError(str(e)) from None
            self.meta = lerobot_meta(folder) if layout == "lerobot" else openpi_meta(folder)
        model = model.to(self.dtype)
        # Absent cameras cost nothing with camera_slots auto (identical outputs: their tokens are masked);
        # SDPA is the inference kernel on GPUs, eager keeps CPU runs simple. A scenario's rung options (its
        # eval block) replace these; recompute only matters for training.
        defaults = {
            "camera_slots": "auto",
            "attention": "sdpa" if self.device.type == "cuda" else "eager",
            "compile": "none",
        }
        self.options = {**defaults, **(options or {}), "recompute": "none"}
        apply_options(model, parse_options(self.options))
        self.model = model.eval()
        self.cfg = model.cfg
        m = self.meta
        tokenizer_ = (
            builtin_tokenizer(tokenizer or m.tokenizer or "bytes", self.cfg.vocab)
            if self.cfg.vocab != PALIGEMMA_VOCAB or checkpoint == "random" or tokenizer in BUILTIN
            else find_tokenizer(folder, tokenizer)
        )
        self.processor = Pi05Processor(
            tokenizer_,
            max_tokens=m.max_tokens,
            state_in_prompt=m.state_in_prompt,
            state_pad=m.state_pad,
            state_norm=m.state_norm,
            action_norm=m.action_norm,
            image_size=self.cfg.vision.image_size,
            action_dim=self.cfg.action_dim,
        )
        self.latencies: list[tuple[int, float]] = []  # (batch size, seconds) per infer call
        # Inference replays one CUDA graph per batch size on a GPU (models/pi05/inference.py): eager calls are
        # launch-bound at evaluation batch sizes.
        use_graphs = self.device.type == "cuda" if cuda_graphs is None else cuda_graphs
        if use_graphs and self.device.type != "cuda":
            raise PolicyError("--cuda-graphs needs a CUDA device")
        self.sampler = GraphedSampler(self.model, self.meta.sample_steps) if use_graphs else None

    def describe(self) -> dict:
        m = self.meta
        return {
            "name": self.name,
            "checkpoint": self.checkpoint,
            "layout": m.layout,
            "model_size": self.model_size,
            "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""),
            "horizon": m.horizon,
            "sample_steps": m.sample_steps,
            "max_tokens": m.max_tokens,
            "state_in_prompt": m.state_in_prompt,
            "state_pad": m.state_pad,
            **({"action_values": {str(k): v for k, v in m.action_values.items()}} if m.action_values else {}),
            "tokenizer": self.processor.tokenizer.name,
            "state_norm": m.state_norm.mode,
            "action_norm": m.action_norm.mode,
            "stats": m.stats_source,
            "options": self.options,
            "inference": "cuda-graphs" if self.sampler is not None else "eager",
        }

    def make_batch(self, observations: list[dict]) -> tuple[dict, torch.Tensor]:
        batch = self.processor.observation_batch(observations)
        batch = {k: v.to(self.device, self.dtype if v.is_floating_point() else None) for k, v in batch.items()}
        noise = observation_noise(observations, (self.meta.horizon, self.cfg.action_dim))
        return batch, noise.to(self.device, self.dtype)

    @torch.no_grad()
    def warm_up(self, max_batch: int) -> float:
        """Capture the CUDA graph of every batch size up to `max_batch` (env workers) before the episodes start,
        so that no capture lands in the latency figures; returns the seconds it took."""
        if self.sampler is None:
            return 0.0
        start = time.perf_counter()
        blank = {
            "image": np.zeros((224, 224, 3), np.uint8),
            "wrist_image": np.zeros((224, 224, 3), np.uint8),
            "state": np.zeros(8, np.float32),
            "prompt": "warm up",
        }
        for n in range(1, max_batch + 1):
            self.sampler.capture(*self.make_batch([blank] * n))
        torch.cuda.synchronize(self.device)
        return time.perf_counter() - start

    def infer(self, observations: list[dict]) -> list[np.ndarray]:
        batch, noise = self.make_batch(observations)
        start = time.perf_counter()
        if self.sampler is not None:
            actions = self.sampler(batch, noise)
        else:
            actions = self.model.sample_actions(batch, noise=noise, steps=self.meta.sample_steps)
        actions = actions.float().cpu().numpy()  # waits for the device: the latency below is complete
        self.latencies.append((len(observations), time.perf_counter() - start))
        out = [self.processor.actions_out(a, self.action_dim) for a in actions]
        return [snap_to_values(a, self.meta.action_values).astype(np.float32) for a in out]
