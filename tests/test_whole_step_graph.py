"""The whole-step CUDA graph (Pi0.5's `cuda_graphs: whole-step`): what it refuses on the CPU, and on a GPU the
same losses and weights as the eager step over several steps."""

import pytest
import torch

from models.pi05 import FAMILY, parse_options
from models.whole_step_graph import WholeStepGraph
from models.workload import Workload

WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=24, action_horizon=6, seed=0, lr=1e-3)
GRAPHS = {"recompute": "none", "attention": "sdpa", "cuda_graphs": "whole-step"}
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")


def build(options: dict, device="cpu", dtype=torch.float32):
    opts = parse_options(options)
    model = FAMILY.build("tiny", opts, WORKLOAD, device, dtype, seed=0).model
    optimizer = FAMILY.optimizer(model, opts, WORKLOAD, "cuda" if device == "cuda" else "cpu")
    return model, optimizer, FAMILY.make_step(model, optimizer, opts)


def test_the_option_makes_a_capturable_optimizer_and_a_graphed_step():
    model, optimizer, step = build(GRAPHS)
    assert isinstance(step, WholeStepGraph)
    assert all(group["capturable"] for group in optimizer.param_groups)
    _, eager_optimizer, eager_step = build({**GRAPHS, "cuda_graphs": "none"})
    assert not isinstance(eager_step, WholeStepGraph)
    assert not any(group["capturable"] for group in eager_optimizer.param_groups)
    _, fused_optimizer, fused_step = build({**GRAPHS, "adamw": "fused"})  # pi05-beyond's fused-adamw rung
    assert isinstance(fused_step, WholeStepGraph)
    assert all(group["capturable"] and group["fused"] for group in fused_optimizer.param_groups)


def test_refusals_name_the_reason():
    opts = parse_options(GRAPHS)
    assert "CUDA device" in FAMILY.unsupported_reason(opts, "cpu", frozenset())
    assert FAMILY.unsupported_reason(opts, "cuda", frozenset({"flex-backward"})) is None
    model, optimizer, step = build(GRAPHS)
    batch = FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.float32, 0)[0]
    with pytest.raises(ValueError, match="every batch tensor must be on a CUDA device"):
        step(batch)
    plain = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="capturable=True"):
        WholeStepGraph(FAMILY.loss, model, plain)
    wrapper = torch.nn.Module()
    wrapper.module = model
    with pytest.raises(ValueError, match="one process"):
        WholeStepGraph(FAMILY.loss, wrapper, optimizer)
    with pytest.raises(Exception, match="cuda_graphs"):
        parse_options({"cuda_graphs": "yes"})


@needs_cuda
@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"adamw": "fused"},
        {"adamw": "fused-clip"},
        {"adamw": "compiled"},
        {"adamw": "triton-clip"},
        {"compile": "per-layer", "recompute": {"patterns": ["vision.layers.*"]}},
        # pi05-beyond's skip-prefix-tail: the skipped parameters have no gradient in either step
        {"compile": "per-layer", "adamw": "triton-clip", "prefix_tail": False},
        # the memory plan's micro-batches: two slices' forward and backward inside the one graph, against the
        # eager step over the whole batch
        {"micro_batches": 2},
        {"compile": "per-layer", "adamw": "triton-clip", "prefix_tail": False, "micro_batches": 2},
    ],
)
def test_replayed_steps_match_eager_steps(extra):
    """Five steps from the same weights and batches, eager and replayed, with the same (capturable) optimizer: the
    same losses, and final weights whose difference is a small fraction of how far the steps moved them."""
    from models.family import standard_step

    batches = FAMILY.make_batches("tiny", WORKLOAD, 5, "cuda", torch.float32, 0)
    eager_model, eager_optimizer, _ = build({**GRAPHS, **extra, "micro_batches": 1}, "cuda")
    eager_step = standard_step(FAMILY.loss, eager_model, eager_optimizer)
    graph_model, _, graph_step = build({**GRAPHS, **extra}, "cuda")
    initial = [p.detach().clone() for p in graph_model.parameters()]
    eager = [eager_step(b).item() for b in batches]
    graphed = [graph_step(b).item() for b in batches]
    assert graph_step.captures == 1 and graph_step.replays == 5
    assert graphed == pytest.approx(eager, rel=1e-4), (graphed, eager)
    assert eager[-1] != pytest.approx(eager[0], rel=1e-3)  # the weights did move
    for (name, a), b, start in zip(eager_model.named_parameters(), graph_model.parameters(), initial):
        moved = (a - start).norm().item()
        assert (b - a).norm().item() <= 0.01 * moved + 1e-7, (name, (b - a).norm().item(), moved)


def test_a_schedule_writes_a_capturable_groups_rate_in_place_and_a_replaced_tensor_is_refused():
    """vlabench train's schedule (harness/train/recipe.py set_lr): a capturable group's rate becomes a device
    tensor written in place every step, so a replayed graph reads each step's rate; the check before a replay
    passes that tensor without reading it, and refuses a group whose tensor was replaced after the capture."""
    from harness.train.recipe import set_lr
    from models.graph_capture import check_learning_rates, learning_rates

    _, optimizer, _ = build(GRAPHS)
    set_lr(optimizer, 1e-3)
    rate = optimizer.param_groups[0]["lr"]
    assert isinstance(rate, torch.Tensor) and rate.dtype == torch.float32 and rate.item() == pytest.approx(1e-3)
    captured = learning_rates(optimizer)
    set_lr(optimizer, 5e-4)
    assert optimizer.param_groups[0]["lr"] is rate and rate.item() == pytest.approx(5e-4)
    check_learning_rates(optimizer, captured, "cuda_graphs: whole-step")  # the same tensor: replays
    optimizer.param_groups[0]["lr"] = torch.tensor(5e-4)
    with pytest.raises(ValueError, match="a device tensor written in place"):
        check_learning_rates(optimizer, captured, "cuda_graphs: whole-step")
    _, eager_optimizer, _ = build({**GRAPHS, "cuda_graphs": "none"})
    set_lr(eager_optimizer, 5e-4)
    assert eager_optimizer.param_groups[0]["lr"] == 5e-4  # a float where no graph captures the step


@needs_cuda
def test_replayed_steps_follow_a_schedule_as_eager_steps_do():
    """Five steps with the rate changed before each (warm-up then decay, as vlabench train's schedule does),
    eager and replayed from one capture: the same losses and weights, so the graph read each step's rate."""
    from harness.train.recipe import set_lr
    from models.family import standard_step

    rates = [2e-4, 1e-3, 8e-4, 4e-4, 1e-4]
    batches = FAMILY.make_batches("tiny", WORKLOAD, 5, "cuda", torch.float32, 0)
    eager_model, eager_optimizer, _ = build(GRAPHS, "cuda")
    eager_step = standard_step(FAMILY.loss, eager_model, eager_optimizer)
    graph_model, graph_optimizer, graph_step = build(GRAPHS, "cuda")
    initial = [p.detach().clone() for p in graph_model.parameters()]
    eager, graphed = [], []
    for rate, batch in zip(rates, batches):
        set_lr(eager_optimizer, rate)
        eager.append(eager_step(batch).item())
        set_lr(graph_optimizer, rate)
        graphed.append(graph_step(batch).item())
    assert graph_step.captures == 1 and graph_step.replays == 5
    assert graphed == pytest.approx(eager, rel=1e-4), (graphed, eager)
    for (name, a), b, start in zip(eager_model.named_parameters(), graph_model.parameters(), initial):
        moved = (a - start).norm().item()
        assert (b - a).norm().item() <= 0.01 * moved + 1e-7, (name, (b - a).norm().item(), moved)


@pytest.mark.parametrize("clipping", ["compiled", "fused-clip"])
def test_optimizers_that_clip_in_their_step_train_as_clip_grad_norm_then_adamw(clipping):
    """`adamw: compiled` and `fused-clip` (pi05-beyond's clip-in-fused-adamw rung): openpi's AdamW with the clipping
    at 1.0 folded into a compiled update (aot_eager here) or into torch's fused kernel. Three standard steps give
    the losses and weights of clip_grad_norm_ then torch's foreach AdamW; with the whole step graphed the
    optimizer is capturable."""
    from dataclasses import replace

    from models.clipped_adamw import ClipsInStep
    from models.family import standard_step
    from models.pi05 import CLIP

    workload = replace(WORKLOAD, compile_backend="aot_eager")
    options = {"recompute": "none", "attention": "sdpa"}
    models, steps = [], []
    for adamw in (clipping, "foreach"):
        opts = parse_options({**options, "adamw": adamw})
        model = FAMILY.build("tiny", opts, workload, "cpu", torch.float32, seed=0).model
        optimizer = FAMILY.optimizer(model, opts, workload, "cpu")
        models.append(model)
        steps.append(standard_step(FAMILY.loss, model, optimizer, clip=CLIP))
        if adamw == clipping:
            assert isinstance(optimizer, ClipsInStep) and optimizer.max_norm == CLIP == 1.0
            assert optimizer.defaults["betas"] == (0.9, 0.95) and optimizer.defaults["eps"] == 1e-8
            graphed = FAMILY.optimizer(model, parse_options({**options, "adamw": adamw, **GRAPHS}), workload, "cpu")
            assert all(group["capturable"] for group in graphed.param_groups)
    initial = [p.detach().clone() for p in models[0].parameters()]
    for i, batch in enumerate(FAMILY.make_batches("tiny", workload, 3, "cpu", torch.float32, 0)):
        losses = []
        for step in steps:
            torch.manual_seed(i)  # the same noise and flow times on both sides
            losses.append(step(batch).item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-5), losses
    moved = 0.0
    for (name, a), b, start in zip(models[0].named_parameters(), models[1].parameters(), initial):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), name
        moved = max(moved, (a - start).abs().max().item())
    assert moved > 1e-4  # the steps did move the weights
