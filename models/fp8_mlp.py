"""Gemma's gated MLP (gate and up projections, GELU(tanh) x up, down projection) trained in FP8 as one autograd
function, with the casts the GEMMs read written by tiled Triton kernels (Pi0.5's `fp8_mlp: triton`).

Why: torchao's Float8Linear (models/fp8.py) casts each linear's operands to FP8 with one scale per tensor, which is
the arithmetic kept here. But an FP8 GEMM on Hopper reads both operands with the reduced dimension contiguous, so
the weight-gradient GEMM (reduced over tokens) needs token-major copies of the output gradient and of the input.
Under compile, inductor writes the GELU backward's two gradients in FP8 row-major and transposed from one
pointwise kernel; on the H200 that kernel took 2.2 ms per layer against 0.87 ms for bf16's GELU backward, as its
transposed stores are scattered. Here each cast is one program per tile (32-128 x 64-128 elements, autotuned per
shape at the first call): it loads the tile once, computes
the value (plain, GELU x up, or the GELU backward), and stores it cast to FP8 both ways, Triton staging the
transposed store through shared memory so both stores are coalesced. The same kernel takes the amax of GELU x up
and of the GELU backward's two gradients (each tile its own maximum, then torch's over the tiles), which inductor
had split into three kernels that wrote both gradients in bf16 to read them back. Each operand is cast once per step and kept
in the layouts its GEMMs read: the weights in the forward (row-major for the forward GEMM, transposed for the input
gradient's), the input and GELU x up in the forward (their transposed copies are what the weight gradients read).

Numerics, as torchao's tensorwise recipe: e4m3 for weights and activations, e5m2 for gradients; scale = the type's
largest value / amax (fp32, amax at least 1e-12), value x scale clamped to that largest value and rounded; GEMMs
accumulate in fp32 and write bf16 (fast accumulation in the forward GEMMs only).
The GELU backward's gradients are rounded to bf16 before their cast, as torchao casts the bf16 gradient.
Off CUDA the casts run as torch operations and the GEMMs multiply the dequantised operands (CPU tests).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import Tensor

FP8 = torch.float8_e4m3fn  # weights, inputs and activations
FP8_GRAD = torch.float8_e5m2  # gradients: torchao's tensorwise recipe trades mantissa for range there
AMAX_EPS = 1e-12  # torchao's floor on amax, so an all-zero tensor gets a finite scale
SQRT_2_OVER_PI, GELU_CUBIC = 0.7978845608028654, 0.044715

PLAIN, GELU_MUL, GELU_BACKWARD = 0, 1, 2  # what a cast kernel computes from its inputs before casting
# the kernel's tiles (rows, columns, warps), autotuned per shape: rows are contiguous in the transposed outputs,
# columns in the row-major ones
TILES = ((64, 128, 8), (128, 128, 8), (128, 64, 4), (64, 64, 4), (32, 128, 4))


def fp8_dtype(gradient: bool) -> torch.dtype:
    return FP8_GRAD if gradient else FP8


def tensor_scale(t: Tensor, gradient: bool = False) -> Tensor:
    """torchao's tensorwise scale: the FP8 type's largest value over the tensor's absolute maximum (1-element fp32)."""
    return scale_from_amax(t.abs().amax().reshape(1), gradient)


def scale_from_amax(amax: Tensor, gradient: bool = False) -> Tensor:
    return (torch.finfo(fp8_dtype(gradient)).max / amax.to(torch.float64).clamp(min=AMAX_EPS)).to(torch.float32)


def to_fp8(t: Tensor, scale: Tensor, gradient: bool = False) -> Tensor:
    top = torch.finfo(fp8_dtype(gradient)).max
    return (t.float() * scale).clamp(-top, top).to(fp8_dtype(gradient))


def gelu_mul(gate: Tensor, up: Tensor) -> Tensor:
    """GELU(tanh)(gate) x up in fp32, rounded once to the inputs' dtype (as inductor's fused kernel does)."""
    return (F.gelu(gate.float(), approximate="tanh") * up.float()).to(gate.dtype)


def gelu_mul_backward(grad: Tensor, gate: Tensor, up: Tensor) -> tuple[Tensor, Tensor]:
    """The gradients of GELU(tanh)(gate) x up with respect to gate and up, in fp32, rounded to grad's dtype."""
    a, g = gate.float(), grad.float()
    t = torch.tanh(SQRT_2_OVER_PI * (a + GELU_CUBIC * a * a * a))
    d_gelu = 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * GELU_CUBIC * a * a)
    return (g * up.float() * d_gelu).to(grad.dtype), (g * 0.5 * a * (1 + t)).to(grad.dtype)


def both_layouts(q: Tensor) -> tuple[Tensor, Tensor]:
    return q, q.t().contiguous()


def gelu_mul_backward_casts(grad, gate, up, gate_scale, up_scale) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """fp8_gelu_mul_backward_cast in torch operations (its implementation off CUDA)."""
    d_gate, d_up = gelu_mul_backward(grad, gate, up)
    return *both_layouts(to_fp8(d_gate, gate_scale, True)), *both_layouts(to_fp8(d_up, up_scale, True))


# The casts and the two amaxes of computed values as custom operators: compile keeps each as one call (its Triton
# kernel on CUDA, torch operations elsewhere) and their fake implementations give the shapes. Left to inductor, the
# GELU backward's two amaxes took three kernels that wrote both gradients in bf16 to read them again.
@torch.library.custom_op("vlabench::fp8_gelu_mul_amax", mutates_args=())
def fp8_gelu_mul_amax(gate: Tensor, up: Tensor) -> Tensor:
    """The absolute maximum of GELU(tanh)(gate) x up (as rounded to the inputs' dtype), a 1-element fp32 tensor."""
    return gelu_mul(gate, up).abs().amax().float().reshape(1)


@torch.library.custom_op("vlabench::fp8_gelu_mul_backward_amax", mutates_args=())
def fp8_gelu_mul_backward_amax(grad: Tensor, gate: Tensor, up: Tensor) -> Tensor:
    """The absolute maxima of the gate's and up's gradients of GELU(tanh)(gate) x up: a 2-element fp32 tensor."""
    return torch.stack([d.abs().amax().float() for d in gelu_mul_backward(grad, gate, up)])


@torch.library.custom_op("vlabench::fp8_cast", mutates_args=())
def fp8_cast(x: Tensor, scale: Tensor, gradient: bool) -> tuple[Tensor, Tensor]:
    """x [M, N] cast to FP8 (e5m2 for a gradient, else e4m3) with `scale`: row-major [M, N] and transposed [N, M]."""
    return both_layouts(to_fp8(x, scale, gradient))


@torch.library.custom_op("vlabench::fp8_gelu_mul_cast", mutates_args=())
def fp8_gelu_mul_cast(gate: Tensor, up: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
    """GELU(tanh)(gate) x up cast to FP8 with `scale`, row-major and transposed."""
    return both_layouts(to_fp8(gelu_mul(gate, up), scale))


@torch.library.custom_op("vlabench::fp8_gelu_mul_backward_cast", mutates_args=())
def fp8_gelu_mul_backward_cast(
    grad: Tensor, gate: Tensor, up: Tensor, gate_scale: Tensor, up_scale: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The gate's and up's gradients of GELU(tanh)(gate) x up, each cast to FP8 (e5m2) row-major and transposed."""
    return gelu_mul_backward_casts(grad, gate, up, gate_scale, up_scale)


def _fake_pair(x: Tensor, gradient: bool = False) -> tuple[Tensor, Tensor]:
    dtype = fp8_dtype(gradient)
    return x.new_empty(x.shape, dtype=dtype), x.new_empty((x.shape[1], x.shape[0]), dtype=dtype)


fp8_gelu_mul_amax.register_fake(lambda gate, up: gate.new_empty(1, dtype=torch.float32))
fp8_gelu_mul_backward_amax.register_fake(lambda grad, gate, up: grad.new_empty(2, dtype=torch.float32))
fp8_cast.register_fake(lambda x, scale, gradient: _fake_pair(x, gradient))
fp8_gelu_mul_cast.register_fake(lambda gate, up, scale: _fake_pair(gate))
fp8_gelu_mul_backward_cast.register_fake(
    lambda grad, gate, up, gs, us: (*_fake_pair(grad, True), *_fake_pair(grad, True))
)


@functools.cache
def cast_kernel():
    """The tiled cast kernel, defined on first use (triton is imported only where it runs on CUDA). With AMAX it
    stores each tile's absolute maximum of the computed value(s) instead, in q1_ptr[tile] (and q1_ptr[P + tile])."""
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    @triton.autotune(
        [triton.Config({"BM": bm, "BN": bn}, num_warps=warps) for bm, bn, warps in TILES],
        key=["M", "N", "MODE", "AMAX"],
    )
    @triton.jit
    def kernel(a_ptr, b_ptr, c_ptr, s1_ptr, s2_ptr, q1_ptr, q1t_ptr, q2_ptr, q2t_ptr, M, N, P, MODE: tl.constexpr,
               E5M2: tl.constexpr, AMAX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):  # fmt: skip
        rm = tl.program_id(0) * BM + tl.arange(0, BM)
        rn = tl.program_id(1) * BN + tl.arange(0, BN)
        mask = (rm[:, None] < M) & (rn[None, :] < N)
        rows = rm[:, None].to(tl.int64) * N + rn[None, :]  # element (m, n) in the row-major [M, N] outputs
        cols = rn[None, :].to(tl.int64) * M + rm[:, None]  # and in the transposed [N, M] ones
        top = 57344.0 if E5M2 else 448.0
        a = tl.load(a_ptr + rows, mask=mask, other=0.0).to(tl.float32)
        if MODE == 0:  # PLAIN
            v1 = a
        else:
            b = tl.load(b_ptr + rows, mask=mask, other=0.0).to(tl.float32)
            if MODE == 1:  # GELU_MUL: a = gate, b = up; tanh as torch's CUDA kernels take it (libdevice's tanhf)
                t = libdevice.tanh(0.7978845608028654 * (a + 0.044715 * a * a * a))
                v1 = (0.5 * a * (1.0 + t) * b).to(tl.bfloat16).to(tl.float32)
            else:  # GELU_BACKWARD: a = gradient of the product, b = gate, c = up
                c = tl.load(c_ptr + rows, mask=mask, other=0.0).to(tl.float32)
                t = libdevice.tanh(0.7978845608028654 * (b + 0.044715 * b * b * b))
                d_gelu = 0.5 * (1.0 + t) + 0.5 * b * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * b * b)
                v1 = (a * c * d_gelu).to(tl.bfloat16).to(tl.float32)
                v2 = (a * 0.5 * b * (1.0 + t)).to(tl.bfloat16).to(tl.float32)
        if AMAX:  # masked elements load as 0, which no maximum of absolute values exceeds
            tile = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
            tl.store(q1_ptr + tile, tl.max(tl.max(tl.abs(v1), axis=1), axis=0))
            if MODE == 2:
                tl.store(q1_ptr + P + tile, tl.max(tl.max(tl.abs(v2), axis=1), axis=0))
        else:
            if MODE == 2:
                v2 = tl.clamp(v2 * tl.load(s2_ptr), -top, top)
                q2 = v2.to(tl.float8e5) if E5M2 else v2.to(tl.float8e4nv)
                tl.store(q2_ptr + rows, q2, mask=mask)
                tl.store(q2t_ptr + cols, q2, mask=mask)
            v1 = tl.clamp(v1 * tl.load(s1_ptr), -top, top)
            q1 = v1.to(tl.float8e5) if E5M2 else v1.to(tl.float8e4nv)
            tl.store(q1_ptr + rows, q1, mask=mask)
            tl.store(q1t_ptr + cols, q1, mask=mask)

    return kernel


def _checked(inputs: list[Tensor]) -> tuple[int, int]:
    first = inputs[0]
    if first.dim() != 2 or any(not t.is_contiguous() or t.shape != first.shape for t in inputs):
        raise ValueError(
            f"fp8_mlp: the kernels take contiguous 2-D inputs of one shape; got {[t.shape for t in inputs]}"
        )
    return first.shape


def launch_amax(mode: int, inputs: list[Tensor]) -> Tensor:
    """The absolute maxima of the values the kernel computes from `inputs` (fp32, one per value: two for the GELU
    backward): each tile writes its own maximum (no atomics), then torch takes the maximum of those."""
    import triton

    m, n = _checked(inputs)
    count = 2 if mode == GELU_BACKWARD else 1
    per_value = max(triton.cdiv(m, bm) * triton.cdiv(n, bn) for bm, bn, _ in TILES)
    partial = inputs[0].new_zeros(count * per_value, dtype=torch.float32)  # tiles a larger tile leaves stay 0
    a, b, c = (inputs + [inputs[0], inputs[0]])[:3]
    grid = lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))  # noqa: E731
    cast_kernel()[grid](
        a, b, c, partial, partial, partial, partial, partial, partial, m, n, per_value, MODE=mode, E5M2=False, AMAX=True
    )
    return partial.view(count, per_value).amax(dim=1)


def launch(mode: int, inputs: list[Tensor], scales: list[Tensor], gradient: bool) -> tuple[Tensor, ...]:
    """Run the cast kernel on 2-D contiguous inputs of one shape; returns a (row-major, transposed) pair per value
    (two for the GELU backward), in e5m2 for a gradient, else e4m3."""
    import triton

    m, n = _checked(inputs)
    first = inputs[0]
    outs, dtype = [], fp8_dtype(gradient)
    pairs = 2 if mode == GELU_BACKWARD else 1
    for _ in range(pairs):
        outs += [first.new_empty((m, n), dtype=dtype), first.new_empty((n, m), dtype=dtype)]
    a, b, c = (inputs + [first, first])[:3]
    s1, s2 = (scales + scales)[:2]
    q2, q2t = outs[2:] if pairs == 2 else outs  # unused unless GELU_BACKWARD
    grid = lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))  # noqa: E731
    cast_kernel()[grid](a, b, c, s1, s2, outs[0], outs[1], q2, q2t, m, n, 0, MODE=mode, E5M2=gradient, AMAX=False)
    return tuple(outs)


@fp8_gelu_mul_amax.register_kernel("cuda")
def _(gate, up):
    return launch_amax(GELU_MUL, [gate, up])


@fp8_gelu_mul_backward_amax.register_kernel("cuda")
def _(grad, gate, up):
    return launch_amax(GELU_BACKWARD, [grad, gate, up])


@fp8_cast.register_kernel("cuda")
def _(x, scale, gradient):
    return launch(PLAIN, [x], [scale], gradient)


@fp8_gelu_mul_cast.register_kernel("cuda")
def _(gate, up, scale):
    return launch(GELU_MUL, [gate, up], [scale], False)


@fp8_gelu_mul_backward_cast.register_kernel("cuda")
def _(grad, gate, up, gate_scale, up_scale):
    return launch(GELU_BACKWARD, [grad, gate, up], [gate_scale, up_scale], True)


def fp8_mm(a: Tensor, b: Tensor, a_scale: Tensor, b_scale: Tensor, fast_accum: bool, out_dtype) -> Tensor:
    """a [M, K] row-major @ b [K, N] column-major, both FP8 with their tensorwise scales; fp32 accumulation."""
    if a.is_cuda:
        return torch._scaled_mm(
            a, b, scale_a=a_scale.reciprocal(), scale_b=b_scale.reciprocal(), out_dtype=out_dtype,
            use_fast_accum=fast_accum,
        )  # fmt: skip
    return ((a.float() / a_scale) @ (b.float() / b_scale)).to(out_dtype)


class Fp8GatedMLPFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
        lead, dtype = x.shape[:-1], x.dtype
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        scales = [tensor_scale(t) for t in (x2, w_gate, w_up, w_down)]
        x_scale, gate_scale, up_scale, down_scale = scales
        x8, x8t = fp8_cast(x2, x_scale, False)
        (wg8, wg8t), (wu8, wu8t), (wd8, wd8t) = (
            fp8_cast(w, s, False) for w, s in zip((w_gate, w_up, w_down), scales[1:])
        )
        gate = fp8_mm(x8, wg8.t(), x_scale, gate_scale, True, dtype)
        up = fp8_mm(x8, wu8.t(), x_scale, up_scale, True, dtype)
        h_scale = scale_from_amax(fp8_gelu_mul_amax(gate, up))
        h8, h8t = fp8_gelu_mul_cast(gate, up, h_scale)
        out = fp8_mm(h8, wd8.t(), h_scale, down_scale, True, dtype)
        ctx.save_for_backward(x8t, gate, up, h8t, wg8t, wu8t, wd8t, *scales, h_scale)
        ctx.x_shape = x.shape
        return out.reshape(*lead, w_down.shape[0])

    @staticmethod
    def backward(ctx, grad_out: Tensor):
        x8t, gate, up, h8t, wg8t, wu8t, wd8t, x_scale, gate_scale, up_scale, down_scale, h_scale = ctx.saved_tensors
        dtype = grad_out.dtype
        g = grad_out.reshape(-1, grad_out.shape[-1]).contiguous()
        g_scale = tensor_scale(g, True)
        g8, g8t = fp8_cast(g, g_scale, True)
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


def fp8_gated_mlp(x: Tensor, w_gate: Tensor, w_up: Tensor, w_down: Tensor) -> Tensor:
    """down(GELU(tanh)(x @ w_gate.T) * (x @ w_up.T)) with every GEMM in FP8 (tensorwise scales), forward and
    backward. x [..., width]; w_gate, w_up [mlp, width]; w_down [width, mlp]; every size a multiple of 16."""
    for name, w in (("w_gate", w_gate), ("w_up", w_up), ("w_down", w_down)):
        if w.dtype != x.dtype:
            raise ValueError(f"fp8_gated_mlp: {name} is {w.dtype} but x is {x.dtype}; they must match")
    if x.is_cuda and x.dtype != torch.bfloat16:
        raise ValueError(
            f"fp8_gated_mlp: on CUDA the kernels round GELU's values to bf16, the model's dtype; x is {x.dtype}"
        )
    return Fp8GatedMLPFunction.apply(x, w_gate, w_up, w_down)
