"""Every rung of the LoongForge ladder computes what the community rung computes (tiny model, fp32, CPU)."""

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from harness.ladder.runner import unsupported_reason, with_substitutes
from harness.machine.hardware import capabilities, get_target
from harness.scenario import load_scenario
from harness.stats.parity import loss_parity
from models.pi05 import FAMILY, parse_options
from models.recompute import matching_modules

ROOT = Path(__file__).resolve().parent.parent
SCENARIO = load_scenario(ROOT / "scenarios/pi05-loongforge.yaml")
WORKLOAD = replace(SCENARIO.workload_for("cpu"), batch_size=2, text_tokens=40, action_horizon=6)
CPU = get_target("cpu")


def build_with_applied(options: dict):
    return FAMILY.build("tiny", parse_options(options), WORKLOAD, "cpu", torch.float32, seed=0)


def build(options: dict):
    return build_with_applied(options).model


def loss_and_grads(model, batch):
    loss = FAMILY.loss(model, batch)
    loss.backward()
    # a compiled graph returns zeros where eager autograd leaves None (parameters off the loss path)
    return loss.detach(), [torch.zeros_like(p) if p.grad is None else p.grad for p in model.parameters()]


@pytest.fixture(scope="module")
def batch():
    return FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.float32, seed=0)[0]


@pytest.fixture(scope="module")
def community(batch):
    return loss_and_grads(build(SCENARIO.ladder[0].cumulative), batch)


def cpu_trainable_rungs():
    caps = capabilities(CPU)
    rungs = []
    for rung in SCENARIO.ladder[1:]:
        rung, _ = with_substitutes(SCENARIO, CPU, rung, caps)
        if unsupported_reason(SCENARIO, CPU, rung, caps) is None:
            rungs.append(pytest.param(rung, id=rung.name))
    return rungs


def test_cpu_ladder_covers_all_but_flex_and_fp8():
    assert [p.id for p in cpu_trainable_rungs()] == [
        "prune-empty-cameras",
        "compile-backbone",
        "recompute-vit-only",
        "compile-per-layer",
    ]


@pytest.mark.parametrize("rung", cpu_trainable_rungs())
def test_rung_matches_community_loss_and_gradients(rung, batch, community):
    base_loss, base_grads = community
    loss, grads = loss_and_grads(build(rung.cumulative), batch)
    tol, _ = FAMILY.parity_tolerance(
        parse_options(SCENARIO.ladder[0].cumulative), parse_options(rung.cumulative), "fp32"
    )
    assert abs(loss - base_loss) / base_loss <= tol
    if rung.name == "prune-empty-cameras":
        assert tol == 1e-5
    assert len(grads) == len(base_grads)
    for g, ref in zip(grads, base_grads):
        assert torch.allclose(g, ref, rtol=1e-4, atol=1e-6)


def test_flex_rung_forward_matches_community(batch, community):
    """FlexAttention has no CPU backward: its forward is checked here, its gradients on a GPU (test_flex)."""
    flex = next(r for r in SCENARIO.ladder if r.name == "flex-attention")
    with torch.no_grad():
        loss = FAMILY.loss(build(flex.cumulative), batch)
    assert abs(loss - community[0]) / community[0] <= 1e-5


def test_recompute_patterns_of_the_ladder():
    nested = build_with_applied({"recompute": "nested-full"})
    names = set(nested.applied.recomputed)
    assert {"vision", "backbone", "backbone.layers.0", "action_out"} <= names
    vit = build_with_applied(next(r for r in SCENARIO.ladder if r.name == "recompute-vit-only").cumulative)
    assert vit.applied.recomputed == tuple(f"vision.layers.{i}" for i in range(2))
    plain = build({"recompute": "none"})
    assert matching_modules(plain, ["backbone.layers.*.prefix.mlp"]) == [
        f"backbone.layers.{i}.prefix.mlp" for i in range(3)
    ]
    with pytest.raises(ValueError, match="matches no module"):
        build({"recompute": {"patterns": ["vision.layer.*"]}})


def test_per_layer_compile_reuses_one_graph_for_all_layers(batch):
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    built = build_with_applied({"camera_slots": "auto", "recompute": "none", "compile": "per-layer"})
    model = built.model
    assert built.applied.compile_units == (
        *(f"backbone.layers.{i}" for i in range(3)),
        "backbone.prefix_norm",
        "backbone.suffix_norm",
        "suffix_embed",
        "action_out",
    )
    FAMILY.loss(model, batch).backward()
    # one graph for the three layers (same code and shapes) and one per small unit; fullgraph=True
    # on every unit turns any graph break into an error
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 5


@pytest.mark.parametrize(
    "tuning, backend, options",
    [
        ("coordinate-descent", "inductor", {"coordinate_descent_tuning": True}),
        ("coordinate-descent", "aot_eager", None),  # no generated kernels to tune
        ("default", "inductor", None),
        (
            "max-autotune-gemm",
            "inductor",
            {
                "max_autotune_gemm": True,
                "max_autotune_gemm_backends": "ATEN,TRITON",
                "triton.enable_persistent_tma_matmul": True,
            },
        ),
        ("max-autotune-gemm", "aot_eager", None),
    ],
)
def test_compile_tuning_passes_its_inductor_options_to_every_unit(monkeypatch, tuning, backend, options):
    calls = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kwargs: calls.append((type(self).__name__, kwargs)))
    opts = {"camera_slots": "auto", "recompute": "none", "compile": "per-layer", "compile_vision": True}
    built = FAMILY.build(
        "tiny",
        parse_options({**opts, "compile_tuning": tuning}),
        replace(WORKLOAD, compile_backend=backend),
        "cpu",
        torch.float32,
        seed=0,
    )
    assert len(calls) == len(built.applied.compile_units) == 2 + 3 + 4  # SigLIP's layers, the joint ones, the rest
    assert {name for name, _ in calls} >= {"VisionLayer", "JointLayer"}
    for _, kwargs in calls:
        assert kwargs.get("options") == options and kwargs["backend"] == backend and kwargs["fullgraph"]


def test_compile_vision_adds_one_graph_for_siglips_layers_and_matches_eager(batch, community):
    """compile_vision compiles each SigLIP layer (inside its recompute wrapper), one graph for all of them and
    both cameras, with the community rung's loss and gradients; FP8 may then convert SigLIP's layer linears."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    options = {"camera_slots": "auto", "recompute": {"patterns": ["vision.layers.*"]}, "compile": "per-layer"}
    built = build_with_applied({**options, "compile_vision": True})
    assert built.applied.compile_units[:2] == ("vision.layers.0", "vision.layers.1")
    assert built.applied.recomputed == ("vision.layers.0", "vision.layers.1")
    loss, grads = loss_and_grads(built.model, batch)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 6  # per-layer's 5 and one for SigLIP's layers
    assert abs(loss - community[0]) / community[0] <= 1e-5
    for g, ref in zip(grads, community[1]):
        assert torch.allclose(g, ref, rtol=1e-4, atol=1e-6)
    from models.fp8 import fp8_candidates
    from models.pi05.techniques import FP8_SKIP, FP8_SKIP_COMPILED_VISION

    chosen = fp8_candidates(built.model, 16, FP8_SKIP + FP8_SKIP_COMPILED_VISION)
    assert "vision.layers.0.module.mlp.fc1" in chosen and "vision.projector" not in chosen


def test_backbone_compiles_as_one_graph_without_breaks(batch):
    torch._dynamo.reset()
    model = build({"camera_slots": "auto", "recompute": "none"})
    explained = torch._dynamo.explain(model.backbone)(*backbone_inputs(model, batch))
    assert explained.graph_break_count == 0 and explained.graph_count == 1


def backbone_inputs(model, batch):
    """The backbone's arguments for a batch, assembled as Pi05Model.velocity does."""
    from models.pi05.attention import prepare_mask
    from models.pi05.model import rope_tables

    prefix, prefix_pad = model.embed_prefix(batch)
    suffix, cond = model.suffix_embed(batch["noise"], batch["time"])
    b, h = batch["noise"].shape[:2]
    pad = torch.cat([prefix_pad, torch.ones((b, h), dtype=torch.bool)], dim=1)
    cum = torch.cat([torch.zeros(prefix.shape[1], dtype=torch.int32), torch.ones(h, dtype=torch.int32)])[None].expand(
        b, -1
    )
    mask = prepare_mask("eager", pad, cum, pad, cum, prefix.dtype)
    cos, sin = rope_tables(pad.long().cumsum(1) - 1, model.cfg.llm.head_dim, model.cfg.rope_theta)
    return prefix, suffix, cond, mask, cos, sin


def test_a_change_of_parameter_precision_is_judged_with_a_sanity_bound():
    """pi05-community-fidelity's rungs after `precision: openpi` train fp32 parameters against the bf16 ones of its
    first rung: their losses part with the steps (the committed H100 run: beyond 2% within its 22 steps, inside 5%),
    so they get the 5% bound; the rungs that keep the precision keep bf16's 2%, and fp32 workloads are unaffected."""
    fidelity = load_scenario(ROOT / "scenarios" / "pi05-community-fidelity.yaml")
    first = parse_options(fidelity.ladder[0].cumulative)
    tolerances = {r.name: FAMILY.parity_tolerance(first, parse_options(r.cumulative), "bf16") for r in fidelity.ladder}
    assert {n: t for n, (t, _) in tolerances.items()} == {
        "before": 2e-2,
        "siglip-layers-not-recomputed": 2e-2,
        "siglip-sdpa": 2e-2,
        "openpi-fp32-parameters": 5e-2,
        "foreach-adamw": 5e-2,
    }
    assert "parameters' precision differs" in tolerances["foreach-adamw"][1]
    assert FAMILY.parity_tolerance(first, parse_options(fidelity.ladder[-1].cumulative), "fp32")[0] == 1e-4
    measured = json.loads((ROOT / "results" / "h100" / "pi05-community-fidelity.json").read_text())
    rungs = {r["name"]: r for r in measured["rungs"]}
    for name in ("openpi-fp32-parameters", "foreach-adamw"):
        diff = loss_parity(rungs[name]["losses"], rungs["before"]["losses"], 1.0, "")["max_rel_diff"]
        assert 2e-2 < diff < 5e-2, (name, diff)
