"""ClippedAdamW (models/clipped_adamw.py, the `adamw: compiled` option): the same update as clip_grad_norm_ then
torch's AdamW, the gradients left as they were, a warm-up that moves nothing, a schedule's rate written in place,
its state saved and resumed; compiled with aot_eager on the CPU (inductor's kernels are the GPU's concern)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from harness.train.recipe import Recipe, optimizer_mismatch, set_lr
from models.clipped_adamw import ClippedAdamW
from models.family import clip_and_step
from models.graph_capture import prepare_optimizer

LR, BETAS, EPS, DECAY = 1e-2, (0.9, 0.999), 1e-8, 0.1


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8), nn.LayerNorm(8), nn.Linear(8, 3))


def groups(model: nn.Module) -> list[dict]:
    """Two groups as the families make them: decayed weights, and biases and norms without decay."""
    decay = [p for n, p in model.named_parameters() if n.endswith("weight") and p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if not (n.endswith("weight") and p.dim() > 1)]
    return [{"params": decay, "weight_decay": DECAY}, {"params": rest, "weight_decay": 0.0}]


def clipped(model: nn.Module, max_norm: float = 1.0) -> ClippedAdamW:
    return ClippedAdamW(groups(model), max_norm=max_norm, backend="aot_eager", lr=LR, betas=BETAS, eps=EPS)


def reference(model: nn.Module) -> torch.optim.AdamW:
    return torch.optim.AdamW(groups(model), lr=LR, betas=BETAS, eps=EPS, foreach=True)


def backward(model: nn.Module, gain: float, seed: int) -> None:
    """Gradients whose total norm is about `gain` times a plain loss's: above and below the clip of 1.0."""
    torch.manual_seed(seed)
    x, y = torch.randn(16, 6), torch.randn(16, 3)
    model.zero_grad(set_to_none=True)
    (gain * nn.functional.mse_loss(model(x), y)).backward()


def states(optimizer: torch.optim.Optimizer, model: nn.Module) -> list[torch.Tensor]:
    return [optimizer.state[p][k].detach().clone() for p in model.parameters() for k in ("exp_avg", "exp_avg_sq")]


def test_the_update_is_clip_grad_norm_then_torch_adamw():
    ours_model, ref_model = make_model(), make_model()
    ours, ref = clipped(ours_model), reference(ref_model)
    for i, gain in enumerate((50.0, 0.01, 20.0)):  # clipped, not clipped, clipped
        backward(ours_model, gain, i)
        backward(ref_model, gain, i)
        norm = torch.nn.utils.get_total_norm([p.grad for p in ours_model.parameters()])
        assert (norm > 1.0) == (gain > 1.0)
        clip_and_step(ours, list(ours_model.parameters()), 1.0)
        clip_and_step(ref, list(ref_model.parameters()), 1.0)
    for (name, p), q in zip(ours_model.named_parameters(), ref_model.parameters()):
        assert torch.allclose(p, q, rtol=1e-5, atol=1e-6), name
    for a, b in zip(states(ours, ours_model), states(ref, ref_model)):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7)
    assert {int(s["step"]) for s in ours.state.values()} == {3}
    # the weights moved, so the comparison above compared updates, not two untouched models
    assert not torch.allclose(next(ours_model.parameters()), next(make_model().parameters()))


def test_the_gradients_are_scaled_inside_the_update_not_rewritten():
    model = make_model()
    optimizer = clipped(model)
    backward(model, 50.0, 0)
    before = [p.grad.clone() for p in model.parameters()]
    optimizer.step()
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), before))


def test_the_warm_up_moves_nothing_and_the_next_step_is_the_first():
    model, fresh_model = make_model(), make_model()
    optimizer, fresh = clipped(model), clipped(fresh_model)
    backward(model, 50.0, 0)
    weights = [p.detach().clone() for p in model.parameters()]
    prepare_optimizer(optimizer, list(model.parameters()))  # what a CUDA-graph capture calls first
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))
    assert all(float(v.abs().max()) == 0 for s in optimizer.state.values() for v in s.values())
    assert all(float(g["lr"]) == pytest.approx(LR) for g in optimizer.param_groups)  # the rate is back
    optimizer.step()
    backward(fresh_model, 50.0, 0)
    fresh.step()
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), fresh_model.parameters()))
    # once the update has run, a warm-up (a later shape's capture) keeps training's state
    kept = states(optimizer, model)
    optimizer.warm_up()
    assert all(torch.equal(a, b) for a, b in zip(states(optimizer, model), kept))


def test_a_schedule_writes_the_rate_in_place_and_the_step_reads_it():
    model = make_model()
    optimizer = clipped(model)
    rate = optimizer.param_groups[0]["lr"]
    set_lr(optimizer, 0.0)
    assert optimizer.param_groups[0]["lr"] is rate and float(rate) == 0.0
    backward(model, 1.0, 0)
    weights = [p.detach().clone() for p in model.parameters()]
    optimizer.step()
    assert all(torch.equal(p, w) for p, w in zip(model.parameters(), weights))


def test_state_saved_and_resumed_continues_as_uninterrupted():
    model = make_model()
    optimizer = clipped(model)
    for i in range(2):
        backward(model, 30.0, i)
        optimizer.step()
    saved_model, saved = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    backward(model, 30.0, 2)
    optimizer.step()
    resumed_model = make_model(seed=1)
    resumed_model.load_state_dict(saved_model)
    resumed = clipped(resumed_model)
    resumed.load_state_dict(saved)
    assert all(isinstance(g["lr"], torch.Tensor) and float(g["lr"]) == pytest.approx(LR) for g in resumed.param_groups)
    backward(resumed_model, 30.0, 2)
    resumed.step()
    for p, q in zip(model.parameters(), resumed_model.parameters()):
        assert torch.allclose(p, q, rtol=1e-6, atol=1e-8)


def test_it_is_the_recipes_adamw_and_refuses_another_clip():
    model = make_model()
    optimizer = clipped(model)
    recipe = Recipe()
    optimizer_ok = ClippedAdamW(
        [{"params": list(model.parameters()), "weight_decay": recipe.weight_decay}],
        max_norm=recipe.clip_norm,
        backend="aot_eager",
        lr=LR,
        betas=tuple(recipe.betas),
        eps=recipe.eps,
    )
    assert optimizer_mismatch(optimizer_ok, recipe) is None
    with pytest.raises(ValueError, match=r"the optimizer clips to 1.0, the step asks for 0.5"):
        clip_and_step(optimizer, list(model.parameters()), 0.5)
    with pytest.raises(ValueError, match="no closure"):
        optimizer.step(lambda: 0.0)


def test_fused_clipped_adamw_is_clip_grad_norm_then_torchs_fused_adamw():
    """FusedClippedAdamW (Pi0.5's `adamw: fused-clip`): the clip coefficient as the fused kernel's gradient scale
    gives the weights and state of clip_grad_norm_ then torch's fused AdamW, leaves the gradients clipped as
    clip_grad_norm_ does, and under the clip norm is torch's fused step exactly; clip_and_step leaves it the clip."""
    from models.clipped_adamw import FusedClippedAdamW

    ours_model, ref_model = make_model(), make_model()
    ours = FusedClippedAdamW(groups(ours_model), max_norm=1.0, lr=LR, betas=BETAS, eps=EPS)
    ref = torch.optim.AdamW(groups(ref_model), lr=LR, betas=BETAS, eps=EPS, fused=True)
    # not clipped (from equal weights: exactly torch's step), clipped, not clipped, clipped. After a clipped step the
    # weights agree only up to rounding (the kernel divides by the scale, clip_grad_norm_ multiplies by its
    # coefficient), so they are compared exactly only from equal weights: whether later steps happen to agree to the
    # bit depends on the CPU's vector kernels (they did on one CI machine, not on an AVX-512 one)
    for i, gain in enumerate((0.01, 50.0, 0.01, 20.0)):
        backward(ours_model, gain, i)
        backward(ref_model, gain, i)
        clip_and_step(ours, list(ours_model.parameters()), 1.0)
        clip_and_step(ref, list(ref_model.parameters()), 1.0)
        assert ours.grad_scale is None  # set for the step only
        for p, q in zip(ours_model.parameters(), ref_model.parameters()):
            if i == 0:
                assert torch.equal(p, q) and torch.equal(p.grad, q.grad)
            else:
                assert torch.allclose(p, q, rtol=1e-6, atol=1e-7) and torch.allclose(p.grad, q.grad, rtol=1e-6)
        clipped_norm = torch.nn.utils.get_total_norm([p.grad for p in ours_model.parameters()])
        assert clipped_norm.item() == pytest.approx(1.0 if gain > 1.0 else clipped_norm.item(), rel=1e-5)
    for a, b in zip(states(ours, ours_model), states(ref, ref_model)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-9)
    with pytest.raises(ValueError, match="asks for 2.0"):
        clip_and_step(ours, list(ours_model.parameters()), 2.0)
