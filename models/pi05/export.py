"""A trained Pi0.5 written as a policy checkpoint in LeRobot's layout, which `vlabench eval --policy pi05
--checkpoint DIR` reads (models/pi05/policy.py, `lerobot_meta`) with the preprocessing the model trained with:

    model.safetensors           the weights under LeRobot's names (`model.paligemma_with_expert...`)
    config.json                 type pi05, chunk_size, max_state_dim, tokenizer_max_length, normalisation modes
    policy_preprocessor.json    LeRobot's processor pipeline: the normaliser step and its state file
    normalizer.safetensors      the dataset's statistics of observation.state and action (`<feature>.<stat>`)
    tokenizer.model             the SentencePiece tokenizer trained with, when it was a file

Training normalises state and actions with the dataset's quantiles (epsilon only where a range is zero), pads
the state to 32 values and discretises it into the prompt (models/pi05/family.py, `data_processor`): the
config and preprocessor files say exactly that, so the evaluation preprocesses as training did.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import torch

from ..tokenizers import BUILTIN
from ..workload import Workload
from .checkpoint import to_reference_state_dict
from .config import Pi05Config

NORM_EPS = 1e-8  # LeRobot's normaliser epsilon, added only where a quantile range is zero
NORM_MAP = {"VISUAL": "IDENTITY", "STATE": "QUANTILES", "ACTION": "QUANTILES"}
NORMALIZER_FILE = "normalizer.safetensors"
SAMPLE_STEPS = 10  # Euler steps at inference, as both references


def policy_config(cfg: Pi05Config, workload: Workload, extra: dict) -> dict:
    """config.json in LeRobot's Pi0.5 keys, plus ours under `vlabench`."""
    return {
        "type": "pi05",
        "chunk_size": workload.action_horizon,
        "n_action_steps": workload.action_horizon,
        "max_state_dim": workload.state_pad,  # the state is padded to this many values before it is discretised
        "max_action_dim": cfg.action_dim,
        "tokenizer_max_length": workload.text_tokens,
        "num_inference_steps": SAMPLE_STEPS,
        "image_resolution": [cfg.vision.image_size, cfg.vision.image_size],
        "normalization_mapping": dict(NORM_MAP),
        "vlabench": extra,
    }


def normalizer_tensors(stats: dict) -> dict[str, torch.Tensor]:
    """The statistics of observation.state and action as `<feature>.<stat>` float32 tensors."""
    out = {}
    for feature in ("observation.state", "action"):
        for stat, value in (stats.get(feature) or {}).items():
            out[f"{feature}.{stat}"] = torch.from_numpy(np.asarray(value, dtype=np.float32).reshape(-1).copy())
    return out


def preprocessor_config() -> dict:
    return {
        "name": "policy_preprocessor",
        "steps": [
            {
                "registry_name": "normalizer_processor",
                "config": {"eps": NORM_EPS, "norm_map": dict(NORM_MAP)},
                "state_file": NORMALIZER_FILE,
            }
        ],
    }


def write_policy(
    folder,
    weights: dict[str, torch.Tensor],
    cfg: Pi05Config,
    workload: Workload,
    stats: dict,
    tokenizer: str | None,
    extra: dict | None = None,
) -> Path:
    """Write the policy files into `folder` (which must exist); `weights` are plain-named (models/pi05/weights.py)
    and `tokenizer` a SentencePiece file (copied), 'bytes', 'pieces' (models/tokenizers.py) or None (bytes)."""
    from safetensors.torch import save_file

    folder = Path(folder)
    save_file(to_reference_state_dict(weights, cfg, "lerobot"), str(folder / "model.safetensors"))
    save_file(normalizer_tensors(stats), str(folder / NORMALIZER_FILE))
    meta = {
        "tokenizer": tokenizer if tokenizer in BUILTIN else "bytes" if tokenizer is None else Path(tokenizer).name,
        # LeRobot's Pi0.5 always puts the state in the prompt; a model trained without it says so here
        "state_in_prompt": workload.robot_state,
        **(extra or {}),
    }
    (folder / "config.json").write_text(json.dumps(policy_config(cfg, workload, meta), indent=1) + "\n")
    (folder / "policy_preprocessor.json").write_text(json.dumps(preprocessor_config(), indent=1) + "\n")
    if tokenizer not in (None, *BUILTIN) and Path(tokenizer).is_file():
        shutil.copyfile(tokenizer, folder / "tokenizer.model")
    return folder
