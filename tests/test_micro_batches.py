"""Micro-batches (Pi0.5's `micro_batches` option, the memory plan's choice besides recompute): the step runs its
batch as equal slices with the gradients summed, so the loss and the update are the whole batch's."""

import pytest
import torch

from models.family import forward_backward, split_batch, standard_step
from models.pi05 import FAMILY, parse_options
from models.schema import SchemaError
from models.workload import Workload

WORKLOAD = Workload(batch_size=4, cameras=2, text_tokens=24, action_horizon=6, seed=0, lr=1e-3)
OPTIONS = {"recompute": "none", "attention": "sdpa"}


def test_split_batch_gives_equal_views_and_refuses_an_uneven_split():
    batch = {"x": torch.arange(12.0).reshape(6, 2), "y": torch.arange(6), "note": "kept"}
    parts = split_batch(batch, 3)
    assert [p["x"].shape[0] for p in parts] == [2, 2, 2]
    assert torch.equal(torch.cat([p["y"] for p in parts]), batch["y"])
    assert all(p["note"] == "kept" for p in parts)
    assert parts[1]["x"].data_ptr() == batch["x"][2:].data_ptr()  # a view: a graph's static input stays static
    assert split_batch(batch, 1) == [batch]
    with pytest.raises(ValueError, match="micro_batches: 4 needs a batch"):
        split_batch(batch, 4)
    with pytest.raises(ValueError, match=r"first dimensions \[3, 6\]"):
        split_batch({"x": torch.zeros(6), "z": torch.zeros(3)}, 3)


def build(micro_batches: int):
    opts = parse_options({**OPTIONS, "micro_batches": micro_batches})
    model = FAMILY.build("tiny", opts, WORKLOAD, "cpu", torch.float32, seed=0).model
    optimizer = FAMILY.optimizer(model, opts, WORKLOAD, "cpu")
    return model, FAMILY.make_step(model, optimizer, opts)


def test_two_micro_batches_give_the_whole_batchs_losses_and_weights():
    """Three steps of the tiny model in fp32 from the same weights and batches: the same losses (a mean over the
    batch is the mean of its equal halves' means) and weights within float reassociation of each other."""
    batches = FAMILY.make_batches("tiny", WORKLOAD, 3, "cpu", torch.float32, 0)
    whole, whole_step = build(1)
    sliced, sliced_step = build(2)
    start = [p.detach().clone() for p in whole.parameters()]
    a = [whole_step(b).item() for b in batches]
    b = [sliced_step(b).item() for b in batches]
    assert b == pytest.approx(a, rel=1e-5)
    assert a[-1] != pytest.approx(a[0], rel=1e-3)  # the weights moved
    for (name, p), q, s in zip(whole.named_parameters(), sliced.parameters(), start):
        moved = (p - s).norm().item()
        assert (q - p).norm().item() <= 1e-3 * moved + 1e-7, name


def test_forward_backward_sums_the_slices_gradients():
    model = torch.nn.Linear(3, 1)
    batch = {"x": torch.randn(8, 3), "y": torch.randn(8, 1)}

    def loss_fn(m, b):
        return torch.nn.functional.mse_loss(m(b["x"]), b["y"])

    whole = forward_backward(loss_fn, model, [batch])
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    sliced = forward_backward(loss_fn, model, split_batch(batch, 4))
    assert sliced.item() == pytest.approx(whole.item(), rel=1e-6)
    for g, p in zip(grads, model.parameters()):
        torch.testing.assert_close(p.grad, g)
    assert not sliced.requires_grad


def test_the_option_is_bounded_and_the_planner_can_write_it():
    assert parse_options({**OPTIONS, "micro_batches": 4}).micro_batches == 4
    assert parse_options(OPTIONS).micro_batches == 1
    assert FAMILY.micro_batch_options(2) == {"micro_batches": 2}
    with pytest.raises(SchemaError, match="micro_batches"):
        parse_options({"micro_batches": 0})


def test_an_uneven_split_fails_the_step_with_its_reason():
    _, step = build(3)
    batch = FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.float32, 0)[0]
    with pytest.raises(ValueError, match="micro_batches: 3"):
        step(batch)


def test_the_standard_step_defaults_to_one_slice():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    step = standard_step(lambda m, b: m(b["x"]).pow(2).mean(), model, opt)
    loss = step({"x": torch.ones(4, 2)})
    assert loss.shape == () and all(p.grad is None for p in model.parameters())
