"""Low-precision copies of fp32 trainable weights, written by the optimizer instead of cast again in every forward.

Under bf16 autocast an nn.Linear with an fp32 weight casts that weight to bf16 in every forward: a kernel that
reads 4 bytes and writes 2 per weight, every step, for weights that only change in the optimizer step. A
`CopiedWeightLinear` reads a bf16 copy kept beside its fp32 weight instead; the optimizer's update, which reads
and writes the fp32 weight anyway, writes the copy too (models/clipped_adamw.py). The values are autocast's: the
same fp32 weight rounded to bf16 the same way. The gradient still reaches the fp32 weight in fp32, cast from the
bf16 gradient as autocast's cast does in its backward, so everything after the forward (clipping, all-reduce,
AdamW) sees the same tensors.

The copy is a plain tensor attribute, not a buffer: it stays out of the state dict (checkpoints keep the fp32
weight), out of DistributedDataParallel's buffer broadcast, and `load_state_dict` refreshes it from the loaded
weight.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _ReadCopy(torch.autograd.Function):
    """Forward: the copy (the weight's value in the copy's dtype). Backward: the gradient cast to the weight's dtype,
    for the weight (the copy takes none)."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, copy: torch.Tensor) -> torch.Tensor:
        ctx.weight_dtype = weight.dtype
        return copy.view_as(copy)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad.to(ctx.weight_dtype), None


def _refresh_after_load(module: CopiedWeightLinear, _incompatible_keys) -> None:
    """load_state_dict's post hook (a module-level function, so the module still pickles)."""
    module.refresh_copy()


class CopiedWeightLinear(nn.Linear):
    """nn.Linear whose forward reads `weight_copy` (a copy of `weight` in a lower precision, kept current by whoever
    updates `weight`: the optimizer) in place of `weight`; its gradient flows to `weight`."""

    weight_copy: torch.Tensor

    @classmethod
    def from_linear(cls, linear: nn.Linear, dtype: torch.dtype) -> CopiedWeightLinear:
        """A module over the same parameter objects as `linear`; only `weight_copy` is new memory."""
        module = cls(linear.in_features, linear.out_features, bias=linear.bias is not None, device="meta")
        module.weight = linear.weight
        module.bias = linear.bias
        module.train(linear.training)
        module.weight_copy = linear.weight.detach().to(dtype)
        module.register_load_state_dict_post_hook(_refresh_after_load)
        return module

    @torch.no_grad()
    def refresh_copy(self) -> None:
        """The copy written again from the weight (after anything but the optimizer changed the weight), in place:
        the optimizer and any captured CUDA graph hold the copy's storage."""
        self.weight_copy.copy_(self.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, _ReadCopy.apply(self.weight, self.weight_copy), self.bias)


def copyable(module: nn.Module, dtype: torch.dtype) -> bool:
    """Whether copy_trainable_weights replaces `module`: a plain nn.Linear (not a torchao Float8Linear or any other
    subclass) with a trainable weight in another dtype than `dtype`."""
    return type(module) is nn.Linear and module.weight.requires_grad and module.weight.dtype != dtype


def copy_trainable_weights(model: nn.Module, dtype: torch.dtype) -> list[str]:
    """Every copyable linear of `model` replaced, in place, by a CopiedWeightLinear over the same parameters.
    Returns the replaced modules' names."""
    replaced = []
    for name, module in list(model.named_modules()):
        if copyable(module, dtype):
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, CopiedWeightLinear.from_linear(module, dtype))
            replaced.append(name)
    return replaced


def weight_copies(model: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(weight, copy) of every CopiedWeightLinear in `model` (through any wrapper: DDP holds it as .module)."""
    return [(m.weight, m.weight_copy) for m in model.modules() if isinstance(m, CopiedWeightLinear)]
