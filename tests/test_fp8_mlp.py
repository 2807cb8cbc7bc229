"""The FP8 MLP functions (models/fp8_mlp.py: Gemma's gated MLP, Pi0.5's `fp8_mlp: triton`; SigLIP's biased MLP,
`fp8_vision_mlp: triton`) and their casts (models/fp8_casts.py): on the CPU, torchao's tensorwise float8 arithmetic
to the bit (forward and every gradient), the casts' layouts and dtypes, compiled functions against eager ones, and
the options' switches and refusals; on a GPU with triton, the Triton cast kernels against the torch operations they
replace, and the functions against torchao's Float8Linear MLPs with real FP8 GEMMs, eager and replayed from a CUDA
graph."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn
from triton_ready import needs_gpu

from models.fp8_casts import (
    FP8,
    FP8_GRAD,
    GELU,
    GELU_BACKWARD,
    GELU_GRAD,
    GELU_MUL,
    PLAIN,
    both_layouts,
    fp8_cast,
    fp8_gelu_amax,
    fp8_gelu_cast,
    fp8_gelu_grad_amax_sum,
    fp8_gelu_grad_cast,
    fp8_gelu_mul_amax,
    fp8_gelu_mul_backward_amax,
    fp8_gelu_mul_backward_cast,
    fp8_gelu_mul_cast,
    gelu_biased,
    gelu_biased_grad,
    gelu_mul,
    gelu_mul_backward,
    launch,
    launch_amax,
    launch_gelu_grad_amax_sum,
    tensor_scale,
    to_fp8,
)
from models.fp8_mlp import fp8_bias_gelu_mlp, fp8_gated_mlp
from models.pi05 import FAMILY, parse_options
from models.pi05.config import TINY, GemmaConfig, VisionConfig
from models.pi05.model import GemmaMLP, Pi05Model
from models.pi05.techniques import apply_options
from models.siglip import VisionMLP


class Holder(nn.Module):
    """An MLP under a module (apply_fp8 converts the linears inside one)."""

    def __init__(self, mlp: nn.Module):
        super().__init__()
        self.mlp = mlp

    def forward(self, x):
        return self.mlp(x)


def _gated(width: int, mlp: int) -> Holder:
    return Holder(GemmaMLP(GemmaConfig(width=width, layers=1, mlp=mlp)))


def _torchao_copy(plain: Holder, make, emulate: bool) -> Holder:
    """A torchao Float8Linear copy of `plain`, made by `make()` (emulate: FP8 casts, high-precision GEMMs)."""
    from models.fp8 import apply_fp8

    weight = next(plain.parameters())
    converted = make().to(weight.device, weight.dtype)
    converted.load_state_dict(plain.state_dict())
    linears = [m for m in converted.modules() if type(m) is nn.Linear]
    assert len(apply_fp8(converted, "tensorwise", min_features=16, emulate=emulate)) == len(linears)
    return converted


def _pair(width=64, mlp=128, dtype=torch.float32, device="cpu", emulate=True):
    """A plain gated MLP and a torchao Float8Linear copy of it."""
    torch.manual_seed(0)
    plain = _gated(width, mlp).to(device, dtype)
    return plain, _torchao_copy(plain, lambda: _gated(width, mlp), emulate)


def _outputs(fn, mlp: nn.Module, x: torch.Tensor, grad: torch.Tensor) -> list[torch.Tensor]:
    """fn(x) and the gradients of x and of the MLP's parameters (in their order) for the output gradient `grad`."""
    for p in mlp.parameters():
        p.grad = None
    x = x.clone().requires_grad_()
    out = fn(x)
    out.backward(grad)
    return [out.detach(), x.grad] + [p.grad for p in mlp.parameters()]


def _ours(mlp: GemmaMLP):
    return lambda x: fp8_gated_mlp(x, mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight)


def test_matches_torchao_tensorwise_float8_to_the_bit_forward_and_backward():
    pytest.importorskip("torchao")
    plain, converted = _pair()
    torch.manual_seed(1)
    x, grad = torch.randn(3, 40, 64), torch.randn(3, 40, 64)
    ours = _outputs(_ours(plain.mlp), plain.mlp, x, grad)
    torchao = _outputs(converted, converted.mlp, x, grad)
    exact = _outputs(plain, plain.mlp, x, grad)
    for name, a, b, ref in zip(["out", "x", "gate", "up", "down"], ours, torchao, exact):
        assert a.shape == b.shape and torch.equal(a, b), name
        # and it is FP8 arithmetic, not the fp32 MLP: e4m3/e5m2 rounding leaves a few percent
        err = ((a - ref).norm() / ref.norm()).item()
        assert 1e-3 < err < 0.2, (name, err)


def test_the_casts_write_both_layouts_in_the_gemms_dtypes():
    torch.manual_seed(0)
    x, gate, up = (torch.randn(24, 40, dtype=torch.bfloat16) for _ in range(3))
    scale = tensor_scale(x)
    assert scale.dtype == torch.float32 and scale.shape == (1,)
    assert scale.item() == pytest.approx(448.0 / x.abs().max().float().item())
    assert tensor_scale(x, gradient=True).item() == pytest.approx(57344.0 / x.abs().max().float().item())
    for gradient, dtype in ((False, FP8), (True, FP8_GRAD)):
        q, qt = fp8_cast(x, scale, gradient)
        assert q.dtype == qt.dtype == dtype and q.shape == (24, 40) and qt.shape == (40, 24) and qt.is_contiguous()
        assert torch.equal(qt.t().float(), q.float())
    q, qt = fp8_gelu_mul_cast(gate, up, scale)
    assert q.dtype == FP8 and torch.equal(q.float(), to_fp8(gelu_mul(gate, up), scale).float())
    d_gate, d_up = gelu_mul_backward(x, gate, up)
    g_scale, u_scale = tensor_scale(d_gate, True), tensor_scale(d_up, True)
    qg, qgt, qu, qut = fp8_gelu_mul_backward_cast(x, gate, up, g_scale, u_scale)
    assert qg.dtype == qu.dtype == FP8_GRAD and torch.equal(qgt.t().float(), qg.float())
    assert torch.equal(qu.float(), to_fp8(d_up, u_scale, True).float())
    # the largest gradient lands on e5m2's largest value: the scale maps amax there
    assert qg.float().abs().max().item() == torch.finfo(FP8_GRAD).max
    # the amaxes the scales come from, of the values as rounded to bf16
    assert fp8_gelu_mul_amax(gate, up).tolist() == [gelu_mul(gate, up).abs().max().float().item()]
    assert fp8_gelu_mul_backward_amax(x, gate, up).tolist() == [d.abs().max().float().item() for d in (d_gate, d_up)]


def test_gelu_mul_backward_is_autograds_gradient():
    torch.manual_seed(0)
    grad, gate, up = (torch.randn(50, 30, dtype=torch.float64) for _ in range(3))
    gate.requires_grad_(), up.requires_grad_()
    (torch.nn.functional.gelu(gate, approximate="tanh") * up).backward(grad)
    d_gate, d_up = gelu_mul_backward(grad, gate.detach(), up.detach())
    torch.testing.assert_close(d_gate.double(), gate.grad, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(d_up.double(), up.grad, rtol=1e-6, atol=1e-6)


def test_compiled_function_traces_whole_and_matches_eager():
    plain = _gated(32, 64)
    torch.manual_seed(1)
    x, grad = torch.randn(2, 16, 32), torch.randn(2, 16, 32)
    eager = _outputs(_ours(plain.mlp), plain.mlp, x, grad)
    compiled = torch.compile(_ours(plain.mlp), backend="aot_eager", fullgraph=True)
    for a, b in zip(_outputs(compiled, plain.mlp, x, grad), eager):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_option_runs_every_gemma_mlp_as_the_function_and_torchao_skips_its_linears():
    pytest.importorskip("torchao")
    model = Pi05Model(dataclasses.replace(TINY, fp8_min_features=16))  # TINY's widths are under the default
    applied = apply_options(model, parse_options({"linear": "fp8", "fp8_mlp": "triton", "recompute": "none"}))
    mlps = [(n, m) for n, m in model.named_modules() if isinstance(m, GemmaMLP)]
    assert len(mlps) == 2 * TINY.llm.layers and all(m.fp8_function for _, m in mlps)
    for name, mlp in mlps:
        assert type(mlp.gate_proj) is nn.Linear and type(mlp.down_proj) is nn.Linear  # not Float8Linear
        assert f"{name}.gate_proj" in applied.fp8_linears and f"{name}.down_proj" in applied.fp8_linears
    others = [n for n in applied.fp8_linears if ".mlp." not in n]
    assert others and all(type(model.get_submodule(n)) is not nn.Linear for n in others)  # torchao's
    x = torch.randn(2, 5, TINY.llm.width)
    mlp = mlps[0][1]
    assert torch.equal(mlp(x), _ours(mlp)(x))


def test_refusals_name_the_options():
    model = Pi05Model(TINY)
    with pytest.raises(ValueError, match="fp8_recipe: rowwise"):
        apply_options(model, parse_options({"linear": "fp8", "fp8_recipe": "rowwise", "fp8_mlp": "triton"}))
    opts = parse_options({"linear": "fp8", "fp8_mlp": "triton"})
    assert "CUDA device" in FAMILY.unsupported_reason(opts, "npu", frozenset({"fp8"}))
    assert FAMILY.unsupported_reason(opts, "cuda", frozenset({"fp8"})) is None
    with pytest.raises(ValueError, match="w_up is torch.bfloat16"):
        fp8_gated_mlp(torch.randn(2, 32), torch.randn(64, 32), torch.randn(64, 32).bfloat16(), torch.randn(32, 64))


def _vision(width: int, mlp: int) -> Holder:
    return Holder(VisionMLP(VisionConfig(width=width, mlp=mlp)))


def _vision_plain(width=48, mlp=80, dtype=torch.float32, device="cpu") -> Holder:
    torch.manual_seed(0)
    plain = _vision(width, mlp)
    with torch.no_grad():
        for lin in (plain.mlp.fc1, plain.mlp.fc2):
            lin.bias.normal_()  # non-zero biases, so that where they are added shows
    return plain.to(device, dtype)


def _vision_pair(width=48, mlp=80, dtype=torch.float32, device="cpu", emulate=True):
    """A plain SigLIP MLP and a torchao Float8Linear copy of it."""
    plain = _vision_plain(width, mlp, dtype, device)
    return plain, _torchao_copy(plain, lambda: _vision(width, mlp), emulate)


def _vision_ours(mlp: VisionMLP):
    return lambda x: fp8_bias_gelu_mlp(x, mlp.fc1.weight, mlp.fc1.bias, mlp.fc2.weight, mlp.fc2.bias)


VISION_OUTPUTS = ["out", "x", "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]


def test_vision_mlp_matches_torchao_tensorwise_float8_to_the_bit_forward_and_backward():
    pytest.importorskip("torchao")
    plain, converted = _vision_pair()
    torch.manual_seed(1)
    x, grad = torch.randn(3, 32, 48), torch.randn(3, 32, 48)
    ours = _outputs(_vision_ours(plain.mlp), plain.mlp, x, grad)
    torchao = _outputs(converted, converted.mlp, x, grad)
    exact = _outputs(plain, plain.mlp, x, grad)
    for name, a, b, ref in zip(VISION_OUTPUTS, ours, torchao, exact):
        assert a.shape == b.shape, name
        if name.endswith("bias"):  # a sum over the tokens: the same values, summed in another order
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=name)
        else:
            assert torch.equal(a, b), name
        err = ((a - ref).norm() / ref.norm()).item()  # FP8 arithmetic, not the fp32 MLP
        if name == "fc2.bias":  # the output gradient's sum: no FP8 on its path
            assert err < 1e-6, (name, err)
        else:
            assert 1e-3 < err < 0.2, (name, err)


def test_biased_gelu_and_its_gradient_are_autograds_and_the_casts_take_them():
    torch.manual_seed(0)
    grad, y = torch.randn(50, 32, dtype=torch.float64), torch.randn(50, 32, dtype=torch.float64)
    bias = torch.randn(32, dtype=torch.float64, requires_grad=True)
    y.requires_grad_()
    h = torch.nn.functional.gelu(y + bias, approximate="tanh")
    h.backward(grad)
    torch.testing.assert_close(gelu_biased(y.detach(), bias.detach()), h.detach(), rtol=1e-6, atol=1e-6)  # in fp32
    d = gelu_biased_grad(grad, y.detach(), bias.detach())
    torch.testing.assert_close(d, y.grad, rtol=1e-6, atol=1e-6)
    amax, sums = fp8_gelu_grad_amax_sum(grad, y.detach(), bias.detach())
    assert amax.dtype == sums.dtype == torch.float32 and amax.shape == (1,) and sums.shape == (32,)
    torch.testing.assert_close(sums.double(), bias.grad, rtol=1e-6, atol=1e-6)  # the bias gradient
    assert amax.item() == pytest.approx(y.grad.abs().max().item())
    # in bf16: the add rounded before GELU, the values rounded before their amax and cast
    yb, bb, gb = y.detach().bfloat16(), bias.detach().bfloat16(), grad.bfloat16()
    assert fp8_gelu_amax(yb, bb).item() == gelu_biased(yb, bb).abs().max().float().item()
    scale = tensor_scale(gelu_biased(yb, bb))
    q, qt = fp8_gelu_cast(yb, bb, scale)
    assert q.dtype == FP8 and torch.equal(qt.t().float(), q.float())
    assert torch.equal(q.float(), to_fp8(gelu_biased(yb, bb), scale).float())
    g_scale = tensor_scale(gelu_biased_grad(gb, yb, bb), True)
    q, qt = fp8_gelu_grad_cast(gb, yb, bb, g_scale)
    assert q.dtype == FP8_GRAD and q.float().abs().max().item() == torch.finfo(FP8_GRAD).max


def test_compiled_vision_function_traces_whole_and_matches_eager():
    plain = _vision_plain(32, 64)
    torch.manual_seed(1)
    x, grad = torch.randn(2, 16, 32), torch.randn(2, 16, 32)
    eager = _outputs(_vision_ours(plain.mlp), plain.mlp, x, grad)
    compiled = torch.compile(_vision_ours(plain.mlp), backend="aot_eager", fullgraph=True)
    for a, b in zip(_outputs(compiled, plain.mlp, x, grad), eager):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_the_vision_option_runs_every_siglip_mlp_as_the_function_and_torchao_skips_its_linears():
    pytest.importorskip("torchao")
    model = Pi05Model(dataclasses.replace(TINY, fp8_min_features=16))
    options = {"linear": "fp8", "fp8_vision_mlp": "triton", "compile_vision": True, "recompute": "none"}
    applied = apply_options(model, parse_options(options), compile_backend="aot_eager")
    mlps = [(n, m) for n, m in model.named_modules() if isinstance(m, VisionMLP)]
    assert len(mlps) == TINY.vision.layers and all(m.fp8_function for _, m in mlps)
    for name, mlp in mlps:
        assert type(mlp.fc1) is nn.Linear and type(mlp.fc2) is nn.Linear  # not Float8Linear
        assert f"{name}.fc1" in applied.fp8_linears and f"{name}.fc2" in applied.fp8_linears
    gemma = [m for m in model.modules() if isinstance(m, GemmaMLP)]
    assert gemma and not any(m.fp8_function for m in gemma)  # fp8_mlp stays torchao's
    assert type(gemma[0].gate_proj) is not nn.Linear
    x = torch.randn(2, 5, TINY.vision.width)
    mlp = mlps[0][1]
    assert torch.equal(mlp(x), _vision_ours(mlp)(x))


def test_vision_refusals_name_the_options():
    model = Pi05Model(TINY)
    with pytest.raises(ValueError, match="fp8_vision_mlp: triton needs compile_vision: true"):
        apply_options(model, parse_options({"linear": "fp8", "fp8_vision_mlp": "triton"}))
    with pytest.raises(ValueError, match="fp8_recipe: rowwise"):
        apply_options(
            model,
            parse_options(
                {"linear": "fp8", "fp8_recipe": "rowwise", "fp8_vision_mlp": "triton", "compile_vision": True}
            ),
        )
    opts = parse_options({"linear": "fp8", "fp8_vision_mlp": "triton", "compile_vision": True})
    assert "fp8_vision_mlp: triton runs Triton kernels on a CUDA device" in FAMILY.unsupported_reason(
        opts, "npu", frozenset({"fp8"})
    )
    with pytest.raises(ValueError, match="b2 is torch.bfloat16"):
        w1, w2 = torch.randn(64, 32), torch.randn(32, 64)
        fp8_bias_gelu_mlp(torch.randn(2, 32), w1, torch.randn(64), w2, torch.randn(32).bfloat16())


@needs_gpu
@pytest.mark.parametrize("shape", [(200, 144), (64, 128), (1000, 48)])
def test_triton_casts_equal_the_torch_operations(shape):
    torch.manual_seed(0)
    a, b, c = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) * 3 for _ in range(3))
    bias = torch.randn(shape[1], device="cuda", dtype=torch.bfloat16)
    s1, s2 = tensor_scale(a), tensor_scale(b, True)
    d_gate, d_up = gelu_mul_backward(a, b, c)
    d_y = gelu_biased_grad(a, b, bias)
    expected = {
        "plain e4m3": both_layouts(to_fp8(a, s1)),
        "plain e5m2": both_layouts(to_fp8(a, s2, True)),
        "gelu x up": both_layouts(to_fp8(gelu_mul(a, b), s1)),
        "gelu backward": (*both_layouts(to_fp8(d_gate, s1, True)), *both_layouts(to_fp8(d_up, s2, True))),
        "gelu + bias": both_layouts(to_fp8(gelu_biased(a, bias), s1)),
        "gelu + bias, gradient": both_layouts(to_fp8(d_y, s2, True)),
    }
    got = {
        "plain e4m3": launch(PLAIN, [a], [s1], False),
        "plain e5m2": launch(PLAIN, [a], [s2], True),
        "gelu x up": launch(GELU_MUL, [a, b], [s1], False),
        "gelu backward": launch(GELU_BACKWARD, [a, b, c], [s1, s2], True),
        "gelu + bias": launch(GELU, [a], [s1], False, bias),
        "gelu + bias, gradient": launch(GELU_GRAD, [a, b], [s2], True, bias),
    }
    amax_y, sums_y = launch_gelu_grad_amax_sum(a, b, bias)
    amaxes = {
        "gelu x up": (launch_amax(GELU_MUL, [a, b]), gelu_mul(a, b).abs().amax().float().reshape(1)),
        "gelu backward": (
            launch_amax(GELU_BACKWARD, [a, b, c]),
            torch.stack([d.abs().amax().float() for d in (d_gate, d_up)]),
        ),
        "gelu + bias": (launch_amax(GELU, [a], bias), gelu_biased(a, bias).abs().amax().float().reshape(1)),
        "gelu + bias, gradient": (amax_y, d_y.abs().amax().float().reshape(1)),
    }
    # the bias gradient: each element as torch's or a bf16 rounding apart, summed in another order
    torch.testing.assert_close(sums_y, d_y.float().sum(0), rtol=0, atol=2**-7 * d_y.float().abs().sum(0).max().item())
    for name, (amax, want) in amaxes.items():  # equal, or a bf16 rounding apart (the kernel fuses multiply-adds)
        torch.testing.assert_close(amax, want, rtol=2**-8, atol=0, msg=name)
    for name, outs in got.items():
        for out, want in zip(outs, expected[name]):
            assert out.dtype == want.dtype and out.shape == want.shape, name
            differ = (out.float() != want.float()).float().mean().item()
            if name.startswith("plain"):
                assert differ == 0, (name, differ)
                continue
            # the kernel fuses multiplies and adds (one rounding where torch's eager kernels round twice), which
            # can move a value across a rounding boundary: rarely, and then by one FP8 step
            steps = (out.view(torch.uint8).int() - want.view(torch.uint8).int()).abs().max().item()
            assert differ < 5e-3 and steps <= 1, (name, differ, steps)


@needs_gpu
def test_matches_torchao_float8_linears_with_fp8_gemms_on_the_gpu():
    pytest.importorskip("torchao")
    plain, converted = _pair(256, 512, torch.bfloat16, "cuda", emulate=False)
    torch.manual_seed(1)
    x = torch.randn(4, 96, 256, device="cuda", dtype=torch.bfloat16)
    grad = torch.randn(4, 96, 256, device="cuda", dtype=torch.bfloat16)
    ours = _outputs(_ours(plain.mlp), plain.mlp, x, grad)
    torchao = _outputs(converted, converted.mlp, x, grad)
    exact = _outputs(plain.float(), plain.mlp, x.float(), grad.float())
    for name, a, b, ref in zip(["out", "x", "gate", "up", "down"], ours, torchao, exact):
        # as accurate as torchao's FP8 (eager torchao rounds grad x up to bf16 before GELU's backward, and this
        # function does not, so the two differ by more than rounding noise but not in accuracy)
        ours_err, torchao_err = (((t.float() - ref).norm() / ref.norm()).item() for t in (a, b))
        assert ours_err < 1.1 * torchao_err + 1e-3 and ours_err < 0.1, (name, ours_err, torchao_err)


@needs_gpu
def test_vision_mlp_matches_torchao_float8_linears_with_fp8_gemms_on_the_gpu():
    pytest.importorskip("torchao")
    plain, converted = _vision_pair(256, 512, torch.bfloat16, "cuda", emulate=False)
    torch.manual_seed(1)
    x = torch.randn(4, 96, 256, device="cuda", dtype=torch.bfloat16)
    grad = torch.randn(4, 96, 256, device="cuda", dtype=torch.bfloat16)
    ours = _outputs(_vision_ours(plain.mlp), plain.mlp, x, grad)
    torchao = _outputs(converted, converted.mlp, x, grad)
    exact = _outputs(plain.float(), plain.mlp, x.float(), grad.float())
    for name, a, b, ref in zip(VISION_OUTPUTS, ours, torchao, exact):
        ours_err, torchao_err = (((t.float() - ref).norm() / ref.norm()).item() for t in (a, b))
        assert ours_err < 1.1 * torchao_err + 1e-3 and ours_err < 0.1, (name, ours_err, torchao_err)


def _gpu_case(kind: str):
    """(the MLP, our function) for the gated or the vision MLP on the GPU."""
    if kind == "gated":
        mlp = _gated(256, 512).to("cuda", torch.bfloat16).mlp
        return mlp, _ours(mlp)
    mlp = _vision_plain(256, 512, torch.bfloat16, "cuda").mlp
    return mlp, _vision_ours(mlp)


@needs_gpu
@pytest.mark.parametrize("kind", ["gated", "vision"])
def test_compiled_and_graph_replayed_steps_match_eager_on_the_gpu(kind):
    mlp, ours = _gpu_case(kind)
    torch.manual_seed(1)
    x = torch.randn(2, 64, 256, device="cuda", dtype=torch.bfloat16)
    grad = torch.randn(2, 64, 256, device="cuda", dtype=torch.bfloat16)
    eager = _outputs(ours, mlp, x, grad)
    compiled = torch.compile(ours, fullgraph=True)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up before the capture, as torch's graph docs do
        once = _outputs(compiled, mlp, x, grad)
        _outputs(compiled, mlp, x, grad)
    torch.cuda.current_stream().wait_stream(side)
    for a, b in zip(once, eager):  # inductor's amax and GELU may round a scale differently from eager torch
        assert ((a.float() - b.float()).norm() / b.float().norm()).item() < 1e-2
    static_x = x.clone().requires_grad_()
    for p in mlp.parameters():
        p.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        compiled(static_x).backward(grad)
    graph.replay()
    replayed = [static_x.grad] + [p.grad for p in mlp.parameters()]
    for a, b in zip(replayed, once[1:]):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@needs_gpu
def test_fp32_inputs_are_refused_on_the_gpu():
    x, w = torch.randn(32, 32, device="cuda"), torch.randn(64, 32, device="cuda")
    with pytest.raises(ValueError, match="round GELU's values to bf16"):
        fp8_gated_mlp(x, w, w, w.t().contiguous())
    with pytest.raises(ValueError, match="round GELU's values to bf16"):
        fp8_bias_gelu_mlp(x, w, w[:, 0].contiguous(), w.t().contiguous(), x[0])
