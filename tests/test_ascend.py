"""The Ascend A2 ladder: each rung equals the community path (tiny model, fp32, CPU), the NPU kernels
build the intended calls (torch_npu substituted by a stand-in) and match a CPU reference."""

import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from harness.ladder.rung import wrap_ddp
from harness.machine.hardware import ALLOCATOR_ENV, get_target
from harness.scenario import load_scenario
from models.npu import GroupedGateUp, NpuGateUp, fusion_attention
from models.pi05 import FAMILY, TINY, parse_options
from models.pi05.attention import bool_mask, eager_attention, prepare_mask

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = load_scenario(ROOT / "scenarios/pi05-ascend.yaml")
WORKLOAD = replace(SCENARIO.workload_for("cpu"), batch_size=2, text_tokens=40, action_horizon=6)


def build(options: dict):
    # the flow time comes from the batch here: the samplers are tested on their own below
    opts = parse_options({**options, "time_sampling": "harness"})
    built = FAMILY.build("tiny", opts, WORKLOAD, "cpu", torch.float32, seed=0)
    flags = FAMILY.ddp_flags(opts)
    if flags is None:
        return built.model
    FAMILY.prepare_for_ddp(built, flags)
    return wrap_ddp(built.model, flags, built.applied, SimpleNamespace(torch_device=torch.device("cpu")))


def loss_and_grads(model, batch):
    loss = FAMILY.loss(model, batch)
    loss.backward()
    grads = {}
    for name, p in model.named_parameters():
        # wrappers (recompute, DDP) hold the wrapped module as `.module`
        name = ".".join(part for part in name.split(".") if part != "module")
        grads[name] = torch.zeros_like(p) if p.grad is None else p.grad
    return loss.detach(), grads


def unfuse(grads: dict) -> dict:
    """Gradients of fused projections split back into the separate layout's names."""
    out = {}
    for name, g in grads.items():
        if ".qkv_proj.linear." in name:
            q, kv = TINY.llm.heads * TINY.llm.head_dim, TINY.llm.kv_heads * TINY.llm.head_dim
            base = name.split(".qkv_proj.linear.")[0]
            out[base + ".q_proj.weight"], out[base + ".k_proj.weight"], out[base + ".v_proj.weight"] = g.split(
                [q, kv, kv]
            )
        elif ".gate_up.linear." in name:
            base = name.split(".gate_up.linear.")[0]
            out[base + ".gate_proj.weight"], out[base + ".up_proj.weight"] = g.chunk(2)
        else:
            out[name] = g
    return out


@pytest.fixture(scope="module")
def batch():
    return FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.float32, seed=0)[0]


@pytest.fixture(scope="module")
def community(batch):
    loss, grads = loss_and_grads(build(SCENARIO.ladder[0].cumulative), batch)
    return loss, unfuse(grads)


@pytest.mark.parametrize("rung", [pytest.param(r, id=r.name) for r in SCENARIO.ladder[1:]])
def test_rung_matches_community_forward_and_gradients(rung, batch, community):
    loss, grads = loss_and_grads(build(rung.cumulative), batch)
    grads = unfuse(grads)
    assert abs(loss - community[0]) / community[0] <= 1e-5
    assert grads.keys() == community[1].keys()
    for name, g in grads.items():
        assert torch.allclose(g, community[1][name], rtol=1e-4, atol=1e-6), name


def test_ddp_static_holds_no_unused_parameters(batch):
    rung = next(r for r in SCENARIO.ladder if r.name == "ddp-static")
    model = build(rung.cumulative)
    FAMILY.loss(model, batch).backward()
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(p.grad is not None for _, p in trainable)
    assert model.find_unused_parameters is False and model.static_graph


def test_fused_qkv_still_loads_separate_checkpoints(batch):
    plain = build({"recompute": "none"})
    fused = FAMILY.build(
        "tiny",
        parse_options({"recompute": "none", "fused_qkv": True, "fused_gate_up": True}),
        WORKLOAD,
        "cpu",
        torch.float32,
        seed=1,
    ).model  # other weights
    fused.load_state_dict(plain.state_dict())
    with torch.no_grad():
        assert torch.equal(FAMILY.loss(fused, batch), FAMILY.loss(plain, batch))


@pytest.mark.parametrize("sampler", ["fast", "distributions"])
def test_flow_time_samplers_follow_beta(sampler):
    model = build({"recompute": "none"})
    model.time_sampling = sampler
    torch.manual_seed(0)
    t = model.flow_time({"actions": torch.zeros(20000, 1, 1)})
    u = ((t - 0.001) / 0.999).sort().values
    # Kolmogorov-Smirnov against Beta(1.5, 1)'s CDF x**1.5; 1.63/sqrt(n) is the 1% critical value
    ks = (torch.arange(1, len(u) + 1) / len(u) - u.clamp(0, 1) ** 1.5).abs().max().item()
    assert ks < 1.63 / math.sqrt(len(u))
    assert u.mean().item() == pytest.approx(0.6, abs=0.01)


class FakeTorchNpu:
    """Stand-in for torch_npu: records calls and computes them with plain torch on the CPU."""

    def __init__(self):
        self.calls = []

    def npu_fusion_attention(
        self, q, k, v, head_num, input_layout, *, atten_mask, scale, keep_prob, pre_tockens, next_tockens
    ):
        self.calls.append(
            dict(
                head_num=head_num,
                input_layout=input_layout,
                atten_mask=atten_mask,
                scale=scale,
                keep_prob=keep_prob,
                pre_tockens=pre_tockens,
                next_tockens=next_tockens,
                kv_heads=k.shape[1],
            )
        )
        k, v = k.repeat_interleave(q.shape[1] // k.shape[1], 1), v.repeat_interleave(q.shape[1] // v.shape[1], 1)
        scores = (q @ k.transpose(2, 3) * scale).masked_fill(atten_mask, float("-inf"))
        return (torch.nan_to_num(scores.softmax(-1)) @ v, None)

    def npu_grouped_matmul(self, xs, ws):
        self.calls.append([(tuple(x.shape), tuple(w.shape)) for x, w in zip(xs, ws)])
        return [x @ w for x, w in zip(xs, ws)]


def test_fusion_attention_call_and_mask_convention():
    torch.manual_seed(0)
    b, h, t, d = 2, 8, 12, 16
    q, k, v = torch.randn(b, h, t, d), torch.randn(b, 1, t, d), torch.randn(b, 1, t, d)
    pad = torch.ones(b, t, dtype=torch.bool)
    pad[0, 3] = False
    cum = torch.tensor([0] * 8 + [1] * 4).expand(b, -1)
    allowed = bool_mask(pad, cum, pad, cum)
    fake = FakeTorchNpu()
    out = fusion_attention(q, k, v, ~allowed[:, None], 0.25, backend=fake)
    call = fake.calls[0]
    assert call["head_num"] == 8 and call["input_layout"] == "BNSD" and call["kv_heads"] == 1  # GQA, no repeat
    assert call["atten_mask"].dtype == torch.bool and call["atten_mask"].shape == (b, 1, t, t)
    assert torch.equal(call["atten_mask"], ~allowed[:, None])  # True = masked, the kernel's convention
    assert call["scale"] == 0.25 and call["keep_prob"] == 1.0
    ref = eager_attention(q, k, v, prepare_mask("eager", pad, cum, pad, cum, torch.float32), 0.25)
    valid = pad[:, None, :, None].expand_as(ref)
    assert torch.allclose(out[valid], ref[valid], atol=1e-6)


def test_grouped_gate_up_forward_and_hand_written_backward():
    torch.manual_seed(0)
    gate, up = torch.nn.Linear(16, 32, bias=False), torch.nn.Linear(16, 32, bias=False)
    x = torch.randn(3, 5, 16, requires_grad=True)
    fake = FakeTorchNpu()
    g, u = NpuGateUp(gate, up, backend=fake)(x)
    assert fake.calls[0] == [((15, 16), (16, 32)), ((15, 16), (16, 32))]  # one grouped call, two GEMMs
    (g.sin() * u).sum().backward()
    grads = [x.grad.clone(), gate.weight.grad.clone(), up.weight.grad.clone()]
    for p in (x, gate.weight, up.weight):
        p.grad = None
    (gate(x).sin() * up(x)).sum().backward()
    for mine, ref in zip(grads, [x.grad, gate.weight.grad, up.weight.grad]):
        assert torch.allclose(mine, ref, atol=1e-5)
    assert len(fake.calls) == 3  # forward, input gradients, weight gradients: each one grouped call
    assert torch.autograd.gradcheck(
        lambda a, wg, wu: GroupedGateUp.apply(a, wg, wu, fake),
        (
            torch.randn(4, 6, dtype=torch.double, requires_grad=True),
            torch.randn(5, 6, dtype=torch.double, requires_grad=True),
            torch.randn(5, 6, dtype=torch.double, requires_grad=True),
        ),
    )


def test_ascend_target_and_allocator():
    target = get_target("ascend-a2")
    assert target.backend == "npu" and target.peak_bf16_flops is None  # no unverified peak, no MFU
    assert ALLOCATOR_ENV["npu"] == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}
