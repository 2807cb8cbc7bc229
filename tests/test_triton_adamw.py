"""TritonClippedAdamW (models/triton_adamw.py, Pi0.5's `adamw: triton-clip`): on the CPU, the tables its kernels
read and what it refuses; on a GPU with triton, the weights and state of clip_grad_norm_ then torch's AdamW, eager,
from a schedule's device learning rate, replayed from a CUDA graph whose capture allocates new gradients, and after
load_state_dict."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from triton_ready import needs_gpu

from models.family import clip_and_step
from models.pi05 import FAMILY, parse_options
from models.triton_adamw import BLOCK, TritonClippedAdamW, block_table, offsets_from

LR, BETAS, EPS, DECAY = 1e-2, (0.9, 0.95), 1e-8, 0.1


def test_block_table_covers_every_element_once():
    numels = [1, BLOCK - 1, BLOCK, 2 * BLOCK + 5, 3 * BLOCK]
    full_tensor, full_start, tail_tensor, tail_start = block_table(numels)
    assert full_tensor == [2, 3, 3, 4, 4, 4]
    assert full_start == [0, 0, BLOCK, 0, BLOCK, 2 * BLOCK]
    assert tail_tensor == [0, 1, 3] and tail_start == [0, 0, 2 * BLOCK]
    covered = [set() for _ in numels]
    for t, s in zip(full_tensor, full_start):
        covered[t].update(range(s, s + BLOCK))
    for t, s in zip(tail_tensor, tail_start):
        covered[t].update(range(s, numels[t]))
    assert [len(c) for c in covered] == numels
    assert all(max(c) == n - 1 for c, n in zip(covered, numels))
    assert block_table([10, 3], block=4) == ([0, 0], [0, 4], [0, 1], [8, 0])


def test_offsets_are_elements_from_the_base_and_bad_tensors_are_named():
    storage = torch.zeros(64, dtype=torch.bfloat16)
    base, later = storage[:8], storage[16:24]
    assert offsets_from(base, [base, later], "parameter") == [0, 16]
    with pytest.raises(ValueError, match=r"parameter 1 \(shape \(8,\)\) is not at a 16-byte-aligned address"):
        offsets_from(base, [base, storage[3:11]], "parameter")
    with pytest.raises(ValueError, match=r"gradient 0 .* must be a contiguous torch.bfloat16 tensor.*strided"):
        offsets_from(base, [storage.view(8, 8).t()], "gradient")
    with pytest.raises(ValueError, match=r"exp_avg 0 .*it is torch.float32"):
        offsets_from(base, [torch.zeros(4)], "exp_avg")


def test_the_option_is_refused_off_cuda_in_one_line():
    options = parse_options({"adamw": "triton-clip"})
    assert FAMILY.unsupported_reason(options, "cpu", frozenset()) == (
        "adamw: triton-clip runs Triton kernels on a CUDA device; this target's backend is cpu"
    )
    assert FAMILY.unsupported_reason(options, "cuda", frozenset()) is None
    with pytest.raises(ValueError, match="needs the parameters on a CUDA device; one is on cpu"):
        TritonClippedAdamW(nn.Linear(2, 2).parameters(), max_norm=1.0, lr=LR)


def make_model(device: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> nn.Module:
    """Tensors of every kind of size: under one block, one block and a tail, several blocks, one element; and a
    second group without decay, as the families make them."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(70, 130), nn.LayerNorm(130), nn.Linear(130, 3), nn.Linear(3, 1, bias=False))
    model.scale = nn.Parameter(torch.ones(1))
    model.unused = nn.Parameter(torch.ones(5))  # never gets a gradient: a step skips it, as torch's AdamW does
    return model.to(device=device, dtype=dtype)


def groups(model: nn.Module) -> list[dict]:
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    return [{"params": decay, "weight_decay": DECAY}, {"params": rest, "weight_decay": 0.0}]


def backward(model: nn.Module, gain: float, seed: int) -> None:
    """Gradients whose total norm is about `gain` times a plain loss's: above and below the clip of 1.0 (none for
    `unused`)."""
    torch.manual_seed(seed)
    p = next(model.parameters())
    x, y = torch.randn(32, 70, device=p.device, dtype=p.dtype), torch.randn(32, 1, device=p.device, dtype=p.dtype)
    model.zero_grad(set_to_none=True)
    (gain * nn.functional.mse_loss(model(x) * model.scale, y)).backward()


def weights_and_state(optimizer: torch.optim.Optimizer, model: nn.Module) -> list[torch.Tensor]:
    """Every weight, and the moments of those that were trained (torch's AdamW has no state for the others)."""
    out = []
    for p in model.parameters():
        out.append(p.detach().clone())
        if p is not model.unused:
            out += [optimizer.state[p][k].detach().clone() for k in ("exp_avg", "exp_avg_sq")]
    return out


@needs_gpu
def test_the_update_is_clip_grad_norm_then_torch_adamw_on_the_gpu():
    ours_model, ref_model = make_model("cuda"), make_model("cuda")
    ours = TritonClippedAdamW(groups(ours_model), max_norm=1.0, lr=LR, betas=BETAS, eps=EPS)
    ref = torch.optim.AdamW(groups(ref_model), lr=LR, betas=BETAS, eps=EPS, foreach=False)
    for i, gain in enumerate((50.0, 0.01, 20.0, 5.0)):  # clipped, not clipped, clipped, clipped
        backward(ours_model, gain, i)
        backward(ref_model, gain, i)
        grads = [p.grad.clone() for p in ours_model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads)
        assert ours.total_norm().item() == pytest.approx(norm.item(), rel=1e-5)
        assert (norm > 1.0) == (gain > 1.0)
        clip_and_step(ours, list(ours_model.parameters()), 1.0)
        clip_and_step(ref, list(ref_model.parameters()), 1.0)
        for p, g in zip([p for p in ours_model.parameters() if p.grad is not None], grads):
            assert torch.equal(p.grad, g)  # left as backward made them
    for a, b in zip(weights_and_state(ours, ours_model), weights_and_state(ref, ref_model)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    assert [s["step"].item() for s in ours.state.values()].count(4) == len(ours.state) - 1
    assert ours.state[ours_model.unused]["step"].item() == 0 and torch.equal(ours_model.unused, torch.ones(5).cuda())


@needs_gpu
def test_bf16_tensors_and_a_learning_rate_on_the_device():
    from harness.train.recipe import set_lr

    ours_model, ref_model = make_model("cuda", torch.bfloat16), make_model("cuda", torch.bfloat16)
    ours = TritonClippedAdamW(groups(ours_model), max_norm=1.0, lr=LR, betas=BETAS, eps=EPS)
    for group in ours.param_groups:
        group["lr"] = torch.tensor(LR, device="cuda")
    ref = torch.optim.AdamW(groups(ref_model), lr=LR, betas=BETAS, eps=EPS, fused=True)
    for i, (gain, rate) in enumerate(((50.0, LR), (20.0, LR / 2))):
        set_lr(ours, rate)
        set_lr(ref, rate)
        backward(ours_model, gain, i)
        backward(ref_model, gain, i)
        clip_and_step(ours, list(ours_model.parameters()), 1.0)
        clip_and_step(ref, list(ref_model.parameters()), 1.0)
    for a, b in zip(weights_and_state(ours, ours_model), weights_and_state(ref, ref_model)):
        # bf16 results of fp32 math, each side rounding its own clip coefficient: within a bf16 step or two
        assert torch.allclose(a.float(), b.float(), rtol=2e-2, atol=1e-4)


@needs_gpu
def test_a_captured_step_reads_the_gradients_backward_allocates_in_the_capture():
    """The whole-step graph's way: warm-up, gradients dropped, then forward, backward and the step captured; each
    replay then trains as the eager step does, and state saved and loaded keeps training the same."""
    from models.graph_capture import prepare_optimizer, warm_up

    graph_model, eager_model = make_model("cuda"), make_model("cuda")
    graph_opt = TritonClippedAdamW(groups(graph_model), max_norm=1.0, lr=LR, betas=BETAS, eps=EPS)
    eager_opt = TritonClippedAdamW(groups(eager_model), max_norm=1.0, lr=LR, betas=BETAS, eps=EPS)
    x, y = torch.randn(32, 70, device="cuda"), torch.randn(32, 1, device="cuda")
    static = {"x": x.clone(), "y": y.clone()}
    params = list(graph_model.parameters())

    def loss_fn(model, batch):
        return 30.0 * nn.functional.mse_loss(model(batch["x"]) * model.scale, batch["y"])

    warm_up(2, loss_fn, graph_model, static, params, then=lambda: prepare_optimizer(graph_opt, params))
    assert all(s["step"].item() == 0 for s in graph_opt.state.values())  # the warm-up moved nothing
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = loss_fn(graph_model, static)
        loss.backward()
        clip_and_step(graph_opt, params, 1.0)
    for i in range(3):
        torch.manual_seed(i)
        x, y = torch.randn(32, 70, device="cuda"), torch.randn(32, 1, device="cuda")
        static["x"].copy_(x)
        static["y"].copy_(y)
        graph.replay()
        eager_model.zero_grad(set_to_none=True)
        eager_loss = loss_fn(eager_model, {"x": x, "y": y})
        eager_loss.backward()
        clip_and_step(eager_opt, list(eager_model.parameters()), 1.0)
        assert loss.item() == pytest.approx(eager_loss.item(), rel=1e-5)
    for a, b in zip(weights_and_state(graph_opt, graph_model), weights_and_state(eager_opt, eager_model)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-7)
    # resumed: a fresh optimizer loaded from the eager one's state takes the same next step
    resumed_model = copy.deepcopy(eager_model)
    resumed = TritonClippedAdamW(groups(resumed_model), max_norm=1.0, lr=LR, betas=BETAS, eps=EPS)
    resumed.load_state_dict(copy.deepcopy(eager_opt.state_dict()))
    for model, opt in ((eager_model, eager_opt), (resumed_model, resumed)):
        backward(model, 20.0, 7)
        clip_and_step(opt, list(model.parameters()), 1.0)
    for a, b in zip(weights_and_state(eager_opt, eager_model), weights_and_state(resumed, resumed_model)):
        assert torch.equal(a, b)
