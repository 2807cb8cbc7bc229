"""Pi0.5 model: sizes, parameter count, FLOPs, mask semantics, training and sampling (CPU, tiny)."""

from dataclasses import replace

import pytest
import torch

from models.pi05 import FAMILY, FULL, TINY, Pi05Model, count_parameters, forward_flops_per_sample, parse_options
from models.pi05.attention import bool_mask
from models.pi05.batch import make_batch, to_device
from models.siglip import VisionMLP
from models.workload import Workload

WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=24, action_horizon=6, seed=0)


def tiny(options=None, seed=0):
    opts = parse_options({"recompute": "none", **(options or {})})
    return FAMILY.build("tiny", opts, WORKLOAD, "cpu", torch.float32, seed).model


def batch(seed=0, **overrides):
    wl = replace(WORKLOAD, **overrides)
    gen = torch.Generator().manual_seed(seed)
    return to_device(
        make_batch(TINY, wl.batch_size, wl.cameras, wl.text_tokens, wl.action_horizon, gen),
        "cpu",
        torch.float32,
    )


def test_full_parameter_count_on_meta_device():
    with torch.device("meta"):
        model = Pi05Model(FULL)
    assert count_parameters(model) == 3_353_433_872
    parts = {
        "vision": 412_442_352 + 2_361_344,  # SigLIP + projector
        "text_embed": 257152 * 2048,
        "suffix_embed": 2 * (1024 * 1024 + 1024) + 32 * 1024 + 1024,
    }
    for name, expected in parts.items():
        assert count_parameters(getattr(model, name)) == expected, name
    assert count_parameters(model.vision.projector) == 2_361_344
    expert = sum(count_parameters(layer.suffix) for layer in model.backbone.layers) + count_parameters(
        model.backbone.suffix_norm
    )
    assert expert == 427_932_672
    gemma = (
        sum(count_parameters(layer.prefix) for layer in model.backbone.layers)
        + count_parameters(model.backbone.prefix_norm)
        + count_parameters(model.text_embed)
    )
    assert gemma == 2_508_531_712


def test_full_flops_match_published_breakdown():
    f = forward_flops_per_sample(FULL, cameras=2, text_tokens=200, action_horizon=50)
    assert f["vision"] / 1e12 == pytest.approx(0.44, abs=0.005)
    assert f["llm_linear"] / 1e12 == pytest.approx(2.82, abs=0.005)
    assert f["expert_linear"] / 1e12 == pytest.approx(0.03, abs=0.005)
    assert f["attention"] / 1e12 == pytest.approx(0.09, abs=0.005)
    assert FAMILY.flops_per_sample(
        "full", Workload(batch_size=1, cameras=2, text_tokens=200, action_horizon=50)
    ) / 1e12 == pytest.approx(10.1, abs=0.05)
    # a third real camera adds a SigLIP pass and 256 prefix tokens
    assert forward_flops_per_sample(FULL, 3, 200, 50)["vision"] == pytest.approx(1.5 * f["vision"])


def test_shapes_of_loss_velocity_and_prefix():
    model, b = tiny(), batch()
    prefix, pad = model.embed_prefix(b)
    slots = 3  # community: two cameras and a masked placeholder
    assert prefix.shape == (2, slots * TINY.vision.tokens + 24, TINY.llm.width)
    assert not pad[:, 2 * TINY.vision.tokens : 3 * TINY.vision.tokens].any()  # placeholder slot masked
    v = model.velocity(b, b["noise"], b["time"])
    assert v.shape == (2, 6, TINY.action_dim)
    loss = model.loss(b)
    assert loss.dim() == 0 and torch.isfinite(loss)


def test_mask_semantics():
    # 2 prefix tokens, 1 padded prefix token, 1 more prefix token, then 2 action tokens
    pad = torch.tensor([[True, True, False, True, True, True]])
    cum = torch.tensor([[0, 0, 0, 0, 1, 1]])
    m = bool_mask(pad, cum, pad, cum)[0]
    prefix, suffix, padded = [0, 1, 3], [4, 5], 2
    for i in prefix:
        assert m[i, prefix].all() and not m[i, suffix].any()  # bidirectional prefix, blind to the suffix
    for i in suffix:
        assert m[i, prefix + suffix].all()  # actions see the valid prefix and each other
    assert not m[padded].any() and not m[:, padded].any()  # padding neither sees nor is seen


def test_positions_skip_padding_and_pruning_keeps_them():
    model, b = tiny(), batch()
    _, pad = model.embed_prefix(b)
    positions = pad.long().cumsum(1) - 1
    n = TINY.vision.tokens
    # the placeholder slot does not advance positions: text starts right after the two real cameras
    assert (positions[:, 3 * n] == 2 * n).all()
    pruned = tiny({"camera_slots": "auto"})
    _, pad2 = pruned.embed_prefix(b)
    pos2 = pad2.long().cumsum(1) - 1
    valid = pad[:, : 2 * n].all() and pad2.shape[1] == pad.shape[1] - n
    assert valid
    assert torch.equal(pos2[:, 2 * n :], positions[:, 3 * n :])  # text positions unchanged by pruning


@pytest.mark.parametrize("slots", [3, "auto"])
def test_batched_cameras_match_one_vision_call_per_camera(slots):
    """`batch_cameras` runs SigLIP once over [B * N] images: the prefix (the placeholder slot's too), its mask, the
    loss and every gradient as with one call per camera."""
    b = batch()
    per_camera, batched = tiny({"camera_slots": slots}), tiny({"camera_slots": slots, "batch_cameras": True})
    assert not per_camera.batch_cameras and batched.batch_cameras
    (prefix, pad), (prefix2, pad2) = per_camera.embed_prefix(b), batched.embed_prefix(b)
    assert torch.equal(pad2, pad)
    torch.testing.assert_close(prefix2, prefix, rtol=1e-6, atol=1e-6)
    # the camera order within each sample: the second camera's tokens follow the first's
    n = TINY.vision.tokens
    torch.testing.assert_close(prefix2[:, n : 2 * n], per_camera.vision(b["images"][:, 1]), rtol=1e-6, atol=1e-6)
    losses = [model.loss(b) for model in (per_camera, batched)]
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=1e-7)
    for loss in losses:
        loss.backward()
    for (name, p), p2 in zip(per_camera.named_parameters(), batched.parameters()):
        if p.grad is not None:
            torch.testing.assert_close(p2.grad, p.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_fc1_bias_in_the_gelu_is_the_same_mlp():
    """`vision_fc1_bias: gelu` sets every SigLIP MLP to a GEMM without bias and the bias added before the GELU: the
    loss and every gradient as nn.Linear's addmm (fp32, so only summation order differs)."""
    b = batch()
    plain, split = tiny(), tiny({"vision_fc1_bias": "gelu"})
    mlps = [m for m in split.modules() if isinstance(m, VisionMLP)]
    assert mlps and all(m.bias_in_gelu for m in mlps)
    assert not any(m.bias_in_gelu for m in plain.modules() if isinstance(m, VisionMLP))
    losses = [model.loss(b) for model in (plain, split)]
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=1e-7)
    for loss in losses:
        loss.backward()
    grads = {n: p.grad for n, p in split.named_parameters() if p.grad is not None}
    assert any(n.endswith("mlp.fc1.bias") for n in grads)
    for name, p in plain.named_parameters():
        if p.grad is not None:
            torch.testing.assert_close(grads[name], p.grad, rtol=1e-5, atol=1e-6, msg=name)


def test_padding_is_invisible_to_valid_tokens():
    """Changing what sits in padded text positions or the placeholder image changes nothing."""
    model, b = tiny(), batch()
    base = model.velocity(b, b["noise"], b["time"])
    b2 = dict(b)
    b2["tokens"] = torch.where(b["token_masks"], b["tokens"], torch.randint_like(b["tokens"], 1, TINY.vocab))
    assert torch.allclose(model.velocity(b2, b["noise"], b["time"]), base, atol=1e-6)
    # prefix tokens never see the suffix: the prefix K/V cache does not depend on the actions
    assert not torch.allclose(model.velocity(b, b["noise"] * 0.5, b["time"]), base)


def test_loss_falls_on_a_fixed_batch():
    torch.manual_seed(0)
    model, b = tiny(), batch()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    losses = []
    for _ in range(15):
        loss = model.loss(b)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert all(b < a for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < 0.8 * losses[0], losses


def test_gradient_reaches_every_parameter_on_the_loss_path():
    model, b = tiny(), batch()
    model.loss(b).backward()
    no_grad = {n for n, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0}
    # The actions read the prefix only through its keys and values, so the last layer's prefix query,
    # output projection, post-norm and MLP and the prefix's final norm shape inference outputs alone
    # (the reference computes them in training all the same).
    last = f"backbone.layers.{TINY.llm.layers - 1}.prefix."
    assert no_grad == {"backbone.prefix_norm.weight"} | {
        last + n
        for n in (
            "q_proj.weight",
            "o_proj.weight",
            "post_norm.weight",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
        )
    }
    assert set(model.parameters_off_the_loss_path()) == no_grad


def tail_grads(model) -> dict:
    """The gradients of the parameters `prefix_tail: false` skips (the parameters off the loss path but the last
    layer's prefix query, which still runs: its rows of the attention get zero gradients)."""
    tail = {n for n in model.parameters_off_the_loss_path() if not n.endswith(".prefix.q_proj.weight")}
    return {n: p.grad for n, p in model.named_parameters() if n in tail}


@pytest.mark.parametrize("compile_mode, recompute", [("none", "none"), ("none", "nested-full"), ("per-layer", "none")])
def test_skipping_the_prefix_tail_keeps_the_loss_and_every_gradient_it_reaches(compile_mode, recompute):
    """`prefix_tail: false` drops the last layer's prefix output projection, post-norm and MLP and the prefix's
    final norm: the same loss and the same gradients bit for bit, and the skipped parameters get no gradient.
    A compiled layer (AOTAutograd, here its aot_eager backend) runs the backward of an output nobody read on zero
    gradients, so there those parameters got zeros (which AdamW then decays) instead of none."""
    wl = replace(WORKLOAD, compile_backend="aot_eager")
    runs = {}
    for tail in (True, False):
        opts = parse_options({"recompute": recompute, "compile": compile_mode, "prefix_tail": tail})
        model = FAMILY.build("tiny", opts, wl, "cpu", torch.float32, 0).model
        loss = model.loss(batch())
        loss.backward()
        runs[tail] = (loss.detach(), {n: p.grad for n, p in model.named_parameters()}, tail_grads(model))
    (loss_full, grads_full, tail_full), (loss_skip, grads_skip, tail_skip) = runs[True], runs[False]
    assert torch.equal(loss_full, loss_skip)
    assert len(tail_skip) == 6 and all(g is None for g in tail_skip.values())
    for name in set(grads_full) - set(tail_full):
        assert (grads_full[name] is None) == (grads_skip[name] is None), name
        assert grads_full[name] is None or torch.equal(grads_full[name], grads_skip[name]), name
    if compile_mode == "none":  # eager autograd never reaches the tail's weights (recomputed or not)
        assert all(g is None for g in tail_full.values())
    else:  # the compiled last layer ran their backward on zeros (the final norm is a unit of its own)
        assert all(g is not None and not g.any() for n, g in tail_full.items() if "prefix_norm" not in n)


def test_sampling_is_the_same_with_the_prefix_tail_skipped():
    """Inference fills the keys and values of every layer from the prefix and never reads its output either."""
    b, noise = batch(), torch.randn(WORKLOAD.batch_size, WORKLOAD.action_horizon, TINY.action_dim)
    full, skipped = tiny(), tiny({"prefix_tail": False})
    assert torch.equal(full.eval().sample_actions(b, noise), skipped.eval().sample_actions(b, noise))


def test_the_skip_prefix_tail_rung_names_the_forward_it_skips():
    full = Workload(batch_size=32, cameras=2, text_tokens=200, action_horizon=50, model_size="full")
    (note,) = FAMILY.rung_notes({"prefix_tail": True}, {"prefix_tail": False}, full)
    # 712 prefix tokens x (the 2048 x 2048 output projection + the 3 x 2048 x 16384 MLP) x 2 FLOPs
    expected = 2 * 712 * (2048 * 2048 + 3 * 2048 * 16384) / 1e9
    assert f"{expected:.0f} GFLOP/sample forward" in note and "zero gradients" in note
    assert FAMILY.rung_notes({"prefix_tail": False}, {"prefix_tail": False}, full) == []


def test_sample_actions_shape_and_determinism():
    model, b = tiny(), batch()
    model.eval()
    a1 = model.sample_actions(b, generator=torch.Generator().manual_seed(3))
    a2 = model.sample_actions(b, generator=torch.Generator().manual_seed(3))
    a3 = model.sample_actions(b, generator=torch.Generator().manual_seed(4))
    assert a1.shape == (2, model.default_horizon, TINY.action_dim)
    assert torch.equal(a1, a2) and not torch.allclose(a1, a3)


def test_sample_actions_cache_matches_full_forward():
    """One Euler step through the KV cache equals the joint training forward at t=1."""
    model, b = tiny(), batch()
    noise = b["noise"]
    x = model.sample_actions(b, noise=noise, steps=1)
    v = model.velocity(b, noise, torch.ones(2))
    assert torch.allclose(x, noise - v, atol=1e-5)


def test_same_seed_same_model_and_batches():
    a, b = tiny(seed=5), tiny(seed=5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    b1 = FAMILY.make_batches("tiny", WORKLOAD, 2, "cpu", torch.float32, 7)
    b2 = FAMILY.make_batches("tiny", WORKLOAD, 2, "cpu", torch.float32, 7)
    assert all(torch.equal(x[k], y[k]) for x, y in zip(b1, b2) for k in x)
    assert not torch.equal(b1[0]["noise"], b1[1]["noise"])  # each step its own noise and time
    # realistic text padding: prompts of 48-80 tokens in the 200-token text budget
    full = FAMILY.make_batches("full", replace(WORKLOAD, batch_size=8, text_tokens=200), 1, "cpu", torch.float32, 0)[0]
    lengths = full["token_masks"].sum(1)
    assert full["images"].shape == (8, 2, 3, 224, 224)
    assert lengths.min() >= 48 and lengths.max() <= 80 and len(set(lengths.tolist())) > 1
    assert (full["tokens"][~full["token_masks"]] == 0).all()


def test_flow_time_follows_beta():
    from models.pi05.batch import sample_flow_time

    t = sample_flow_time(200_000, torch.Generator().manual_seed(0))
    assert t.min() >= 0.001 and t.max() <= 1.0
    # Beta(1.5, 1) has mean 0.6: scaled by 0.999 and shifted by 0.001
    assert t.mean().item() == pytest.approx(0.6 * 0.999 + 0.001, abs=3e-3)
