"""Weights of a Pi0.5 model built with a rung's options, under the names of the plain model.

A rung's switches rename parameters: recompute wraps modules (`backbone.module.layers.0.module...`) and the
fused projections replace Q/K/V and gate/up by one Linear (`qkv_proj.linear.weight`). Checkpoints hold the plain
model's names (`models/pi05/checkpoint.py` maps those onto the reference layouts), so training saves through
`plain_state_dict` and loads through `model_state_dict`, whatever the rung's options. Compile units are compiled
in place and FP8 linears keep their `weight` and `bias`: neither renames anything.
"""

from __future__ import annotations

import torch

from .model import Pi05Model

# fused Linear name -> the plain Linears it concatenates, in order (models/pi05/techniques.py)
FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up": ("gate_proj", "up_proj")}
WRAPPER = "module"  # the attribute through which a recompute wrapper holds its module


def plain_name(name: str) -> str:
    """A module or parameter name with the recompute wrappers' `module` segments left out."""
    return ".".join(part for part in name.split(".") if part != WRAPPER)


def _fused_modules(model: Pi05Model) -> dict[str, object]:
    """Plain name of each fused Linear (`...prefix.qkv_proj`) -> the module (it holds the split sizes)."""
    return {plain_name(n): m for n, m in model.named_modules() if type(m).__name__ == "FusedLinear"}


def _fused_owner(name: str, fused: dict) -> str | None:
    """`...qkv_proj` for a plain parameter name `...qkv_proj.linear.weight`, else None."""
    parts = name.rsplit(".", 2)
    return parts[0] if len(parts) == 3 and parts[1] == "linear" and parts[0] in fused else None


def expected_names(model: Pi05Model) -> set[str]:
    with torch.device("meta"):
        return set(Pi05Model(model.cfg).state_dict())


def _check_names(model: Pi05Model, state: dict, what: str) -> None:
    expected = expected_names(model)
    missing, unknown = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unknown:
        raise ValueError(
            f"{what} do not match the plain Pi0.5 names of this size: {len(missing)} missing"
            f"{' (e.g. ' + missing[0] + ')' if missing else ''}, {len(unknown)} unknown"
            f"{' (e.g. ' + unknown[0] + ')' if unknown else ''}"
        )


def plain_state_dict(model: Pi05Model, tensors: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """`tensors` keyed by the model's own parameter names (default: its state dict) under the plain model's
    names, detached; fused projections are split back into their Linears."""
    fused = _fused_modules(model)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in (model.state_dict() if tensors is None else tensors).items():
        name, tensor = plain_name(name), tensor.detach()
        owner = _fused_owner(name, fused)
        if owner is None:
            out[name] = tensor
            continue
        parent, fused_name = owner.rsplit(".", 1)
        param = name.rsplit(".", 1)[1]
        for linear, part in zip(FUSED[fused_name], tensor.split(fused[owner].split_sizes, dim=0)):
            out[f"{parent}.{linear}.{param}"] = part.clone()
    _check_names(model, out, "the model's tensors")
    return out


def model_state_dict(model: Pi05Model, plain: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Plain-named tensors under the model's own names (the inverse of `plain_state_dict`): fused projections
    concatenate their Linears' tensors, recompute wrappers add their segments."""
    _check_names(model, plain, "the weights")
    fused = _fused_modules(model)
    out = {}
    for name in model.state_dict():
        key = plain_name(name)
        owner = _fused_owner(key, fused)
        if owner is None:
            out[name] = plain[key]
            continue
        parent, fused_name = owner.rsplit(".", 1)
        param = key.rsplit(".", 1)[1]
        out[name] = torch.cat([plain[f"{parent}.{linear}.{param}"] for linear in FUSED[fused_name]])
    return out


def load_plain_state_dict(model: Pi05Model, plain: dict[str, torch.Tensor]) -> None:
    """Load plain-named weights into a model built with any options (strict), each tensor copied into its
    parameter's dtype and device."""
    model.load_state_dict(model_state_dict(model, plain), strict=True)


def time_conditioning_names(model: Pi05Model) -> list[str]:
    """The parameters through which the model knows the flow time: the time MLP and every adaRMS modulation
    (the expert's norms' Dense layers), under the model's own names."""
    return [
        name
        for name, _ in model.named_parameters()
        if ".time_mlp." in f".{plain_name(name)}" or ".dense." in f".{plain_name(name)}."
    ]
