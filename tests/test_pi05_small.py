"""The `small` Pi0.5: every structure of the full model at ~29M parameters. It builds with every option of the
LoongForge ladder (FP8 converts linears of both streams), trains a step on the CPU, and its dimensions suit FP8
GEMMs (multiples of 16)."""

from dataclasses import replace

import pytest
import torch
from torch import nn

from harness.scenario import load_scenario
from models import get_family
from models.fp8 import ALIGNMENT, fp8_candidates
from models.pi05 import SMALL, Pi05Model, count_parameters
from models.pi05.techniques import FP8_SKIP, FP8_SKIP_EAGER_VISION
from models.workload import Workload

WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=48, action_horizon=10, lr=1e-4, dtype="fp32")


def test_small_keeps_every_structure_and_its_size_is_stated():
    assert "small" in get_family("pi05").sizes
    with torch.device("meta"):
        model = Pi05Model(SMALL)
    assert count_parameters(model) == 29_005_472  # docs/training.md states it
    assert SMALL.vision.tokens == 64 and SMALL.vision.patch_size == 14  # SigLIP/14 on 112x112
    assert SMALL.llm.kv_heads == 1 and SMALL.llm.head_dim == SMALL.expert.head_dim == 64  # MQA, joint attention
    flops = get_family("pi05").flops_per_sample(
        "small", Workload(batch_size=1, cameras=2, text_tokens=200, action_horizon=50)
    )
    assert flops == pytest.approx(40.14e9, rel=1e-3)  # docs/training.md states it (LIBERO workload)


def test_small_dimensions_suit_fp8_and_its_fp8_rung_converts_both_streams():
    with torch.device("meta"):
        model = Pi05Model(SMALL)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            assert module.in_features % ALIGNMENT == 0 and module.out_features % ALIGNMENT == 0, name
    chosen = fp8_candidates(model, SMALL.fp8_min_features, FP8_SKIP + FP8_SKIP_EAGER_VISION)
    for part in ("prefix.q_proj", "prefix.mlp.gate_proj", "suffix.o_proj", "suffix.mlp.down_proj"):
        assert f"backbone.layers.0.{part}" in chosen
    assert not any(n.startswith("vision.") or ".dense" in n or "time_mlp" in n for n in chosen)


@pytest.mark.parametrize("rung", [r.name for r in load_scenario("scenarios/pi05-loongforge.yaml").ladder])
def test_small_builds_with_every_rung_of_the_loongforge_ladder(rung):
    pytest.importorskip("torchao")
    family = get_family("pi05")
    scenario = load_scenario("scenarios/pi05-loongforge.yaml")
    options = dict(next(r for r in scenario.ladder if r.name == rung).cumulative)
    options["attention"] = "sdpa" if options.get("attention") == "flex" else options.get("attention", "eager")
    workload = replace(WORKLOAD, model_size="small", compile_backend="aot_eager")
    # building is the point here: compile units compile at their first call, FP8 converts at build
    built = family.build("small", family.parse_options(options), workload, "cpu", torch.float32, 0)
    if options.get("linear") == "fp8":
        assert len(built.applied.fp8_linears) == 4 * 2 * 5  # q, o, gate, up, down of both streams, 4 layers


def test_small_trains_a_step_on_the_cpu():
    torch.set_num_threads(1)
    family = get_family("pi05")
    options = family.parse_options({"camera_slots": "auto", "recompute": "none"})
    workload = replace(WORKLOAD, model_size="small")
    built = family.build("small", options, workload, "cpu", torch.float32, 0)
    optimizer = family.optimizer(built.model, options, workload, "cpu")
    step = family.make_step(built.model, optimizer, options)
    batch = family.make_batches("small", workload, 1, "cpu", torch.float32, 0)[0]
    before = built.model.backbone.layers[0].suffix.mlp.down_proj.weight.clone()
    loss = step(batch)
    assert torch.isfinite(loss)
    assert not torch.equal(before, built.model.backbone.layers[0].suffix.mlp.down_proj.weight)


def test_the_train_scenarios_fp8_rung_converts_siglips_compiled_layers_too():
    """pi05-libero-train's fp8 rung sits on compile-vision: SigLIP's layers are compile units, so their linears
    train in FP8 as the joint layers' do (Q, K, V, out, fc1, fc2 of 4 layers); the projector stays eager, in bf16."""
    pytest.importorskip("torchao")
    family = get_family("pi05")
    scenario = load_scenario("scenarios/pi05-libero-train.yaml")
    options = dict(next(r for r in scenario.ladder if r.name == "fp8").cumulative)
    assert options["compile_vision"] is True and options["attention"] == "sdpa"
    workload = replace(WORKLOAD, model_size="small", compile_backend="aot_eager")
    built = family.build("small", family.parse_options(options), workload, "cpu", torch.float32, 0)
    vision = [n for n in built.applied.fp8_linears if n.startswith("vision.")]
    assert len(vision) == 4 * 6 and "vision.projector" not in built.applied.fp8_linears
    assert len(built.applied.fp8_linears) == 4 * 6 + 4 * 2 * 5
    assert built.applied.compile_units[:4] == tuple(f"vision.layers.{i}" for i in range(4))
