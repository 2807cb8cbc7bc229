"""GR00T N1.6 model: parameter counts, FLOPs, shapes, flow matching, attention routing, trainable set, padding,
lm_head, sampling and batches (CPU, tiny model, fp32 unless a test says otherwise)."""

import dataclasses
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from models.gr00t.attention import causal_padding_mask, key_mask
from models.gr00t.batch import INSTRUCTION_TOKENS, LIBERO_PANDA, make_batch, make_batches, non_image_tokens, to_device
from models.gr00t.config import FULL, TINY
from models.gr00t.flops import forward_flops_per_sample, train_flops_per_sample
from models.gr00t.model import (
    Gr00tModel,
    apply_mixed_precision,
    block_reads,
    init_weights,
    resize_position_grid,
    set_trainable,
    unused_pooling_head_parameters,
)
from models.workload import Workload

WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=50, action_horizon=6)


def count(module) -> int:
    return sum(p.numel() for p in module.parameters())


def tiny(seed=0, cfg=TINY):
    model = Gr00tModel(cfg)
    init_weights(model, seed)
    set_trainable(model)
    model.default_horizon = WORKLOAD.action_horizon
    return model.train()


def batch(seed=0, cfg=TINY, **overrides):
    wl = replace(WORKLOAD, **overrides)
    gen = torch.Generator().manual_seed(seed)
    return to_device(
        make_batch(cfg, wl.batch_size, wl.cameras, wl.text_tokens, wl.action_horizon, gen),
        "cpu",
        torch.float32,
    )


def seeded_loss(model, b, seed=0):
    torch.manual_seed(seed)  # the DiT's dropout draws from torch's RNG, as the reference's does
    return model.loss(b)


# ----------------------------------------------------------------------------- sizes and FLOPs


def test_full_parameter_counts_on_meta_device():
    with torch.device("meta"):
        model = Gr00tModel(FULL)
    parts = {
        "vision": 412_442_352,  # SigLIP2 without its pooling head
        "mlp1": 13_644_800,
        "llm": 1_116_018_688,  # 16 layers of 50,336,000, tied embedding, final norm
        "vlln": 4_096,
        "dit": 1_091_722_240,
        "state_encoder": 54_607_872,
        "action_encoder": 232_931_328,
        "action_pos": 1_572_864,
        "action_decoder": 37_785_600,
    }
    for name, expected in parts.items():
        assert count(getattr(model, name)) == expected, name
    assert count(model.llm.layers[0]) == 50_336_000
    assert count(model) == sum(parts.values()) == 2_960_729_840
    pooling_head = unused_pooling_head_parameters(FULL.vision)
    assert pooling_head == 15_238_352 and count(model) + pooling_head == 2_975_968_192
    trainable = set_trainable(model)
    assert sum(p.numel() for p in model.parameters() if p.requires_grad) == 1_619_968_000
    assert {n.split(".")[0] for n in trainable} == {
        "llm",
        "vlln",
        "dit",
        "state_encoder",
        "action_encoder",
        "action_pos",
        "action_decoder",
    }
    assert {n.split(".")[2] for n in trainable if n.startswith("llm.")} == {"12", "13", "14", "15"}
    # every block holds to_q/to_k/to_v/to_out, the AdaLN linear and the FeedForward; cross blocks read 2048-wide
    assert [b.reads for b in model.dit.blocks[:5]] == ["text", "self", "image", "self", "text"]
    assert model.dit.blocks[0].attn.to_k.in_features == 2048 and model.dit.blocks[1].attn.to_k.in_features == 1536


def test_full_flops_match_the_published_estimate():
    f = forward_flops_per_sample(FULL, cameras=2, vl_tokens=220, action_horizon=50)
    gflop = {k: v / 1e9 for k, v in f.items()}
    assert gflop["vision"] == pytest.approx(437.9, abs=0.05)
    assert gflop["mlp1"] == pytest.approx(3.5, abs=0.05)
    assert gflop["llm_frozen"] + gflop["llm_trainable"] == pytest.approx(357.5, abs=0.05)
    assert gflop["lm_head"] == pytest.approx(136.7, abs=0.05)
    # the estimate files the DiT's output projection (0.16 GFLOP) under the encoders
    assert gflop["dit"] + gflop["action_io"] == pytest.approx(130.7 + 1.0, abs=0.05)
    assert sum(gflop.values()) == pytest.approx(1067, abs=0.5)
    assert train_flops_per_sample(FULL, 2, 220, 50) / 1e12 == pytest.approx(1.51, abs=0.005)
    assert train_flops_per_sample(FULL, 2, 220, 50, lm_head=False) / 1e12 == pytest.approx(1.37, abs=0.005)
    backward = train_flops_per_sample(FULL, 2, 220, 50) - sum(f.values())
    assert backward / 1e9 == pytest.approx(263 + 179, abs=1)


def test_tiny_flops_match_a_hand_count():
    # TINY: vision 56px/14 -> 16 patches of 588 inputs, width 32, mlp 64, 2 layers; 4 tokens per view of 128.
    # LLM width 64, q 64, kv 32, mlp 128, 4 layers (top 2 trainable), vocab 512; DiT width 64, mlp 256,
    # out 32, 4 blocks (text, self, image, self); head: state/action 16, hidden 32. 2 views, L = 30, horizon 6.
    vision = 2 * (16 * 588 * 32 + 2 * (16 * (4 * 32 * 32 + 2 * 32 * 64) + 2 * 16 * 16 * 32))
    mlp1 = 2 * 4 * (128 * 64 + 64 * 64)
    llm_layer = 30 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128) + 2 * (30 * 31 // 2) * 64
    lm_head = 30 * 64 * 512
    t = 7
    self_block = t * (4 * 64 * 64 + 2 * 64 * 256) + 2 * t * t * 64
    cross_block = t * (2 * 64 * 64 + 2 * 64 * 256) + 30 * 2 * 64 * 64 + 2 * t * 30 * 64
    dit = (256 * 64 + 64 * 64) + 2 * (self_block + cross_block) + 4 * 64 * 128 + 64 * 128 + t * 64 * 32
    heads = (16 * 32 + 32 * 64) + 6 * (16 * 64 + 128 * 64 + 64 * 64) + t * (32 * 32 + 32 * 16)
    f = forward_flops_per_sample(TINY, cameras=2, vl_tokens=30, action_horizon=6)
    assert f == {
        "vision": 2 * vision,
        "mlp1": 2 * mlp1,
        "llm_frozen": 2 * 2 * llm_layer,
        "llm_trainable": 2 * 2 * llm_layer,
        "lm_head": 2 * lm_head,
        "dit": 2 * dit,
        "action_io": 2 * heads,
    }
    forward = 2 * (vision + mlp1 + 4 * llm_layer + lm_head + dit + heads)
    assert train_flops_per_sample(TINY, 2, 30, 6) == forward + 2 * 2 * (2 * llm_layer + dit + heads)
    assert train_flops_per_sample(TINY, 2, 30, 6, lm_head=False) == forward - 2 * lm_head + 2 * 2 * (
        2 * llm_layer + dit + heads
    )


# ----------------------------------------------------------------------------- forward


def test_shapes_through_the_whole_forward():
    model, b = tiny(), batch()
    n, v = 2 * 2, TINY.vision
    assert model.vision(b["images"].flatten(0, 1)).shape == (n, v.patches**2, v.width)
    assert model.embed_images(b["images"]).shape == (n, v.tokens, TINY.llm.width)
    vl = model.encode_vl(b)
    length = b["input_ids"].shape[1]
    assert vl.features.shape == (2, length, TINY.llm.width)
    assert (vl.image.sum(1) == 2 * v.tokens).all()  # two views of 4 tokens each
    assert (vl.text.sum(1) + vl.image.sum(1) == b["attention_mask"].sum(1)).all()
    state = model.encode_state(b["state"], b["embodiment_id"])
    assert state.shape == (2, 1, TINY.dit.width)
    buckets = torch.tensor([0, 999])
    assert model.velocity(vl, state, b["noise"], buckets, b["embodiment_id"]).shape == (2, 6, TINY.head.action_dim)
    hidden, logits = model.llm(model.llm.embed_tokens(b["input_ids"]), b["attention_mask"])
    assert hidden.shape == (2, length, TINY.llm.width) and logits.shape == (2, length, TINY.llm.vocab)
    loss = model.loss(b)
    assert loss.dim() == 0 and torch.isfinite(loss)


def test_image_features_fill_the_image_tokens_in_order():
    model, b = tiny(), batch()
    seen = {}

    def capture(module, args):
        seen["x"] = args[0]  # the LLM's input embeddings

    hook = model.llm.layers[0].register_forward_pre_hook(capture)
    model.encode_vl(b)
    hook.remove()
    vit = model.embed_images(b["images"])  # [B*V, tokens, W]
    x, ids = seen["x"], b["input_ids"]
    for i in range(2):
        positions = (ids[i] == TINY.image_token_id).nonzero().flatten()
        assert torch.equal(x[i, positions], vit[2 * i : 2 * i + 2].flatten(0, 1))  # view 0 then view 1
        text = (ids[i] != TINY.image_token_id).nonzero().flatten()
        assert torch.equal(x[i, text], model.llm.embed_tokens(ids[i, text]))


def test_loss_is_the_flow_matching_target_on_the_same_noise_and_time():
    model, b = tiny(), batch()
    loss = seeded_loss(model, b)
    torch.manual_seed(0)
    vl = model.encode_vl(b)
    state = model.encode_state(b["state"], b["embodiment_id"])
    t = (1 - b["beta_sample"]) * 0.999  # u ~ Beta(1.5, 1) -> t in [0, 0.999]
    x_t = (1 - t)[:, None, None] * b["noise"] + t[:, None, None] * b["actions"]
    buckets = (t * 1000).long()
    assert buckets.max() <= 999
    pred = model.velocity(vl, state, x_t, buckets, b["embodiment_id"])
    mask = b["action_mask"]
    expected = ((pred - (b["actions"] - b["noise"])) ** 2 * mask).sum() / mask.sum()
    assert torch.allclose(loss, expected, rtol=1e-6)
    assert mask[..., 7:].sum() == 0 and mask[..., :7].all()  # LIBERO's 7 action dims of the 16 (tiny)


def test_cross_attention_blocks_see_only_their_kind_of_token():
    model, b = tiny(), batch()
    model.eval()
    vl = model.encode_vl(b)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn((2, 7, TINY.dit.width), generator=gen)
    temb = model.dit.time_embed(torch.tensor([10, 500]))
    padding = ~b["attention_mask"]
    assert padding.any()  # the two prompts differ in length: the shorter one is left-padded

    def out(block, features, valid):
        return block(x, temb, features, key_mask(valid))

    def perturbed(where):
        return vl.features + 5 * torch.randn(vl.features.shape, generator=gen) * where[..., None]

    for index, own, other in ((0, vl.text, vl.image), (2, vl.image, vl.text)):
        block = model.dit.blocks[index]
        assert block.reads == ("text" if index == 0 else "image")
        base = out(block, vl.features, own)
        assert torch.allclose(out(block, perturbed(other | padding), own), base, atol=1e-6)
        assert not torch.allclose(out(block, perturbed(own), own), base, atol=1e-3)
    assert [block_reads(i, 2) for i in range(8)] == ["text", "self", "image", "self"] * 2


def test_llm_attention_is_causal_among_valid_tokens():
    valid = torch.tensor([[False, False, True, True, True]])
    m = causal_padding_mask(valid)[0, 0]
    assert m[4].tolist() == [False, False, True, True, True]
    assert m[2].tolist() == [False, False, True, False, False]
    assert m[0].tolist() == [True, False, False, False, False]  # a padding row reads only itself (stays finite)


def test_gradients_reach_exactly_the_trainable_set():
    model, b = tiny(), batch()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    seeded_loss(model, b).backward()
    with_grad = {n for n, p in model.named_parameters() if p.grad is not None}
    assert with_grad == trainable
    top = {f"llm.layers.{i}" for i in (2, 3)}  # TINY: 4 layers, the top 2 trainable
    assert {".".join(n.split(".")[:3]) for n in trainable if n.startswith("llm.")} == top
    assert not any(n.startswith(("vision.", "mlp1.", "llm.embed_tokens", "llm.norm")) for n in trainable)
    for name, p in model.named_parameters():
        if p.grad is not None and not name.startswith("action_pos"):  # positions past the horizon get zeros
            assert p.grad.abs().sum() > 0, name


def test_vl_padding_to_a_fixed_length_leaves_the_loss_unchanged():
    model, b = tiny(), batch()
    base = seeded_loss(model, b)
    length = b["input_ids"].shape[1]
    model.vl_pad = length + 9
    padded = seeded_loss(model, b)
    assert torch.allclose(padded, base, rtol=1e-5, atol=0)  # RoPE positions shift; relative angles do not
    model.vl_pad = length - 1
    with pytest.raises(ValueError, match="more than vl_pad"):
        model.loss(b)


def test_skipping_the_lm_head_leaves_the_loss_unchanged():
    model, b = tiny(), batch()
    base = seeded_loss(model, b)
    model.llm.lm_head = False
    assert model.llm(model.llm.embed_tokens(b["input_ids"]), b["attention_mask"])[1] is None
    assert torch.equal(seeded_loss(model, b), base)


def test_dropout_follows_torch_rng_and_train_mode():
    model, b = tiny(), batch()
    dropouts = [m for m in model.dit.blocks[0].modules() if isinstance(m, torch.nn.Dropout)]
    assert len(dropouts) == 4 and all(m.p == 0.2 for m in dropouts)
    assert torch.equal(seeded_loss(model, b, 1), seeded_loss(model, b, 1))
    assert not torch.equal(seeded_loss(model, b, 1), seeded_loss(model, b, 2))
    model.eval()
    assert torch.equal(seeded_loss(model, b, 1), seeded_loss(model, b, 2))


def test_loss_falls_on_a_fixed_batch():
    model, b = tiny(), batch()
    model.eval()  # no dropout noise in the trend
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=2e-3)
    losses = []
    for _ in range(12):
        loss = model.loss(b)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert all(b < a for a, b in zip(losses, losses[1:])) and losses[-1] < 0.92 * losses[0], losses


def test_mixed_precision_frozen_bf16_trainable_fp32_under_autocast():
    model = tiny()
    apply_mixed_precision(model, torch.bfloat16)
    for name, p in model.named_parameters():
        assert p.dtype == (torch.float32 if p.requires_grad else torch.bfloat16), name
    assert model.autocast_dtype == torch.bfloat16
    b = to_device(make_batch(TINY, 2, 2, 50, 6, torch.Generator().manual_seed(0)), "cpu", torch.bfloat16)
    assert b["images"].dtype == torch.bfloat16 and b["beta_sample"].dtype == torch.float32
    loss = seeded_loss(model, b)
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    loss.backward()
    assert all(p.grad.dtype == torch.float32 for p in model.parameters() if p.grad is not None)
    fp32 = tiny()
    apply_mixed_precision(fp32, torch.float32)
    assert fp32.autocast_dtype is None and all(p.dtype == torch.float32 for p in fp32.parameters())


def test_state_dropout_adds_a_trainable_mask_token():
    cfg = dataclasses.replace(TINY, head=dataclasses.replace(TINY.head, state_dropout=0.8))
    model, b = tiny(cfg=cfg), batch(cfg=cfg)
    assert model.state_mask_token.requires_grad and model.state_mask_token.numel() == TINY.dit.width
    state = model.encode_state(b["state"], b["embodiment_id"])
    torch.manual_seed(0)
    dropped = model.encode_state(b["state"], b["embodiment_id"], drop=True)
    replaced = (dropped == model.state_mask_token).all(-1).flatten()
    kept = (dropped == state).all(-1).flatten()
    assert (replaced | kept).all()
    seeded_loss(model, b).backward()
    assert model.state_mask_token.grad is not None


# ----------------------------------------------------------------------------- inference


def test_sample_actions_shape_and_determinism():
    model, b = tiny(), batch()
    model.eval()
    a1 = model.sample_actions(b, generator=torch.Generator().manual_seed(3))
    a2 = model.sample_actions(b, generator=torch.Generator().manual_seed(3))
    a3 = model.sample_actions(b, generator=torch.Generator().manual_seed(4))
    assert a1.shape == (2, 6, TINY.head.action_dim)
    assert torch.equal(a1, a2) and not torch.allclose(a1, a3)


def test_one_euler_step_is_noise_plus_the_velocity_at_t0():
    model, b = tiny(), batch()
    model.eval()
    x = model.sample_actions(b, noise=b["noise"], steps=1)
    vl = model.encode_vl(b)
    state = model.encode_state(b["state"], b["embodiment_id"])
    v = model.velocity(vl, state, b["noise"], torch.zeros(2, dtype=torch.long), b["embodiment_id"])
    assert torch.allclose(x, b["noise"] + v, atol=1e-6)


def test_position_grid_resize():
    pos = torch.randn(16, 8)
    assert torch.allclose(resize_position_grid(pos, 4, 4, 4), pos, atol=1e-6)  # same size: identity (skipped)
    assert resize_position_grid(pos, 4, 6, 6).shape == (36, 8)
    model, b = tiny(), batch()
    bigger = F.interpolate(b["images"].flatten(0, 1), size=(70, 70))  # 5x5 patches: the grid is resized
    assert model.vision(bigger).shape == (4, 25, TINY.vision.width)


# ----------------------------------------------------------------------------- batches


def test_batches_are_seeded_and_shaped_like_the_libero_run():
    wl = replace(WORKLOAD, batch_size=8, text_tokens=92, action_horizon=50)
    b1 = make_batches(FULL, wl, 2, "cpu", torch.float32, 7)
    b2 = make_batches(FULL, wl, 2, "cpu", torch.float32, 7)
    assert all(torch.equal(x[k], y[k]) for x, y in zip(b1, b2) for k in x)
    assert not torch.equal(b1[0]["noise"], b1[1]["noise"])
    b = b1[0]
    ids, valid = b["input_ids"], b["attention_mask"]
    assert b["images"].shape == (8, 2, 3, 224, 224) and -1 <= b["images"].min() and b["images"].max() <= 1
    assert ((ids == FULL.image_token_id).sum(1) == 128).all()
    lengths = valid.sum(1)
    lo, hi = (non_image_tokens(2, n) + 128 for n in INSTRUCTION_TOKENS)
    assert lengths.min() >= lo and lengths.max() <= hi <= 220 and len(set(lengths.tolist())) > 1
    assert ids.shape[1] == lengths.max()  # padded to the longest prompt of the batch
    assert (valid.long().diff(dim=1) >= 0).all() and (ids[~valid] == FULL.pad_token_id).all()  # left padding
    assert b["state"].shape == (8, 1, 128) and (b["state"][..., 8:] == 0).all()
    assert b["actions"].shape == b["noise"].shape == b["action_mask"].shape == (8, 50, 128)
    assert (b["action_mask"].sum((1, 2)) == 50 * 7).all()
    assert (b["embodiment_id"] == LIBERO_PANDA).all()


def test_flow_time_follows_the_reference_distribution():
    from models.gr00t.batch import sample_beta

    u = sample_beta(200_000, torch.Generator().manual_seed(0))
    t = (1 - u) * 0.999
    assert 0 <= t.min() and t.max() <= 0.999
    assert u.mean().item() == pytest.approx(0.6, abs=3e-3)  # Beta(1.5, 1) has mean 1.5 / 2.5


def test_full_252_is_the_released_model_at_the_references_view_size():
    """full-252: the same parameters as full, an 18x18 patch grid from 252-pixel views and 81 tokens per view (2 x 81
    + 92 = 254 VL tokens for the FLOPs); its processor makes 252-pixel images and 81 <IMG_CONTEXT> per view."""
    from models import get_family
    from models.gr00t import SIZES, vl_tokens

    full, wide = SIZES["full"], SIZES["full-252"]
    with torch.device("meta"):
        shapes = [{k: v.shape for k, v in Gr00tModel(cfg).state_dict().items()} for cfg in (full, wide)]
    assert shapes[0] == shapes[1]
    assert (wide.vision.image_size, wide.vision.patches, wide.vision.tokens) == (252, 18, 81)
    ladder = Workload(batch_size=16, cameras=2, text_tokens=92, action_horizon=50)
    assert vl_tokens("full-252", ladder) == 254 and vl_tokens("full", ladder) == 220
    family = get_family("gr00t")
    assert family.flops_per_sample("full-252", ladder) > 1.05 * family.flops_per_sample("full", ladder)
    processor = family.data_processor("full-252", ladder, None, None)
    frames = torch.randint(0, 256, (1, 2, 256, 256, 3), dtype=torch.uint8)
    raw = {"frames": frames, "state": torch.zeros(1, 8), "task": ["Put the bowl on the plate."]}
    batch = processor.finish(processor.prepare(raw), torch.float32)
    assert batch["images"].shape == (1, 2, 3, 252, 252)
    assert (batch["input_ids"] == wide.image_token_id).sum() == 2 * 81


def test_a_view_size_off_the_learned_grid_trains_end_to_end():
    """What full-252 relies on, at tiny size: views of 84 pixels (a 6x6 patch grid against the learned 4x4), the
    position grid resized, 9 tokens per view filling the prompt's image tokens, a finite loss and gradients."""
    cfg = replace(TINY, vision=replace(TINY.vision, image_size=84))
    model, b = tiny(cfg=cfg), batch(cfg=cfg)
    assert b["images"].shape[-1] == 84 and ((b["input_ids"] == cfg.image_token_id).sum(1) == 2 * 9).all()
    loss = seeded_loss(model, b)
    loss.backward()
    assert torch.isfinite(loss) and model.vision.pos_embed.weight.grad is None  # SigLIP2 stays frozen
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
