"""The community rung is openpi's own training path, point by point: which modules recompute, SigLIP's
attention kernel, the parameters kept in fp32 in a bf16 model, the optimizer implementation and checkpoints
that keep no RNG state."""

from pathlib import Path

import pytest
import torch
from torch import nn

from harness.scenario import load_scenario
from models.pi05 import FAMILY, FULL, Pi05Model, parse_options
from models.pi05.model import RMSNorm
from models.pi05.techniques import apply_options
from models.recompute import Recompute
from models.workload import Workload

ROOT = Path(__file__).resolve().parent.parent
COMMUNITY = load_scenario(ROOT / "scenarios/pi05-loongforge.yaml").ladder[0].cumulative
WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=24, action_horizon=6, dtype="bf16", lr=1e-4)


def community(dtype=torch.bfloat16):
    return FAMILY.build("tiny", parse_options(COMMUNITY), WORKLOAD, "cpu", dtype, seed=0)


def test_recompute_is_openpis_nested_set_without_siglip_layers():
    built = community()
    assert set(built.applied.recomputed) == {
        "vision",
        "text_embed",
        "suffix_embed.time_mlp",
        "suffix_embed.action_in",
        "action_out",
        "backbone",
        *(f"backbone.layers.{i}" for i in range(3)),
    }
    assert not any(name.startswith("vision.layers") for name in built.applied.recomputed)


def test_siglip_uses_sdpa_while_the_joint_attention_is_eager():
    model = community().model
    inner = model.vision.module  # the whole image embedding is recomputed
    assert {layer.attn.kind for layer in inner.layers} == {"sdpa"}
    assert {layer.module.attention.kind for layer in model.backbone.module.layers} == {"eager"}


def test_openpi_keeps_about_120m_parameters_in_fp32():
    with torch.device("meta"):
        model = Pi05Model(FULL)
    model.to(torch.bfloat16)
    applied = apply_options(model, parse_options({**COMMUNITY, "recompute": "none"}))
    fp32 = {n: p for n, p in model.named_parameters() if p.dtype == torch.float32}
    norms = [n for n, m in model.named_modules() if isinstance(m, RMSNorm)]
    assert set(applied.fp32_modules) == {
        "vision.patch_embed",
        "vision.pos_embed",
        "suffix_embed.action_in",
        "suffix_embed.time_mlp",
        "action_out",
        *norms,
    }
    # every RMSNorm's weight or adaRMS Dense, SigLIP's patch and position embeddings, action in/out, time MLP
    assert all(any(n.startswith(m + ".") for m in applied.fp32_modules) for n in fp32)
    assert sum(p.numel() for p in fp32.values()) / 1e6 == pytest.approx(120, abs=5)
    with torch.device("meta"):
        plain = Pi05Model(FULL).to(torch.bfloat16)
    assert (
        apply_options(plain, parse_options({**COMMUNITY, "recompute": "none", "precision": "bf16"})).fp32_modules == ()
    )


def test_mixed_precision_runs_the_streams_in_bf16_and_the_boundaries_in_fp32():
    model = community().model
    batch = FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.bfloat16, 0)[0]
    seen = {}
    watched = {
        "suffix_embed.action_in": model.suffix_embed.action_in.module,
        "action_out": model.action_out.module,
        "backbone.layers.0": model.backbone.module.layers[0].module,
    }  # inside the recompute wrappers

    def keep(name):
        def hook(module, inputs, output):  # returns None: the output is left as it is
            seen.setdefault(name, output if isinstance(output, torch.Tensor) else output[1])

        return hook

    for name, module in watched.items():
        module.register_forward_hook(keep(name))
    loss = FAMILY.loss(model, batch)
    loss.backward()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    assert seen["suffix_embed.action_in"].dtype == torch.float32  # x_t projected in fp32
    assert seen["backbone.layers.0"].dtype == torch.bfloat16  # the suffix stream in bf16
    assert seen["action_out"].dtype == torch.float32
    # the same model all in bf16 is the same math within bf16 rounding
    plain = FAMILY.build("tiny", parse_options({**COMMUNITY, "precision": "bf16"}), WORKLOAD, "cpu", torch.bfloat16, 0)
    with torch.no_grad():
        assert FAMILY.loss(plain.model, batch).item() == pytest.approx(loss.item(), rel=2e-2)


def test_the_optimizer_is_torch_adamws_default_implementation():
    model = community().model
    opt = FAMILY.optimizer(model, parse_options(COMMUNITY), WORKLOAD, "cuda")
    assert not opt.defaults["fused"] and opt.defaults["betas"] == (0.9, 0.95) and opt.defaults["eps"] == 1e-8
    fused = FAMILY.optimizer(model, parse_options({**COMMUNITY, "adamw": "fused"}), WORKLOAD, "cuda")
    assert fused.defaults["fused"] is True


def test_recompute_keeps_no_rng_state():
    """openpi checkpoints with preserve_rng_state=False: a module that drew random numbers would draw new ones
    when recomputed (Pi0.5 draws none inside recomputed modules, so its math is unchanged)."""
    torch.manual_seed(0)
    drop = Recompute(nn.Dropout(0.5)).train()
    x = torch.ones(1000, requires_grad=True)
    y = drop(x)
    y.backward(torch.ones_like(y))
    kept_in_forward = y.detach() != 0
    used_in_backward = x.grad != 0
    assert not torch.equal(kept_in_forward, used_in_backward)  # another mask: the RNG state was not restored
