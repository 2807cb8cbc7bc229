"""The FP8 casts of the MLP functions in models/fp8_mlp.py: torchao's tensorwise numerics, as torch operations (off
CUDA, and the reference the tests hold the kernels to) and as one tiled Triton kernel (on CUDA), registered as
custom operators so that compile keeps each one call and a CUDA graph captures it.

Why a kernel: an FP8 GEMM on Hopper reads both operands with the reduced dimension contiguous, so the weight-gradient
GEMM (reduced over tokens) needs token-major copies of the output gradient and of the input. Under compile, inductor
wrote Gemma's GELU backward's two gradients in FP8 row-major and transposed from one pointwise kernel that took
2.2 ms per layer on the H200, against 0.87 ms for bf16's GELU backward, and split their amaxes into three more
kernels that wrote both gradients in bf16 to read them back. Here each cast is one program per tile (32-128 x 64-128
elements, autotuned per shape at the first call): it loads the tile once, computes the value (plain, an activation
or its backward), and stores it cast to FP8 both ways, Triton staging the transposed store through shared memory so
both stores are coalesced. The same kernel, in its amax mode, writes each tile's absolute maximum of the computed
values (torch then takes the maximum over the tiles) and, for the biased GELU's backward, each tile's column sums
(the bias gradient).

What a kernel computes (MODE), in fp32 from bf16 inputs, each computed value rounded to bf16 as torch's eager kernels
round it before torchao casts it:
- PLAIN: the input.
- GELU_MUL (Gemma): GELU(tanh)(gate) x up. GELU_BACKWARD: its gradients with respect to gate and up.
- GELU (SigLIP): GELU(tanh)(y + bias), y a GEMM's output and bias its row vector (the add rounded to bf16, as
  torchao's Float8Linear adds the bias in the output's dtype). GELU_GRAD: the gradient of that with respect to y.

Numerics, as torchao's tensorwise recipe: e4m3 for weights and activations, e5m2 for gradients; scale = the type's
largest value / amax (fp32, amax at least 1e-12), value x scale clamped to that largest value and rounded.
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

PLAIN, GELU_MUL, GELU_BACKWARD, GELU, GELU_GRAD = 0, 1, 2, 3, 4  # what a kernel computes before casting
# the kernel's tiles (rows, columns, warps), autotuned per shape: rows are contiguous in the transposed outputs,
# columns in the row-major ones
TILES = ((64, 128, 8), (128, 128, 8), (128, 64, 4), (64, 64, 4), (32, 128, 4))
SUM_ROWS = 32  # the column sums' row granularity: every tile's row count is a multiple of it


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


def both_layouts(q: Tensor) -> tuple[Tensor, Tensor]:
    return q, q.t().contiguous()


def _gelu_parts(x: Tensor) -> tuple[Tensor, Tensor]:
    """GELU(tanh)'s tanh term and derivative at x (fp32)."""
    t = torch.tanh(SQRT_2_OVER_PI * (x + GELU_CUBIC * x * x * x))
    return t, 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * SQRT_2_OVER_PI * (1 + 3 * GELU_CUBIC * x * x)


def gelu_mul(gate: Tensor, up: Tensor) -> Tensor:
    """GELU(tanh)(gate) x up in fp32, rounded once to the inputs' dtype (as inductor's fused kernel does)."""
    return (F.gelu(gate.float(), approximate="tanh") * up.float()).to(gate.dtype)


def gelu_mul_backward(grad: Tensor, gate: Tensor, up: Tensor) -> tuple[Tensor, Tensor]:
    """The gradients of GELU(tanh)(gate) x up with respect to gate and up, in fp32, rounded to grad's dtype."""
    a, g = gate.float(), grad.float()
    t, d_gelu = _gelu_parts(a)
    return (g * up.float() * d_gelu).to(grad.dtype), (g * 0.5 * a * (1 + t)).to(grad.dtype)


def gelu_biased(y: Tensor, bias: Tensor) -> Tensor:
    """GELU(tanh)(y + bias), the add rounded to y's dtype, GELU computed in fp32 and rounded to it."""
    return F.gelu((y + bias.to(y.dtype)).float(), approximate="tanh").to(y.dtype)


def gelu_biased_grad(grad: Tensor, y: Tensor, bias: Tensor) -> Tensor:
    """The gradient of GELU(tanh)(y + bias) with respect to y, in fp32, rounded to grad's dtype."""
    _, d_gelu = _gelu_parts((y + bias.to(y.dtype)).float())
    return (grad.float() * d_gelu).to(grad.dtype)


def gelu_mul_backward_casts(grad, gate, up, gate_scale, up_scale) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """fp8_gelu_mul_backward_cast in torch operations (its implementation off CUDA)."""
    d_gate, d_up = gelu_mul_backward(grad, gate, up)
    return *both_layouts(to_fp8(d_gate, gate_scale, True)), *both_layouts(to_fp8(d_up, up_scale, True))


# The casts and the amaxes of computed values as custom operators: compile keeps each as one call (its Triton kernel
# on CUDA, torch operations elsewhere) and their fake implementations give the shapes.
@torch.library.custom_op("vlabench::fp8_gelu_mul_amax", mutates_args=())
def fp8_gelu_mul_amax(gate: Tensor, up: Tensor) -> Tensor:
    """The absolute maximum of GELU(tanh)(gate) x up (as rounded to the inputs' dtype), a 1-element fp32 tensor."""
    return gelu_mul(gate, up).abs().amax().float().reshape(1)


@torch.library.custom_op("vlabench::fp8_gelu_mul_backward_amax", mutates_args=())
def fp8_gelu_mul_backward_amax(grad: Tensor, gate: Tensor, up: Tensor) -> Tensor:
    """The absolute maxima of the gate's and up's gradients of GELU(tanh)(gate) x up: a 2-element fp32 tensor."""
    return torch.stack([d.abs().amax().float() for d in gelu_mul_backward(grad, gate, up)])


@torch.library.custom_op("vlabench::fp8_gelu_amax", mutates_args=())
def fp8_gelu_amax(y: Tensor, bias: Tensor) -> Tensor:
    """The absolute maximum of GELU(tanh)(y + bias), a 1-element fp32 tensor."""
    return gelu_biased(y, bias).abs().amax().float().reshape(1)


@torch.library.custom_op("vlabench::fp8_gelu_grad_amax_sum", mutates_args=())
def fp8_gelu_grad_amax_sum(grad: Tensor, y: Tensor, bias: Tensor) -> tuple[Tensor, Tensor]:
    """The gradient of GELU(tanh)(y + bias) with respect to y: its absolute maximum (1-element fp32) and its sum
    over rows (fp32, the bias gradient)."""
    d = gelu_biased_grad(grad, y, bias).float()
    return d.abs().amax().reshape(1), d.sum(0)


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


@torch.library.custom_op("vlabench::fp8_gelu_cast", mutates_args=())
def fp8_gelu_cast(y: Tensor, bias: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
    """GELU(tanh)(y + bias) cast to FP8 (e4m3) with `scale`, row-major and transposed."""
    return both_layouts(to_fp8(gelu_biased(y, bias), scale))


@torch.library.custom_op("vlabench::fp8_gelu_grad_cast", mutates_args=())
def fp8_gelu_grad_cast(grad: Tensor, y: Tensor, bias: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
    """The gradient of GELU(tanh)(y + bias) with respect to y cast to FP8 (e5m2) with `scale`, both layouts."""
    return both_layouts(to_fp8(gelu_biased_grad(grad, y, bias), scale, True))


def _fake_pair(x: Tensor, gradient: bool = False) -> tuple[Tensor, Tensor]:
    dtype = fp8_dtype(gradient)
    return x.new_empty(x.shape, dtype=dtype), x.new_empty((x.shape[1], x.shape[0]), dtype=dtype)


def _fake_amax(x: Tensor, count: int = 1) -> Tensor:
    return x.new_empty(count, dtype=torch.float32)


fp8_gelu_mul_amax.register_fake(lambda gate, up: _fake_amax(gate))
fp8_gelu_mul_backward_amax.register_fake(lambda grad, gate, up: _fake_amax(grad, 2))
fp8_gelu_amax.register_fake(lambda y, bias: _fake_amax(y))
fp8_gelu_grad_amax_sum.register_fake(lambda grad, y, bias: (_fake_amax(y), _fake_amax(y, y.shape[1])))
fp8_cast.register_fake(lambda x, scale, gradient: _fake_pair(x, gradient))
fp8_gelu_mul_cast.register_fake(lambda gate, up, scale: _fake_pair(gate))
fp8_gelu_mul_backward_cast.register_fake(
    lambda grad, gate, up, gs, us: (*_fake_pair(grad, True), *_fake_pair(grad, True))
)
fp8_gelu_cast.register_fake(lambda y, bias, scale: _fake_pair(y))
fp8_gelu_grad_cast.register_fake(lambda grad, y, bias, scale: _fake_pair(grad, True))


@functools.cache
def cast_kernel(tiles: tuple[tuple[int, int, int], ...] = TILES):
    """The tiled cast kernel autotuned over `tiles` (rows, columns, warps), defined on first use (triton is imported
    only where it runs on CUDA). Inputs a, b, c and the bias by MODE (module docstring): PLAIN a; GELU_MUL gate a,
    up b; GELU_BACKWARD gradient a, gate b, up c; GELU GEMM output a; GELU_GRAD gradient a, GEMM output b. With AMAX
    it stores each tile's absolute maximum of the computed value(s) in q1_ptr[tile] (and q1_ptr[P + tile]) instead,
    and for GELU_GRAD the tile's column sums in q2_ptr, in row tile_row * BM / SUM_ROWS, with zeros in the tile's
    other BM / SUM_ROWS - 1 rows: each tiling the autotuner benchmarks then overwrites every row any other tiling
    wrote."""
    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    @triton.autotune(
        [triton.Config({"BM": bm, "BN": bn}, num_warps=warps) for bm, bn, warps in tiles],
        key=["M", "N", "MODE", "AMAX"],
    )
    @triton.jit
    def kernel(a_ptr, b_ptr, c_ptr, bias_ptr, s1_ptr, s2_ptr, q1_ptr, q1t_ptr, q2_ptr, q2t_ptr, M, N, P,
               MODE: tl.constexpr, E5M2: tl.constexpr, AMAX: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr):  # fmt: skip
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
            if MODE == 1 or MODE == 3:  # GELU's input: a (GELU_MUL's gate, GELU's GEMM output) or b
                x = a
            else:
                x = tl.load(b_ptr + rows, mask=mask, other=0.0).to(tl.float32)
            if MODE >= 3:  # the bias, added as torch adds it in bf16
                bias = tl.load(bias_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
                x = (x + bias[None, :]).to(tl.bfloat16).to(tl.float32)
            # tanh as torch's CUDA kernels take it (libdevice's tanhf)
            t = libdevice.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))
            if MODE == 1:  # GELU_MUL: times up (b)
                up = tl.load(b_ptr + rows, mask=mask, other=0.0).to(tl.float32)
                v1 = (0.5 * x * (1.0 + t) * up).to(tl.bfloat16).to(tl.float32)
            elif MODE == 3:  # GELU
                v1 = (0.5 * x * (1.0 + t)).to(tl.bfloat16).to(tl.float32)
            else:
                d_gelu = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * 0.7978845608028654 * (1.0 + 0.134145 * x * x)
                if MODE == 2:  # GELU_BACKWARD: a = gradient of the product, c = up
                    up = tl.load(c_ptr + rows, mask=mask, other=0.0).to(tl.float32)
                    v1 = (a * up * d_gelu).to(tl.bfloat16).to(tl.float32)
                    v2 = (a * 0.5 * x * (1.0 + t)).to(tl.bfloat16).to(tl.float32)
                else:  # GELU_GRAD: a = gradient of GELU's output
                    v1 = (a * d_gelu).to(tl.bfloat16).to(tl.float32)
        if AMAX:
            v1 = tl.where(mask, v1, 0.0)  # GELU of a masked element's bias is not 0
            tile = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
            tl.store(q1_ptr + tile, tl.max(tl.max(tl.abs(v1), axis=1), axis=0))
            if MODE == 2:
                tl.store(q1_ptr + P + tile, tl.max(tl.max(tl.abs(v2), axis=1), axis=0))
            if MODE == 4:
                k = tl.arange(0, BM // 32)  # SUM_ROWS
                sums = tl.where(k[:, None] == 0, tl.sum(v1, axis=0)[None, :], 0.0)
                at = (tl.program_id(0) * (BM // 32) + k)[:, None].to(tl.int64) * N + rn[None, :]
                tl.store(q2_ptr + at, sums, mask=rn[None, :] < N)
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


def _checked(inputs: list[Tensor], bias: Tensor | None) -> tuple[int, int]:
    first = inputs[0]
    if first.dim() != 2 or any(not t.is_contiguous() or t.shape != first.shape for t in inputs):
        raise ValueError(
            f"fp8 casts: the kernels take contiguous 2-D inputs of one shape; got {[t.shape for t in inputs]}"
        )
    if bias is not None and (bias.shape != first.shape[1:] or not bias.is_contiguous()):
        raise ValueError(f"fp8 casts: the bias must be a contiguous row of {first.shape[1]}; got {tuple(bias.shape)}")
    return first.shape


def _operands(inputs: list[Tensor], bias: Tensor | None) -> list[Tensor]:
    """a, b, c and the bias pointers (the first input where a mode reads none)."""
    first = inputs[0]
    return (inputs + [first, first])[:3] + [first if bias is None else bias]


def _run_amax(mode: int, inputs: list[Tensor], bias: Tensor | None, tiles=TILES) -> tuple[Tensor, Tensor | None]:
    """The kernel's amax mode: (the amaxes, one per computed value; the column sums for GELU_GRAD, else None)."""
    import triton

    m, n = _checked(inputs, bias)
    count = 2 if mode == GELU_BACKWARD else 1
    per_value = max(triton.cdiv(m, bm) * triton.cdiv(n, bn) for bm, bn, _ in tiles)
    partial = inputs[0].new_zeros(count * per_value, dtype=torch.float32)  # tiles a larger tile leaves stay 0
    sums = partial  # unused unless GELU_GRAD
    if mode == GELU_GRAD:
        tallest = max(bm for bm, _, _ in tiles)
        sums = inputs[0].new_zeros((triton.cdiv(m, tallest) * (tallest // SUM_ROWS), n), dtype=torch.float32)
    grid = lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))  # noqa: E731
    cast_kernel(tiles)[grid](
        *_operands(inputs, bias), partial, partial, partial, partial, sums, sums, m, n, per_value,
        MODE=mode, E5M2=False, AMAX=True,
    )  # fmt: skip
    return partial.view(count, per_value).amax(dim=1), sums.sum(dim=0) if mode == GELU_GRAD else None


def launch_amax(mode: int, inputs: list[Tensor], bias: Tensor | None = None, tiles=TILES) -> Tensor:
    """The absolute maxima of the values the kernel computes from `inputs` (fp32, one per value: two for the GELU
    backward): each tile writes its own maximum (no atomics), then torch takes the maximum of those."""
    return _run_amax(mode, inputs, bias, tiles)[0]


def launch_gelu_grad_amax_sum(grad: Tensor, y: Tensor, bias: Tensor, tiles=TILES) -> tuple[Tensor, Tensor]:
    """GELU_GRAD's amax (1-element fp32) and its column sums (fp32 [N]: each tile's, then torch's over the tiles)."""
    return _run_amax(GELU_GRAD, [grad, y], bias, tiles)


def launch(
    mode: int, inputs: list[Tensor], scales: list[Tensor], gradient: bool, bias: Tensor | None = None, tiles=TILES
):
    """Run the cast kernel on 2-D contiguous inputs of one shape; returns a (row-major, transposed) pair per value
    (two for the GELU backward), in e5m2 for a gradient, else e4m3. `tiles`: the tilings autotuned over."""
    import triton

    m, n = _checked(inputs, bias)
    first = inputs[0]
    outs, dtype = [], fp8_dtype(gradient)
    pairs = 2 if mode == GELU_BACKWARD else 1
    for _ in range(pairs):
        outs += [first.new_empty((m, n), dtype=dtype), first.new_empty((n, m), dtype=dtype)]
    s1, s2 = (scales + scales)[:2]
    q2, q2t = outs[2:] if pairs == 2 else outs  # unused unless GELU_BACKWARD
    grid = lambda meta: (triton.cdiv(m, meta["BM"]), triton.cdiv(n, meta["BN"]))  # noqa: E731
    cast_kernel(tiles)[grid](
        *_operands(inputs, bias), s1, s2, outs[0], outs[1], q2, q2t, m, n, 0, MODE=mode, E5M2=gradient, AMAX=False
    )
    return tuple(outs)


@fp8_gelu_mul_amax.register_kernel("cuda")
def _(gate, up):
    return launch_amax(GELU_MUL, [gate, up])


@fp8_gelu_mul_backward_amax.register_kernel("cuda")
def _(grad, gate, up):
    return launch_amax(GELU_BACKWARD, [grad, gate, up])


@fp8_gelu_amax.register_kernel("cuda")
def _(y, bias):
    return launch_amax(GELU, [y], bias)


@fp8_gelu_grad_amax_sum.register_kernel("cuda")
def _(grad, y, bias):
    return launch_gelu_grad_amax_sum(grad, y, bias)


@fp8_cast.register_kernel("cuda")
def _(x, scale, gradient):
    return launch(PLAIN, [x], [scale], gradient)


@fp8_gelu_mul_cast.register_kernel("cuda")
def _(gate, up, scale):
    return launch(GELU_MUL, [gate, up], [scale], False)


@fp8_gelu_mul_backward_cast.register_kernel("cuda")
def _(grad, gate, up, gate_scale, up_scale):
    return launch(GELU_BACKWARD, [grad, gate, up], [gate_scale, up_scale], True)


@fp8_gelu_cast.register_kernel("cuda")
def _(y, bias, scale):
    return launch(GELU, [y], [scale], False, bias)


@fp8_gelu_grad_cast.register_kernel("cuda")
def _(grad, y, bias, scale):
    return launch(GELU_GRAD, [grad, y], [scale], True, bias)
