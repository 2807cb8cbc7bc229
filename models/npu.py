"""Ascend NPU kernels (torch_npu), imported only when an NPU runs them.

Each function takes the torch_npu module as `backend` so that tests can substitute a stand-in and
check the exact call (arguments, layout, mask convention) on a CPU; the CPU reference of the same
math lives beside each one.
"""

from __future__ import annotations

import torch
from torch import nn

from .extras import SetupError, pip_install


def torch_npu_module():
    try:
        import torch_npu
    except ImportError as e:  # the npu extra is optional
        raise SetupError(
            f"this option needs torch_npu on an Ascend NPU: install vlabench[npu]: {pip_install('npu')}"
        ) from e
    return torch_npu


def fusion_attention(q, k, v, masked, scale: float, backend=None):
    """torch_npu.npu_fusion_attention in BNSD layout. q [B, N, Sq, D], k/v [B, Nkv, Sk, D] (GQA is native:
    the K/V head is not repeated). `masked` is bool [B, 1, Sq, Sk] with True = may NOT attend, the
    kernel's convention (the opposite of our `bool_mask`)."""
    backend = backend or torch_npu_module()
    out = backend.npu_fusion_attention(
        q,
        k,
        v,
        q.shape[1],
        "BNSD",
        atten_mask=masked,
        scale=scale,
        keep_prob=1.0,
        pre_tockens=2**31 - 1,
        next_tockens=2**31 - 1,
    )  # no sliding window: the mask says everything
    return out[0]


class GroupedGateUp(torch.autograd.Function):
    """gate = x @ Wg^T and up = x @ Wu^T as one npu_grouped_matmul, with a hand-written backward that
    groups the two input-gradient GEMMs and the two weight-gradient GEMMs the same way."""

    @staticmethod
    def forward(ctx, x, w_gate, w_up, backend):
        ctx.save_for_backward(x, w_gate, w_up)
        ctx.backend = backend
        gate, up = backend.npu_grouped_matmul([x, x], [w_gate.t(), w_up.t()])
        return gate, up

    @staticmethod
    def backward(ctx, g_gate, g_up):
        x, w_gate, w_up = ctx.saved_tensors
        backend = ctx.backend
        dx_gate, dx_up = backend.npu_grouped_matmul([g_gate, g_up], [w_gate, w_up])
        dw_gate, dw_up = backend.npu_grouped_matmul([g_gate.t(), g_up.t()], [x, x])
        return dx_gate + dx_up, dw_gate, dw_up, None


class NpuGateUp(nn.Module):
    """The gate and up projections of a Gemma MLP through GroupedGateUp; keeps the two weights (and so
    the checkpoint layout) of the unfused module."""

    def __init__(self, gate_proj: nn.Linear, up_proj: nn.Linear, backend=None):
        super().__init__()
        self.gate_proj, self.up_proj = gate_proj, up_proj
        self.backend = backend

    def forward(self, x):
        shape = x.shape
        x2 = x.reshape(-1, shape[-1])
        gate, up = GroupedGateUp.apply(
            x2, self.gate_proj.weight, self.up_proj.weight, self.backend or torch_npu_module()
        )
        return gate.view(*shape[:-1], -1), up.view(*shape[:-1], -1)
