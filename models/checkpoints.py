"""What every family's checkpoint loading shares: safetensors files only (never pickle), a single
`model.safetensors` or shards named by `model.safetensors.index.json`, one-line errors naming the file, the strict
mapping of reference names onto ours, the size whose parameter shapes a state dict matches, and building the plain
model of that size with the weights in."""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch


class CheckpointError(ValueError):
    """A checkpoint that cannot be loaded; the message names the file and what is wrong."""


def safetensors_files(path: Path) -> list[Path]:
    """The safetensors files of a checkpoint: the file itself, a folder's `model.safetensors`, or the shards
    its index names (all present)."""
    path = Path(path)
    if path.is_file():
        if path.suffix != ".safetensors":
            raise CheckpointError(f"{path}: expected a .safetensors file (pickled checkpoints are not loaded)")
        return [path]
    single = path / "model.safetensors"
    if single.is_file():
        return [single]
    index = path / "model.safetensors.index.json"
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        missing = [s for s in shards if not (path / s).is_file()]
        if missing:
            raise CheckpointError(f"{path}: the index names {len(missing)} shard(s) that are absent ({missing[0]})")
        return [path / s for s in shards]
    pickles = [p.name for p in path.glob("*") if re.search(r"\.(bin|pt|pth|ckpt|pkl)$", p.name)]
    hint = f" (found {', '.join(pickles)}: pickled weights are not loaded)" if pickles else ""
    raise CheckpointError(f"{path}: no model.safetensors or model.safetensors.index.json{hint}")


def read_tensors(path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint's safetensors files, under the names the files give them."""
    from safetensors.torch import load_file

    tensors = {}
    for file in safetensors_files(Path(path)):
        try:
            tensors.update(load_file(str(file)))
        except Exception as e:  # a truncated or foreign file: safetensors raises its own error types
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise CheckpointError(f"{file}: not a readable safetensors file ({reason})") from None
    if not tensors:
        raise CheckpointError(f"{path}: the safetensors file holds no tensors")
    return tensors


def expand_layer_rules(rules, layers: dict[str, int]) -> dict[str, str]:
    """(our name, reference name) patterns with `{n}` -> every layer's names, in the order of the rules; `layers`
    counts the layers of each stack, by the first part of our name (e.g. {"vision": 27, "llm": 16})."""
    names = {}
    for ours, ref in rules:
        for n in range(layers[ours.split(".", 1)[0]]):
            names[ours.format(n=n)] = ref.format(n=n)
    return names


def map_reference(tensors: dict, names: dict[str, str], what: str, source: str = "checkpoint") -> dict:
    """Reference-named tensors under our names (`names`: ours -> reference); strict about missing and unknown keys,
    in one line naming the source and a few of each."""
    missing = [ref for ref in names.values() if ref not in tensors]
    unknown = sorted(set(tensors) - set(names.values()))
    if missing or unknown:
        parts = []
        if missing:
            parts.append(f"{len(missing)} missing (e.g. {', '.join(missing[:3])})")
        if unknown:
            parts.append(f"{len(unknown)} unknown (e.g. {', '.join(unknown[:3])})")
        raise CheckpointError(f"{source}: keys do not match the {what} layout: " + "; ".join(parts))
    return {ours: tensors[ref] for ours, ref in names.items()}


def load_plain(model_class, cfg, state: dict, device, dtype: torch.dtype):
    """The plain model of `cfg` (built on the meta device, then materialised on `device`) with `state` loaded
    strictly, in `dtype`, in eval mode."""
    with torch.device("meta"):
        model = model_class(cfg)
    model = model.to_empty(device=device)
    model.load_state_dict(state, strict=True)
    return model.to(dtype).eval()


def infer_size(model_class, sizes: dict, shapes: dict[str, tuple], what: str, source: str = "checkpoint") -> str:
    """Which of `sizes` builds a `model_class` with exactly these parameter shapes (our names)."""
    for size, cfg in sizes.items():
        with torch.device("meta"):
            expected = {k: tuple(v.shape) for k, v in model_class(cfg).state_dict().items()}
        if expected == shapes:
            return size
    raise CheckpointError(f"{source}: parameter shapes match no {what} size ({', '.join(sizes)})")
