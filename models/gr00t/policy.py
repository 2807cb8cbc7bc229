"""GR00T N1.6 as a LIBERO evaluation policy."""

from __future__ import annotations

import time

import numpy as np
import torch

from ..policy import (
    EvalPolicy,
    PolicyError,
    device_and_dtype,
    observation_noise,
    random_model,
    resolve_checkpoint,
)

ACTION_DIM = 7  # LIBERO's action (a 6-d end-effector delta and the gripper), unless the caller says otherwise
SEED = 7


class Gr00tPolicy(EvalPolicy):
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
        action_dim: int = ACTION_DIM,
        options: dict | None = None,
    ):
        from dataclasses import replace

        from models.gr00t import SIZES, Gr00tModel, apply_options, init_weights, parse_options
        from models.gr00t.checkpoint import CheckpointError, load_gr00t
        from models.gr00t.processor import CheckpointProcessing, checkpoint_processing, make_processor

        self.device, self.dtype = device_and_dtype(device, dtype)
        self.action_dim = action_dim  # the robot's action dimensions each chunk is cut to
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
        model = model.to(self.dtype)
        # A scenario's rung options (its eval block) apply as in training (attention kernel, lm_head); CUDA
        # graphs and compile are training-step switches, left out here.
        self.options = {**(options or {}), "cuda_graphs": False, "compile": "none"}
        apply_options(model, parse_options(self.options))
        self.model = model.eval()
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
            "options": self.options,
        }

    @torch.no_grad()
    def infer(self, observations: list[dict]) -> list[np.ndarray]:
        batch = self.processor.observation_batch(observations)
        noise = observation_noise(observations, (self.horizon, self.cfg.head.action_dim))
        start = time.perf_counter()
        batch = self.processor.finish({k: v.to(self.device) for k, v in batch.items()}, self.dtype)
        actions = self.model.sample_actions(batch, noise=noise.to(self.device, self.dtype))
        actions = actions.float().cpu().numpy()  # waits for the device: the latency below is complete
        self.latencies.append((len(observations), time.perf_counter() - start))
        return [self.processor.actions_out(a[: self.steps_out], self.action_dim).astype(np.float32) for a in actions]
