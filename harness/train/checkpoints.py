"""Training checkpoints: an evaluable policy plus what `--resume` needs, one folder per saved step.

    OUT/checkpoints/step-00001000/
        model.safetensors, config.json, policy_preprocessor.json, normalizer.safetensors[, tokenizer.model]
                                the policy, written by the family (Pi0.5: LeRobot's layout, which `vlabench eval
                                --policy pi05 --checkpoint` reads): the EMA weights when the recipe keeps an EMA
                                (as openpi saves them), else the trained weights
        train_state.json        step, the run's configuration (scenario, rung, options, workload, recipe, data)
        train_state.safetensors the optimizer's state per parameter (`optimizer/<parameter>/<key>`) and, with an
                                EMA, the trained weights themselves (`weights/<parameter>`, plain names)

A folder is written as `.step-XXXXXXXX.tmp` and renamed into place when complete, so a killed run leaves the
previous checkpoint whole; only the newest `keep` folders are kept.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from ..errors import InputError, describe

STATE_SCHEMA = "vlabench.train-state/1"
PREFIX = "step-"


def checkpoint_dir(out: Path, step: int) -> Path:
    return Path(out) / "checkpoints" / f"{PREFIX}{step:08d}"


def saved_checkpoints(out: Path) -> list[Path]:
    """The complete checkpoint folders under `out`, oldest first."""
    root = Path(out) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len(PREFIX) :]))


def optimizer_tensors(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> dict[str, torch.Tensor]:
    """The optimizer's per-parameter state as `optimizer/<parameter name>/<key>` tensors."""
    out = {}
    for group in optimizer.param_groups:
        for param in group["params"]:
            for key, value in optimizer.state.get(param, {}).items():
                if isinstance(value, torch.Tensor):
                    out[f"optimizer/{names[id(param)]}/{key}"] = value.detach().contiguous().cpu()
    return out


def restore_optimizer(optimizer: torch.optim.Optimizer, names: dict[int, str], tensors: dict, where: str) -> None:
    """Load `optimizer/<name>/<key>` tensors back through torch's own load_state_dict (which puts each value on
    its parameter's device, the step counter where the optimizer keeps it). Every saved entry must belong to a
    parameter of this optimizer."""
    known = {f"optimizer/{names[id(p)]}/" for group in optimizer.param_groups for p in group["params"]}
    stray = [k for k in tensors if k.startswith("optimizer/") and k[: k.rindex("/") + 1] not in known]
    if stray:
        raise InputError(where, None, "optimizer state of this run's parameters", f"state for {stray[0]}")
    state_dict = optimizer.state_dict()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    state = {}
    for index, param in enumerate(params):
        prefix = f"optimizer/{names[id(param)]}/"
        entry = {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}
        if entry:  # a parameter that never had a gradient (off the loss path) has no state, then as now
            state[index] = entry
    state_dict["state"] = state
    optimizer.load_state_dict(state_dict)


def save_checkpoint(
    out: Path, step: int, write_policy, tensors: dict[str, torch.Tensor], meta: dict, keep: int
) -> Path:
    """Write checkpoint `step`: `write_policy(folder)` writes the policy files, `tensors` go to
    train_state.safetensors and `meta` to train_state.json; then the folder is renamed into place and only the
    newest `keep` checkpoints are kept."""
    from safetensors.torch import save_file

    final = checkpoint_dir(out, step)
    tmp = final.with_name(f".{final.name}.tmp")
    if tmp.exists():
        shutil.rmtree(tmp)  # left by a run killed while saving
    tmp.mkdir(parents=True)
    try:
        write_policy(tmp)
        save_file(tensors, str(tmp / "train_state.safetensors"))
        state = {"schema": STATE_SCHEMA, "step": step, **meta}
        (tmp / "train_state.json").write_text(json.dumps(state, indent=1) + "\n")
        if final.exists():  # the same step saved again (a resumed run that ends where it started)
            shutil.rmtree(final)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in saved_checkpoints(out)[:-keep] if keep > 0 else []:
        shutil.rmtree(old)
    return final


@dataclass
class SavedState:
    folder: Path
    step: int
    meta: dict  # train_state.json
    tensors: dict[str, torch.Tensor]  # train_state.safetensors


def load_latest(out: Path) -> SavedState:
    """The newest complete checkpoint under `out`; one line if there is none or it is unreadable."""
    found = saved_checkpoints(out)
    if not found:
        raise InputError(str(out), "checkpoints", "a checkpoint to resume from (--resume)", "none")
    folder = found[-1]
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    try:
        meta = json.loads((folder / "train_state.json").read_text())
        tensors = load_file(str(folder / "train_state.safetensors"))
        for weights in sorted(folder.glob("*.safetensors")):  # a truncated file fails its header check here
            with safe_open(str(weights), framework="pt"):
                pass
    except (OSError, ValueError, RuntimeError, SafetensorError) as e:
        raise InputError(str(folder), None, "a readable training checkpoint", str(e).splitlines()[0]) from None
    if not isinstance(meta, dict) or meta.get("schema") != STATE_SCHEMA:
        got = repr(meta.get("schema")) if isinstance(meta, dict) else describe(meta)
        raise InputError(str(folder / "train_state.json"), "schema", STATE_SCHEMA, got)
    if not isinstance(meta.get("step"), int) or isinstance(meta.get("step"), bool) or meta["step"] < 0:
        raise InputError(str(folder / "train_state.json"), "step", "a step count", describe(meta.get("step")))
    return SavedState(folder, meta["step"], meta, tensors)


def check_same_run(saved: dict, now: dict, where: str) -> None:
    """A resumed run must be the run it continues: the same scenario, rung, options, workload, data and recipe."""
    for key in now:
        if saved.get(key) != now[key]:
            raise InputError(
                where,
                key,
                f"{json.dumps(now[key], sort_keys=True)[:200]} (this run's; --resume continues the same run)",
                json.dumps(saved.get(key), sort_keys=True)[:200],
            )
