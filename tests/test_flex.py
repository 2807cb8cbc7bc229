"""FlexAttention (`attention: flex`) against the eager community kernel.

On CPU flex runs forward only (eager, unfused), so forward parity is tested here on the tiny model;
gradients need a GPU and are tested only where one exists.
"""

import pytest
import torch

from models.pi05 import FAMILY, TINY, parse_options
from models.pi05.attention import eager_attention, prepare_mask
from models.pi05.batch import make_batch, to_device
from models.pi05.flex import block_mask, eager_attention_activation_bytes, flex_joint_attention
from models.workload import Workload

# 100 text tokens: prompts of 48..80 tokens leave padding in the prefix; 3 slots for 2 cameras add a
# masked placeholder image; 3*16 + 100 + 6 = 154 tokens span two 128-token blocks.
WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=100, action_horizon=6, seed=0)

pytestmark = pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")


def tiny(attention, device="cpu", seed=0):
    opts = parse_options({"attention": attention, "recompute": "none"})
    return FAMILY.build("tiny", opts, WORKLOAD, device, torch.float32, seed).model


def batch(device="cpu", seed=1):
    gen = torch.Generator().manual_seed(seed)
    b = make_batch(TINY, WORKLOAD.batch_size, WORKLOAD.cameras, WORKLOAD.text_tokens, WORKLOAD.action_horizon, gen)
    b["image_masks"][1, 1] = False  # a camera missing in one sample: masked, unlike the other row
    return to_device(b, device, torch.float32)


def random_mask(b, tk, tq, gen):
    """Prefix with random padding (0) then a suffix block (1) of tq tokens; queries are the last tq."""
    pad_k = torch.rand((b, tk), generator=gen) > 0.2
    pad_k[:, -tq:] = True
    pad_k[0, 10:26] = False  # a whole masked image slot
    cum_k = torch.zeros((b, tk), dtype=torch.int32)
    cum_k[:, tk - tq :] = 1
    return pad_k, cum_k


@pytest.mark.parametrize("tq, tk", [(150, 150), (30, 150), (7, 200)])
def test_flex_kernel_matches_eager_on_valid_rows(tq, tk):
    gen = torch.Generator().manual_seed(0)
    b, heads, dim = 2, 4, 16
    pad_k, cum_k = random_mask(b, tk, tq if tq < tk else 6, gen)
    pad_q, cum_q = pad_k[:, -tq:], cum_k[:, -tq:]
    q = torch.randn((b, heads, tq, dim), generator=gen)
    k, v = (torch.randn((b, 1, tk, dim), generator=gen) for _ in range(2))

    mask = prepare_mask("flex", pad_q, cum_q, pad_k, cum_k, torch.float32)
    assert mask.shape == (b, 1, tq, tk) and mask.BLOCK_SIZE == (128, 128)
    out = flex_joint_attention(q, k, v, mask, 0.25)
    ref = eager_attention(q, k, v, prepare_mask("eager", pad_q, cum_q, pad_k, cum_k, torch.float32), 0.25)

    assert not out.isnan().any()
    valid = pad_q[:, None, :, None].expand_as(out)
    torch.testing.assert_close(out[valid], ref[valid], atol=1e-5, rtol=1e-5)
    assert (out[~valid] == 0).all()  # padding queries attend nothing


def test_block_mask_skips_blocks_the_prefix_cannot_see():
    # 256 prefix tokens then 128 action tokens: prefix query blocks never read the action block.
    pad = torch.ones((1, 384), dtype=torch.bool)
    cum = torch.zeros((1, 384), dtype=torch.int32)
    cum[:, 256:] = 1
    dense = block_mask(pad, cum, pad, cum).to_dense()[0, 0]  # [q blocks, kv blocks], 1 = visited
    assert dense.tolist() == [[1, 1, 0], [1, 1, 0], [1, 1, 1]]


def run_both(fn):
    out = {}
    for kind in ("eager", "flex"):
        model = tiny(kind)
        with torch.no_grad():
            out[kind] = fn(model)
    return out["eager"], out["flex"]


def test_model_velocity_and_loss_match_eager():
    b = batch()
    tt = b["time"][:, None, None]
    x_t = tt * b["noise"] + (1 - tt) * b["actions"]
    eager, flex = run_both(lambda m: (m.velocity(b, x_t, b["time"]), m.loss(b)))
    torch.testing.assert_close(flex[0], eager[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(flex[1], eager[1], atol=1e-5, rtol=1e-5)


def test_sample_actions_match_eager():
    # The prefix runs once into the KV cache (Tq = Tk), then 10 Euler steps attend with Tq < Tk.
    b = batch()
    noise = b["noise"]
    eager, flex = run_both(lambda m: m.sample_actions(b, noise=noise, steps=10))
    torch.testing.assert_close(flex, eager, atol=1e-5, rtol=1e-5)


def test_eager_activation_bytes_are_what_autograd_saves():
    b, heads, tq, tk, dim = 2, 8, 40, 56, 16
    q = torch.randn((b, heads, tq, dim), dtype=torch.bfloat16, requires_grad=True)
    k, v = (torch.randn((b, 1, tk, dim), dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    pad_q, pad_k = torch.ones((b, tq), dtype=torch.bool), torch.ones((b, tk), dtype=torch.bool)
    cum_q, cum_k = torch.zeros((b, tq), dtype=torch.int32), torch.zeros((b, tk), dtype=torch.int32)
    mask = prepare_mask("eager", pad_q, cum_q, pad_k, cum_k, torch.bfloat16)

    saved = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        eager_attention(q, k, v, mask, dim**-0.5)
    # flex keeps q, k and v too; everything else eager saved is the extra activation
    both = sum(t.numel() * t.element_size() for t in (q, k, v))
    assert sum(saved.values()) - both == eager_attention_activation_bytes(b, heads, tq, tk, 2, head_dim=dim)
    # Pi0.5, micro-batch 32, two cameras, bf16: just under 1 GiB per layer
    assert eager_attention_activation_bytes(32, 8, 762, 762, 2) / 2**30 == pytest.approx(0.993, abs=1e-3)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention has no backward on CPU")
def test_flex_gradients_match_eager_on_gpu():
    grads, losses = {}, {}
    for kind in ("eager", "flex"):
        model = tiny(kind, device="cuda")
        b = batch("cuda")
        loss = model.loss(b)
        loss.backward()
        losses[kind] = loss.detach()
        grads[kind] = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    torch.testing.assert_close(losses["flex"], losses["eager"], atol=1e-5, rtol=1e-5)
    assert grads["flex"].keys() == grads["eager"].keys()
    for name, g in grads["eager"].items():
        torch.testing.assert_close(grads["flex"][name], g, atol=1e-4, rtol=1e-4, msg=name)

    # A new batch of the same shapes (a new BlockMask and mask_mod closure) reuses the compiled kernel.
    with torch._dynamo.config.patch(error_on_recompile=True):
        model.loss(batch("cuda", seed=2)).backward()
