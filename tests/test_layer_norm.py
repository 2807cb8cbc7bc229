"""SigLIP's LayerNorms with their backward in one kernel each (models/layer_norm.py, Pi0.5's `layer_norm: triton`):
on the CPU, the forward and every gradient against torch's LayerNorm and autograd (fp64 and fp32 to rounding;
bf16 no further from fp64 than torch's own), a SigLIP layer with the switch against one without, compiled against
eager, and the option reaching every SigLIP layer; on a GPU with triton, the kernel against the torch operations it
replaces, at odd shapes and SigLIP's, with and without the residual's gradient."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from triton_ready import needs_gpu

from models.layer_norm import add_layer_norm, backward_in_torch, layer_norm, layer_norm_backward
from models.siglip import VisionLayer


class Shape:
    width, heads, mlp, eps = 64, 4, 96, 1e-6


def sdpa(q, k, v, kind):
    return F.scaled_dot_product_attention(q, k, v)


def _norm(width: int, dtype, device="cpu") -> nn.LayerNorm:
    torch.manual_seed(3)
    norm = nn.LayerNorm(width, eps=1e-6).to(device, dtype)
    nn.init.normal_(norm.weight, 1.0, 0.3)
    nn.init.normal_(norm.bias, 0.0, 0.3)
    return norm


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 2e-5)])
def test_layer_norm_and_its_gradients_are_torchs(dtype, tol):
    norm = _norm(48, dtype)
    x = (torch.randn(5, 7, 48, dtype=dtype) * 3 + 1).requires_grad_()
    y = torch.randn(5, 7, 48, dtype=dtype).requires_grad_()
    g_s, g = torch.randn(5, 7, 48, dtype=dtype), torch.randn(5, 7, 48, dtype=dtype)

    s_ref = x + y
    expected = torch.autograd.grad((s_ref * g_s).sum() + (norm(s_ref) * g).sum(), (x, y, norm.weight, norm.bias))
    s, out = add_layer_norm(x, y, norm)
    got = torch.autograd.grad((s * g_s).sum() + (out * g).sum(), (x, y, norm.weight, norm.bias))
    torch.testing.assert_close(out, norm(s_ref), rtol=tol, atol=tol)
    for e, o in zip(expected, got):
        torch.testing.assert_close(o, e, rtol=tol, atol=tol * 10)

    expected = torch.autograd.grad((norm(x) * g).sum(), (x, norm.weight, norm.bias))
    got = torch.autograd.grad((layer_norm(x, norm) * g).sum(), (x, norm.weight, norm.bias))
    for e, o in zip(expected, got):
        torch.testing.assert_close(o, e, rtol=tol, atol=tol * 10)


def _layers(dtype):
    torch.manual_seed(1)
    plain = VisionLayer(Shape, sdpa, "sdpa").to(dtype)
    for p in plain.parameters():
        p.data.normal_(0, 0.5)
    fused = copy.deepcopy(plain)
    fused.norm_kernels = True
    return plain, fused


def _run(layer, x, g):
    x = x.clone().requires_grad_()
    out = layer(x)
    out.backward(g.to(out.dtype))
    return out.double(), x.grad.double(), {n: p.grad.double() for n, p in layer.named_parameters()}


def test_a_siglip_layer_with_the_kernels_is_the_same_layer():
    plain, fused = _layers(torch.float64)
    x, g = torch.randn(3, 10, 64, dtype=torch.float64) * 2 + 1, torch.randn(3, 10, 64, dtype=torch.float64)
    (o1, dx1, p1), (o2, dx2, p2) = _run(plain, x, g), _run(fused, x, g)
    torch.testing.assert_close(o2, o1, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dx2, dx1, rtol=1e-10, atol=1e-10)
    assert p1.keys() == p2.keys()
    for name in p1:
        torch.testing.assert_close(p2[name], p1[name], rtol=1e-10, atol=1e-10, msg=name)


def test_in_bf16_the_kernels_are_no_further_from_fp64_than_torchs_layer_norm():
    plain, fused = _layers(torch.bfloat16)
    exact = copy.deepcopy(plain).double()
    x, g = (torch.randn(3, 10, 64) * 2 + 1).bfloat16(), torch.randn(3, 10, 64).bfloat16()
    ref = _run(exact, x.double(), g.double())
    for name in ("norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"):
        errors = [(run[2][name] - ref[2][name]).abs().max().item() for run in (_run(plain, x, g), _run(fused, x, g))]
        assert errors[1] <= 1.5 * errors[0] + 1e-2, (name, errors)
    errors = [(run[1] - ref[1]).abs().max().item() for run in (_run(plain, x, g), _run(fused, x, g))]
    assert errors[1] <= 1.5 * errors[0] + 1e-2, errors


def _compiled_matches_eager(layout: str, device: str, backend: str, tol: float) -> None:
    plain, fused = _layers(torch.float32)
    fused = fused.to(device)
    compiled = copy.deepcopy(fused)
    compiled.compile(backend=backend, fullgraph=True)
    x, g = torch.randn(2, 9, 64, device=device), torch.randn(2, 9, 64, device=device)
    if layout == "transposed":
        x = torch.randn(2, 64, 9, device=device).transpose(1, 2)
    for a, b in zip(_run(fused, x, g)[:2], _run(compiled, x, g)[:2]):
        torch.testing.assert_close(b, a, rtol=tol, atol=tol)


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_compiled_layer_matches_eager(layout):
    """Compiled as the per-layer unit is; SigLIP's first layer reads the patch embedding's transposed view."""
    _compiled_matches_eager(layout, "cpu", "aot_eager", 1e-6)


def test_the_option_sets_every_siglip_layer_and_the_tiny_model_trains_the_same():
    from models.pi05 import FAMILY, parse_options
    from models.workload import Workload

    workload = Workload(batch_size=2, cameras=2, text_tokens=8, action_horizon=4, seed=0, dtype="fp32")
    losses, grads = [], []
    for options in ({}, {"layer_norm": "triton"}):
        model = FAMILY.build("tiny", parse_options(options), workload, "cpu", torch.float64, 0).model
        layers = [m for m in model.modules() if isinstance(m, VisionLayer)]  # inside openpi's recompute wrappers
        assert layers and all(layer.norm_kernels == bool(options) for layer in layers)
        batch = FAMILY.make_batches("tiny", workload, 1, "cpu", torch.float64, 0)[0]
        loss = model.loss(batch)
        loss.backward()
        losses.append(loss.detach())
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-12, atol=1e-12)
    assert grads[0].keys() == grads[1].keys() and any("norm1" in n for n in grads[0])
    for name in grads[0]:
        torch.testing.assert_close(grads[1][name], grads[0][name], rtol=1e-9, atol=1e-10, msg=name)


def test_the_backward_in_torch_adds_the_residual_gradient():
    s, g, res = torch.randn(6, 32, dtype=torch.float64), torch.randn(6, 32, dtype=torch.float64), torch.ones(6, 32)
    w = torch.randn(32, dtype=torch.float64)
    var, mean = torch.var_mean(s, -1, keepdim=True, correction=0)
    rstd = torch.rsqrt(var + 1e-6)
    without = backward_in_torch(g, s, w, mean, rstd, None)
    with_res = backward_in_torch(g, s, w, mean, rstd, res.double())
    torch.testing.assert_close(with_res[0], without[0] + 1)
    torch.testing.assert_close(with_res[1:], without[1:])


@needs_gpu
@pytest.mark.parametrize("rows, width", [(37, 48), (1000, 200), (16384, 1152), (3, 2048)])
@pytest.mark.parametrize("residual", [False, True])
def test_triton_backward_equals_the_torch_operations(rows, width, residual):
    torch.manual_seed(0)
    s = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16) * 2 + 0.5
    g = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    res = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16) if residual else None
    w = torch.randn(width, device="cuda", dtype=torch.bfloat16)
    var, mean = torch.var_mean(s.float(), -1, keepdim=True, correction=0)
    rstd = torch.rsqrt(var + 1e-6)
    got = layer_norm_backward(g, s, w, mean, rstd, res)
    expected = backward_in_torch(g, s, w, mean, rstd, res)
    for o, e, name in zip(got, expected, ("input", "weight", "bias")):
        assert o.dtype == e.dtype and o.shape == e.shape, name
        # one bf16 rounding of the same fp32 value, the sums over rows in another order
        torch.testing.assert_close(
            o.float(), e.float(), rtol=1.6e-2, atol=1e-2 * (1 + e.float().abs().max().item()) ** 0.5, msg=name
        )


@needs_gpu
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_inductor_compiled_layer_matches_eager_on_the_gpu(layout):
    # inductor checks each custom operator's output strides against its fake implementation's
    _compiled_matches_eager(layout, "cuda", "inductor", 1e-4)
