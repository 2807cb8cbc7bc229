"""Fused projections: several Linears that read the same input run as one GEMM (one launch, one read
of the input), and the output is split back. Parameters are the concatenation of the originals, so
the math is unchanged; a load hook still accepts checkpoints in the unfused layout."""

from __future__ import annotations

import torch
from torch import nn


class FusedLinear(nn.Module):
    """One Linear whose output is split into `split_sizes` (e.g. Q, K and V)."""

    def __init__(self, in_features: int, split_sizes: list[int], bias: bool):
        super().__init__()
        self.split_sizes = list(split_sizes)
        self.linear = nn.Linear(in_features, sum(split_sizes), bias=bias)

    @classmethod
    def from_linears(cls, linears: list[nn.Linear]) -> FusedLinear:
        first = linears[0]
        fused = cls(first.in_features, [m.out_features for m in linears], first.bias is not None)
        fused.to(device=first.weight.device, dtype=first.weight.dtype)
        with torch.no_grad():
            fused.linear.weight.copy_(torch.cat([m.weight for m in linears]))
            if first.bias is not None:
                fused.linear.bias.copy_(torch.cat([m.bias for m in linears]))
        return fused

    def forward(self, x):
        return self.linear(x).split(self.split_sizes, dim=-1)


def fuse_linears(parent: nn.Module, names: list[str], fused_name: str) -> FusedLinear:
    """Replace `parent.<names>` by one `parent.<fused_name>` and teach `parent` to load checkpoints that
    still hold the separate weights (`<name>.weight` keys are concatenated on load)."""
    fused = FusedLinear.from_linears([getattr(parent, n) for n in names])
    for n in names:
        delattr(parent, n)
    setattr(parent, fused_name, fused)

    def load_unfused(module, state_dict, prefix, *args):
        for param in ("weight", "bias"):
            keys = [f"{prefix}{n}.{param}" for n in names]
            if all(k in state_dict for k in keys):
                state_dict[f"{prefix}{fused_name}.linear.{param}"] = torch.cat([state_dict.pop(k) for k in keys])

    parent.register_load_state_dict_pre_hook(load_unfused)
    return fused
