"""LayerNorm whose backward is one Triton kernel per call (Pi0.5's `layer_norm: triton`, for SigLIP's two
LayerNorms a layer), and the pre-LayerNorm block's residual add fused into the second one.

Why: under compile, inductor writes a LayerNorm's backward as several reduction kernels (the input gradient per
row, the weight and bias gradients as column sums over the rows, each reading the input and the output gradient
again). At SigLIP's [16,384, 1,152] (Pi0.5, batch 32, both cameras at once) they took 0.08-0.12 ms a launch on the
H200, three a layer, where one pass over the tensors the backward needs (the input, the output gradient, the
residual gradient, the input gradient written) is about 0.04 ms. Here one program takes a strip of rows: it
reads each row's input and output gradient once, writes the input gradient (plus the residual's gradient, when
the residual add is fused in), and keeps the strip's weight and bias gradient sums in registers; the strips'
sums are then added by torch (a few hundred rows of fp32).

The forward stays torch operations, so inductor fuses it with its neighbours as before; it saves the input (the
residual sum), its mean and reciprocal standard deviation. Arithmetic, as torch's CUDA LayerNorm for bf16 inputs:
statistics and the normalised value in fp32, the output rounded once to the input's dtype; the backward in fp32,
each gradient rounded once (the input gradient after the residual's gradient is added, where torch rounds the
LayerNorm's part first). Off CUDA the backward runs as torch operations (CPU tests, and the values the kernel is
held to).
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor, nn

ROW_PROGRAMS = 512  # strips of rows: at most this many programs, each its own row of weight and bias partial sums
ROW_TILES = ((1, 4), (2, 4), (2, 8), (4, 8), (4, 16), (8, 16))  # rows loaded at once, warps: autotuned per shape


def _wide(t: Tensor) -> Tensor:
    """t in fp32, or wider where it is (fp64 in the tests)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def _statistics(s: Tensor, eps: float) -> tuple[Tensor, Tensor, Tensor]:
    """fp32 (normalised s, mean, rstd) over the last dimension; mean and rstd [..., 1] for the backward."""
    sf = _wide(s)
    var, mean = torch.var_mean(sf, dim=-1, keepdim=True, correction=0)
    rstd = torch.rsqrt(var + eps)
    return (sf - mean) * rstd, mean, rstd


def _affine(normed: Tensor, weight: Tensor, bias: Tensor, dtype: torch.dtype) -> Tensor:
    return (normed * _wide(weight) + _wide(bias)).to(dtype)


class _LayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> Tensor:
        normed, mean, rstd = _statistics(x, eps)
        ctx.save_for_backward(x, weight, mean, rstd)
        return _affine(normed, weight, bias, x.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor):
        x, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = layer_norm_backward(grad, x, weight, mean, rstd, None)
        return dx, dw, db, None


class _AddLayerNorm(torch.autograd.Function):
    """(s, LayerNorm(s)) with s = x + y: the pre-LayerNorm block's residual sum and its normalised copy; both
    inputs get s's gradient plus the LayerNorm's."""

    @staticmethod
    def forward(ctx, x: Tensor, y: Tensor, weight: Tensor, bias: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        s = x + y
        normed, mean, rstd = _statistics(s, eps)
        ctx.save_for_backward(s, weight, mean, rstd)
        return s, _affine(normed, weight, bias, s.dtype)

    @staticmethod
    def backward(ctx, grad_s: Tensor, grad: Tensor):
        s, weight, mean, rstd = ctx.saved_tensors
        dx, dw, db = layer_norm_backward(grad, s, weight, mean, rstd, grad_s)
        return dx, dx, dw, db, None


def layer_norm(x: Tensor, norm: nn.LayerNorm) -> Tensor:
    """`norm(x)` with the backward in one kernel (module docstring)."""
    return _LayerNorm.apply(x, norm.weight, norm.bias, norm.eps)


def add_layer_norm(x: Tensor, y: Tensor, norm: nn.LayerNorm) -> tuple[Tensor, Tensor]:
    """(x + y, norm(x + y)), the backward of both in one kernel."""
    return _AddLayerNorm.apply(x, y, norm.weight, norm.bias, norm.eps)


def backward_in_torch(
    grad: Tensor, s: Tensor, weight: Tensor, mean: Tensor, rstd: Tensor, grad_res: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """The LayerNorm's input, weight and bias gradients (plus `grad_res` on the input's) in torch operations."""
    g = _wide(grad)
    xhat = (_wide(s) - mean) * rstd
    wdy = g * _wide(weight)
    c1 = (xhat * wdy).mean(-1, keepdim=True)
    c2 = wdy.mean(-1, keepdim=True)
    dx = (wdy - xhat * c1 - c2) * rstd
    if grad_res is not None:
        dx = dx + _wide(grad_res)
    rows = tuple(range(s.dim() - 1))
    return dx.to(s.dtype), (g * xhat).sum(rows).to(weight.dtype), g.sum(rows).to(weight.dtype)


@torch.library.custom_op("vlabench::layer_norm_backward", mutates_args=())
def layer_norm_backward(
    grad: Tensor, s: Tensor, weight: Tensor, mean: Tensor, rstd: Tensor, grad_res: Tensor | None
) -> tuple[Tensor, Tensor, Tensor]:
    """(d s, d weight, d bias) of LayerNorm(s) given its output's gradient, the saved mean and rstd ([..., 1]
    fp32), `grad_res` added to d s: the Triton kernel on CUDA, torch operations elsewhere."""
    if not s.is_cuda:
        dx, dw, db = backward_in_torch(grad, s, weight, mean, rstd, grad_res)
        return dx.contiguous(), dw, db
    grad, s = grad.contiguous(), s.contiguous()
    grad_res = grad_res.contiguous() if grad_res is not None else None
    n = s.shape[-1]
    m = s.numel() // n
    rows = triton_rows(m)
    programs = -(-m // rows)
    dx = torch.empty_like(s)
    partials = torch.empty((2, programs, n), device=s.device, dtype=torch.float32)
    block = 1 << (n - 1).bit_length()
    backward_kernel()[(programs,)](
        grad, s, weight, mean, rstd, grad_res if grad_res is not None else grad, dx, partials, m, n,
        ROWS=rows, HAS_RES=grad_res is not None, BN=block,
    )  # fmt: skip
    sums = partials.sum(1)
    return dx, sums[0].to(weight.dtype), sums[1].to(weight.dtype)


# contiguous outputs whatever the input's layout (SigLIP's first layer reads the patch embedding's transposed view)
layer_norm_backward.register_fake(
    lambda grad, s, weight, mean, rstd, grad_res: (
        s.new_empty(s.shape),
        weight.new_empty(weight.shape),
        weight.new_empty(weight.shape),
    )
)


def triton_rows(m: int) -> int:
    """Rows per program: at most ROW_PROGRAMS programs, a multiple of every tile's row count (8)."""
    per_program = -(-m // ROW_PROGRAMS)
    return max(8, -(-per_program // 8) * 8)


@functools.cache
def backward_kernel(tiles: tuple[tuple[int, int], ...] = ROW_TILES):
    """The backward kernel, autotuned over `tiles` (rows loaded at once, warps); defined on first use (triton is
    imported only where it runs on CUDA). Program p takes rows [p * ROWS, (p + 1) * ROWS) and writes its weight
    and bias gradient sums to partials[0, p] and partials[1, p]; every tiling writes every program's row, so the
    autotuner's trial runs leave nothing behind."""
    import triton
    import triton.language as tl

    @triton.autotune([triton.Config({"BM": bm}, num_warps=w) for bm, w in tiles], key=["M", "N", "HAS_RES"])
    @triton.jit
    def kernel(g_ptr, s_ptr, w_ptr, mean_ptr, rstd_ptr, res_ptr, dx_ptr, part_ptr, M, N,
               ROWS: tl.constexpr, HAS_RES: tl.constexpr, BN: tl.constexpr, BM: tl.constexpr):  # fmt: skip
        pid = tl.program_id(0)
        cols = tl.arange(0, BN)
        cmask = cols < N
        w = tl.load(w_ptr + cols, mask=cmask, other=0.0).to(tl.float32)
        dw = tl.zeros([BN], dtype=tl.float32)
        db = tl.zeros([BN], dtype=tl.float32)
        for start in range(0, ROWS, BM):  # rows past M are masked
            rows = pid * ROWS + start + tl.arange(0, BM)
            rmask = rows < M
            mask = rmask[:, None] & cmask[None, :]
            offs = rows[:, None].to(tl.int64) * N + cols[None, :]
            g = tl.load(g_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            x = tl.load(s_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(mean_ptr + rows, mask=rmask, other=0.0)
            rstd = tl.load(rstd_ptr + rows, mask=rmask, other=0.0)
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
            wdy = g * w[None, :]
            c1 = tl.sum(xhat * wdy, axis=1) / N
            c2 = tl.sum(wdy, axis=1) / N
            dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
            if HAS_RES:
                dx += tl.load(res_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=mask)
            dw += tl.sum(g * xhat, axis=0)
            db += tl.sum(g, axis=0)
        tl.store(part_ptr + pid * N + cols, dw, mask=cmask)
        tl.store(part_ptr + (tl.num_programs(0) + pid) * N + cols, db, mask=cmask)

    return kernel


__all__ = ["add_layer_norm", "backward_in_torch", "layer_norm", "layer_norm_backward"]
