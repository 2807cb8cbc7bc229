"""Policies for LIBERO evaluation: a small interface, a no-op policy and Pi0.5.

A policy takes a batch of observations (each: `image` and `wrist_image` uint8 224x224x3, `state` float32 [8],
`prompt` str, `noise_seed` int) and returns one action chunk [H, 7] per observation. The runner batches the
observations of every environment waiting for a chunk into one `infer` call.

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

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

import numpy as np
import torch

from models.normalize import Normalizer
from models.pi05.processor import Pi05Processor
from models.tokenizers import ByteTokenizer, SentencePieceTokenizer, load_sentencepiece

from .protocol import ACTION_DIM, DUMMY_ACTION, REPLAN_STEPS, SEED

PALIGEMMA_VOCAB = 257152
PALIGEMMA_TOKENIZER_REPO = "google/paligemma-3b-pt-224"
HUB_PATTERNS = ["*.safetensors", "*.json", "assets/**", "*.model"]


class PolicyError(RuntimeError):
    """A policy that cannot be built (bad checkpoint, missing tokenizer, ...), in one line."""


class Policy:
    name = "policy"
    # What the policy needs from the environment workers (protocol.PolicyNeeds, sent with each episode): the
    # defaults are the openpi protocol; a scripted policy reading simulator state (expert.py) differs.
    needs_images = True  # False: the workers never render
    privileged = False  # True: each observation carries `sim_state` (simulator poses and the task's goal)
    replan_steps = REPLAN_STEPS  # actions executed from each chunk before the next observation
    batches = True  # False: a call costs next to nothing, the runner sends each observation without waiting

    def infer(self, observations: list[dict]) -> list[np.ndarray]:
        raise NotImplementedError

    def warm_up(self, max_batch: int) -> float:
        """One-off set-up before the episodes (e.g. capturing graphs for every batch size); returns seconds."""
        return 0.0

    def check_tasks(self, tasks: list[dict]) -> None:
        """Refuse, in one line and before anything runs, tasks the policy cannot do (a scripted policy)."""

    def describe(self) -> dict:
        return {"name": self.name}


class NoopPolicy(Policy):
    """Holds still with the gripper open: a floor for success rates and a way to test the machinery."""

    name = "noop"

    def __init__(self, horizon: int = 10):
        self.horizon = horizon

    def infer(self, observations):
        return [np.tile(np.asarray(DUMMY_ACTION, dtype=np.float32), (self.horizon, 1)) for _ in observations]

    def describe(self):
        return {"name": self.name, "horizon": self.horizon}


# ----------------------------------------------------------------------------- tokenizers


def _sentencepiece(path) -> SentencePieceTokenizer:
    try:
        return SentencePieceTokenizer(path)
    except ValueError as e:
        raise PolicyError(str(e)) from None


def find_tokenizer(checkpoint_dir: Path | None, explicit: str | None):
    """--tokenizer, else a tokenizer.model in the checkpoint, else PaliGemma's from the Hub."""
    if explicit:
        if explicit == "bytes":
            return None
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


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise PolicyError(f"{path}: unreadable JSON ({e})") from None


def openpi_meta(folder: Path) -> CheckpointMeta:
    config = _read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
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
        stats = _read_json(found[0]).get("norm_stats", {})
        # openpi normalises Pi0.5 inputs with quantiles (its use_quantile_norm), epsilon 1e-6 always added.
        meta.state_norm = _normalizer("quantile", stats.get("state", {}), 1e-6, True, f"{found[0]}: state")
        meta.action_norm = _normalizer("quantile", stats.get("actions", {}), 1e-6, True, f"{found[0]}: actions")
        meta.stats_source = str(found[0])
    return meta


def lerobot_meta(folder: Path) -> CheckpointMeta:
    config = _read_json(folder / "config.json") if (folder / "config.json").is_file() else {}
    meta = CheckpointMeta(
        layout="lerobot",
        horizon=int(config.get("chunk_size", 50)),
        max_tokens=int(config.get("tokenizer_max_length", 200)),
        state_in_prompt=True,
        state_pad=int(config.get("max_state_dim", 32)),
        sample_steps=int(config.get("num_inference_steps", 10)),
    )
    pre = folder / "policy_preprocessor.json"
    if not pre.is_file():
        return meta
    steps = _read_json(pre).get("steps", [])
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


class Pi05Policy(Policy):
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
        options: dict | None = None,
        cuda_graphs: bool | None = None,
    ):
        from models.pi05 import SIZES, Pi05Model, apply_options, init_weights, parse_options
        from models.pi05.checkpoint import CheckpointError, load_pi05
        from models.pi05.inference import GraphedSampler

        self.device, self.dtype = device_and_dtype(device, dtype)
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
            ByteTokenizer(self.cfg.vocab)
            if self.cfg.vocab != PALIGEMMA_VOCAB or checkpoint == "random" or tokenizer == "bytes"
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
        # One generator per observation: an episode's noise does not depend on which others share its batch.
        noise = torch.stack(
            [
                torch.randn(
                    (self.meta.horizon, self.cfg.action_dim),
                    generator=torch.Generator().manual_seed(int(o.get("noise_seed", 0))),
                )
                for o in observations
            ]
        )
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

    def infer(self, observations):
        batch, noise = self.make_batch(observations)
        start = time.perf_counter()
        if self.sampler is not None:
            actions = self.sampler(batch, noise)
        else:
            actions = self.model.sample_actions(batch, noise=noise, steps=self.meta.sample_steps)
        actions = actions.float().cpu().numpy()  # waits for the device: the latency below is complete
        self.latencies.append((len(observations), time.perf_counter() - start))
        return [self.processor.actions_out(a, ACTION_DIM).astype(np.float32) for a in actions]


class Gr00tPolicy(Policy):
    """Our GR00T N1.6 model's `sample_actions` (4 Euler steps) on batched LIBERO observations, with the training
    processor (models/gr00t/processor.py) on the observation side. A checkpoint folder's processor files
    (statistics.json, processor_config.json, embodiment_id.json, config.json) give the min/max normalisation, the
    chunk and the embodiment; without statistics the normalisation is the identity (describe() says so)."""

    name = "gr00t"

    def __init__(
        self,
        checkpoint: str,
        device: str | None = None,
        dtype: str | None = None,
        model_size: str = "full",
        tokenizer: str | None = None,
        seed: int = SEED,
    ):
        from dataclasses import replace

        from models.gr00t import SIZES, Gr00tModel, init_weights
        from models.gr00t.checkpoint import CheckpointError, load_gr00t
        from models.gr00t.processor import CheckpointProcessing, checkpoint_processing, make_processor

        self.device, self.dtype = device_and_dtype(device, dtype)
        self.checkpoint = checkpoint
        if checkpoint == "random":  # random weights: for throughput runs and tests, no files needed
            model = random_model(Gr00tModel, SIZES, model_size, self.device, init_weights, seed)
            self.model_size, folder, self.meta = model_size, None, CheckpointProcessing()
        else:
            path = resolve_checkpoint(checkpoint)
            folder = path if path.is_dir() else path.parent
            try:
                model, self.model_size = load_gr00t(path, self.device)
                self.meta = checkpoint_processing(folder)
            except (CheckpointError, ValueError) as e:
                raise PolicyError(str(e)) from None
        self.model = model.to(self.dtype).eval()
        self.cfg = model.cfg
        self.horizon = self.meta.horizon or model.default_horizon  # 50 without a config: LoongForge's chunk
        self.steps_out = min(self.meta.steps or self.horizon, self.horizon)
        if tokenizer is None and folder is not None and (folder / "tokenizer.json").is_file():
            tokenizer = str(folder / "tokenizer.json")
        if tokenizer is None and checkpoint != "random" and self.model_size == "full":
            raise PolicyError(
                "a GR00T checkpoint needs Qwen3's tokenizer: pass --tokenizer PATH/tokenizer.json "
                "(a stand-in tokenizer would make the instructions meaningless)"
            )
        try:
            processor = make_processor(self.cfg, None, tokenizer)
        except ValueError as e:
            raise PolicyError(str(e)) from None
        m = self.meta
        self.processor = replace(
            processor,
            state_norm=m.state_norm,
            action_norm=m.action_norm,
            embodiment_id=min(m.embodiment_id, self.cfg.head.embodiments - 1),
        )
        self.latencies: list[tuple[int, float]] = []  # (batch size, seconds) per infer call

    def describe(self) -> dict:
        m = self.meta
        return {
            "name": self.name,
            "checkpoint": self.checkpoint,
            "model_size": self.model_size,
            "device": str(self.device),
            "dtype": str(self.dtype).replace("torch.", ""),
            "horizon": self.horizon,
            "steps_out": self.steps_out,
            "sample_steps": self.cfg.head.inference_steps,
            "tokenizer": self.processor.tokenizer.name,
            "state_norm": m.state_norm.mode,
            "action_norm": m.action_norm.mode,
            "embodiment_id": self.processor.embodiment_id,
            "stats": m.stats_source or "none: identity normalisation",
        }

    @torch.no_grad()
    def infer(self, observations):
        batch = self.processor.observation_batch(observations)
        # One generator per observation: an episode's noise does not depend on which others share its batch.
        noise = torch.stack(
            [
                torch.randn(
                    (self.horizon, self.cfg.head.action_dim),
                    generator=torch.Generator().manual_seed(int(o.get("noise_seed", 0))),
                )
                for o in observations
            ]
        )
        start = time.perf_counter()
        batch = self.processor.finish({k: v.to(self.device) for k, v in batch.items()}, self.dtype)
        actions = self.model.sample_actions(batch, noise=noise.to(self.device, self.dtype))
        actions = actions.float().cpu().numpy()  # waits for the device: the latency below is complete
        self.latencies.append((len(observations), time.perf_counter() - start))
        return [self.processor.actions_out(a[: self.steps_out], ACTION_DIM).astype(np.float32) for a in actions]


PolicyName = Literal["pi05", "gr00t", "noop", "expert"]
POLICIES = get_args(PolicyName)


def make_policy(name: str, checkpoint: str | None = None, **kwargs) -> Policy:
    if name == "noop":
        return NoopPolicy()
    if name == "expert":
        from .expert import make_expert  # the expert imports this module

        return make_expert()
    if name == "pi05":
        if not checkpoint:
            raise PolicyError("--policy pi05 needs --checkpoint PATH_OR_HUB_ID (or 'random' for random weights)")
        return Pi05Policy(checkpoint, **kwargs)
    if name == "gr00t":
        if not checkpoint:
            raise PolicyError("--policy gr00t needs --checkpoint PATH_OR_HUB_ID (or 'random' for random weights)")
        return Gr00tPolicy(checkpoint, **kwargs)
    raise PolicyError(f"--policy: expected one of {', '.join(POLICIES)}, got {name!r}")
