"""MLPs trained in FP8 as one autograd function each, with the casts their GEMMs read written by tiled Triton kernels
(models/fp8_casts.py): Gemma's gated MLP (gate and up projections, GELU(tanh) x up, down projection; Pi0.5's
`fp8_mlp: triton`) and SigLIP's biased MLP (fc1, GELU(tanh), fc2, each linear with a bias; `fp8_vision_mlp: triton`).

Why: torchao's Float8Linear (models/fp8.py) casts each linear's operands to FP8 with one scale per tensor, which is
the arithmetic kept here; but each linear casts its operands on its own, and under compile inductor writes the
activation's backward gradients to FP8 in both layouts (the weight gradients' GEMMs read them token-major) and
takes their amaxes in kernels that cost more than the bf16 activation they replace (models/fp8_casts.py says how
much). Here each operand is cast once per step, in both layouts, its amax in the same kernel as the activation: the
weights in the forward (row-major for the forward GEMM, transposed for the input gradient's), the input and the
activation in the forward (their transposed copies are what the weight gradients read), the output gradient and
the activation's gradient in the backward.

Numerics, as torchao's tensorwise recipe (models/fp8_casts.py): GEMMs accumulate in fp32 and write bf16, with fast
accumulation in the forward GEMMs only; a bias is added to the GEMM's bf16 output, as Float8Linear adds it, and
its gradient is the sum over tokens of the bf16 output gradient. The activations' gradients are rounded to bf16
before their cast, as torchao casts the bf16 gradient. Off CUDA the casts run as torch operations and the GEMMs
multiply the dequantised operands (CPU tests).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .fp8_casts import (
    fp8_cast,
    fp8_gelu_amax,
    fp8_gelu_cast,
    fp8_gelu_grad_amax_sum,
    fp8_gelu_grad_cast,
    fp8_gelu_mul_amax,
    fp8_gelu_mul_backward_amax,
    fp8_gelu_mul_backward_cast,
    fp8_gelu_mul_cast,
    scale_from_amax,
    tensor_scale,
)


def fp8_mm(a: Tensor, b: Tensor, a_scale: Tensor, b_scale: Tensor, fast_accum: bool, out_dtype) -> Tensor:
    """a [M, K] row-major @ b [K, N] column-major, both FP8 with their tensorwise scales; fp32 accumulation."""
    if a.is_cuda:
        return torch._scaled_mm(
            a, b, scale_a=a_scale.reciprocal(), scale_b=b_scale.reciprocal(), out_dtype=out_dtype,
            use_fast_accum=fast_accum,
        )  # fmt: skip
    return ((a.float() / a_scale) @ (b.float() / b_scale)).to(out_dtype)


def _rows(t: Tensor) -> Tensor:
    return t.reshape(-1, t.shape[-1]).contiguous()


def _cast_forward_operands(x2: Tensor, weights: tuple[Tensor, ...]):
    """The input's and each weight's tensorwise scale and FP8 (e4m3) pair (row-major, transposed)."""
    scales = [tensor_scale(t) for t in (x2, *weights)]
    return scales, [fp8_cast(t, s, False) for t, s in zip((x2, *weights), scales)]


def _cast_output_gradient(grad_out: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The output gradient as rows, its scale and its FP8 (e5m2) pair."""
    g = _rows(grad_out)
    g_scale = tensor_scale(g, True)
    return g, g_scale, *fp8_cast(g, g_scale, True)


class Fp8GatedMLPFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
        dtype = x.dtype
        scales, casts = _cast_forward_operands(_rows(x), (w_gate, w_up, w_down))
        x_scale, gate_scale, up_scale, down_scale = scales
        (x8, x8t), (wg8, wg8t), (wu8, wu8t), (wd8, wd8t) = casts
        gate = fp8_mm(x8, wg8.t(), x_scale, gate_scale, True, dtype)
        up = fp8_mm(x8, wu8.t(), x_scale, up_scale, True, dtype)
        h_scale = scale_from_amax(fp8_gelu_mul_amax(gate, up))
        h8, h8t = fp8_gelu_mul_cast(gate, up, h_scale)
        out = fp8_mm(h8, wd8.t(), h_scale, down_scale, True, dtype)
        ctx.save_for_backward(x8t, gate, up, h8t, wg8t, wu8t, wd8t, *scales, h_scale)
        ctx.x_shape = x.shape
        return out.reshape(*x.shape[:-1], w_down.shape[0])

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        x8t, gate, up, h8t, wg8t, wu8t, wd8t, x_scale, gate_scale, up_scale, down_scale, h_scale = ctx.saved_tensors
        dtype = grad_out.dtype
        _, g_scale, g8, g8t = _cast_output_gradient(grad_out)
        grad_h = fp8_mm(g8, wd8t.t(), g_scale, down_scale, False, dtype)  # [N, mlp]
        grad_w_down = fp8_mm(g8t, h8t.t(), g_scale, h_scale, False, dtype)  # [width, mlp]
        dg_scale, du_scale = scale_from_amax(fp8_gelu_mul_backward_amax(grad_h, gate, up), True).chunk(2)
        dg8, dg8t, du8, du8t = fp8_gelu_mul_backward_cast(grad_h, gate, up, dg_scale, du_scale)
        grad_x = fp8_mm(dg8, wg8t.t(), dg_scale, gate_scale, False, dtype) + fp8_mm(
            du8, wu8t.t(), du_scale, up_scale, False, dtype
        )
        grad_w_gate = fp8_mm(dg8t, x8t.t(), dg_scale, x_scale, False, dtype)
        grad_w_up = fp8_mm(du8t, x8t.t(), du_scale, x_scale, False, dtype)
        return grad_x.reshape(ctx.x_shape), grad_w_gate, grad_w_up, grad_w_down


class Fp8BiasGeluMLPFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
        dtype = x.dtype
        scales, casts = _cast_forward_operands(_rows(x), (w1, w2))
        x_scale, w1_scale, w2_scale = scales
        (x8, x8t), (w18, w18t), (w28, w28t) = casts
        y = fp8_mm(x8, w18.t(), x_scale, w1_scale, True, dtype)  # fc1 without its bias: the GELU kernels add it
        h_scale = scale_from_amax(fp8_gelu_amax(y, b1))
        h8, h8t = fp8_gelu_cast(y, b1, h_scale)
        out = fp8_mm(h8, w28.t(), h_scale, w2_scale, True, dtype) + b2
        ctx.save_for_backward(x8t, y, b1, h8t, w18t, w28t, *scales, h_scale)
        ctx.x_shape = x.shape
        return out.reshape(*x.shape[:-1], w2.shape[0])

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        x8t, y, b1, h8t, w18t, w28t, x_scale, w1_scale, w2_scale, h_scale = ctx.saved_tensors
        dtype = grad_out.dtype
        g, g_scale, g8, g8t = _cast_output_gradient(grad_out)
        grad_h = fp8_mm(g8, w28t.t(), g_scale, w2_scale, False, dtype)  # [N, mlp]
        grad_w2 = fp8_mm(g8t, h8t.t(), g_scale, h_scale, False, dtype)  # [width, mlp]
        d_amax, grad_b1 = fp8_gelu_grad_amax_sum(grad_h, y, b1)
        d_scale = scale_from_amax(d_amax, True)
        d8, d8t = fp8_gelu_grad_cast(grad_h, y, b1, d_scale)
        grad_x = fp8_mm(d8, w18t.t(), d_scale, w1_scale, False, dtype)
        grad_w1 = fp8_mm(d8t, x8t.t(), d_scale, x_scale, False, dtype)
        return grad_x.reshape(ctx.x_shape), grad_w1, grad_b1.to(b1.dtype), grad_w2, g.sum(0)


def _check_dtypes(fn: str, x: Tensor, **params: Tensor) -> None:
    for name, w in params.items():
        if w.dtype != x.dtype:
            raise ValueError(f"{fn}: {name} is {w.dtype} but x is {x.dtype}; they must match")
    if x.is_cuda and x.dtype != torch.bfloat16:
        raise ValueError(f"{fn}: on CUDA the kernels round GELU's values to bf16, the model's dtype; x is {x.dtype}")


def fp8_gated_mlp(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """down(GELU(tanh)(x @ w_gate.T) * (x @ w_up.T)) with every GEMM in FP8 (tensorwise scales), forward and
    backward. x [..., width]; w_gate, w_up [mlp, width]; w_down [width, mlp]; every size a multiple of 16."""
    _check_dtypes("fp8_gated_mlp", x, w_gate=w_gate, w_up=w_up, w_down=w_down)
    return Fp8GatedMLPFunction.apply(x, w_gate, w_up, w_down)


def fp8_bias_gelu_mlp(x: Tensor, w1: Tensor, b1: Tensor, w2: Tensor, b2: Tensor) -> Tensor:
    """GELU(tanh)(x @ w1.T + b1) @ w2.T + b2 with every GEMM in FP8 (tensorwise scales), forward and backward.
    x [..., width]; w1 [mlp, width], b1 [mlp]; w2 [width, mlp], b2 [width]; every size a multiple of 16."""
    _check_dtypes("fp8_bias_gelu_mlp", x, w1=w1, b1=b1, w2=w2, b2=b2)
    return Fp8BiasGeluMLPFunction.apply(x, w1, b1, w2, b2)
