"""FP8 linears: which layers are converted (no FP8 hardware needed), and torchao's conversion of
exactly those, emulated on CPU where torchao is installed."""

import importlib.util
import sys

import pytest
import torch
from torch import nn

from models.extras import pip_install
from models.fp8 import MIN_FEATURES, apply_fp8, fp8_candidates, fp8_filter
from models.pi05 import FAMILY, FULL, TINY, Pi05Model, parse_options
from models.pi05.batch import make_batch, to_device

# Pi0.5's linears that run once per sample on the flow-time condition rather than once per token:
# a GEMM of B rows gains nothing from FP8, and adaRMS scale/shift/gate modulate every expert layer.
# techniques.py passes the same patterns as `skip` for the fp8 option.
from models.pi05.techniques import FP8_SKIP as PI05_SKIP
from models.workload import Workload

needs_torchao = pytest.mark.skipif(
    importlib.util.find_spec("torchao") is None, reason=f"torchao is not installed ({pip_install('fp8')})"
)


def expected_full() -> set[str]:
    """Every SigLIP linear and the projector (1152/4304/2048 features, all multiples of 16), and in
    both Gemma streams Q, O and the MLP; not K/V (256 features: MQA), not the action in/out (32),
    nor the per-sample time MLP and adaRMS denses (skipped by name)."""
    names = {"vision.projector"}
    for i in range(FULL.vision.layers):
        names |= {f"vision.layers.{i}.attn.{p}" for p in ("q_proj", "k_proj", "v_proj", "out_proj")}
        names |= {f"vision.layers.{i}.mlp.fc1", f"vision.layers.{i}.mlp.fc2"}
    for i in range(FULL.llm.layers):
        for stream in ("prefix", "suffix"):
            names |= {
                f"backbone.layers.{i}.{stream}.{p}"
                for p in ("q_proj", "o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
            }
    return names


@pytest.fixture(scope="module")
def full_meta():
    with torch.device("meta"):
        return Pi05Model(FULL)


@pytest.mark.parametrize(
    "in_f, out_f, chosen",
    [
        (2048, 2048, True),
        (1024, 4096, True),
        (1152, 4304, True),
        (2048, 256, False),  # thin: below MIN_FEATURES
        (1000, 2048, False),  # not a multiple of 16
        (2048, 1032, False),  # 1032 = 16 * 64.5
    ],
)
def test_rule_on_plain_linears(in_f, out_f, chosen):
    with torch.device("meta"):
        assert fp8_filter()(nn.Linear(in_f, out_f), "layer") is chosen


def test_rule_skips_non_linears_subclasses_and_skip_patterns():
    keep = fp8_filter(min_features=16)
    with torch.device("meta"):
        assert not keep(nn.Conv2d(3, 1152, 14, stride=14), "vision.patch_embed")
        assert not keep(nn.MultiheadAttention(64, 4).out_proj, "mha.out_proj")  # an nn.Linear subclass
        linear = nn.Linear(64, 64)
    assert keep(linear, "a.b")
    skip = fp8_filter(min_features=16, skip=("a.*",))
    assert not skip(linear, "a.b") and skip(linear, "a.b.c") and skip(linear, "c.b")


def test_full_pi05_selection(full_meta):
    chosen = fp8_candidates(full_meta, skip=PI05_SKIP)
    assert set(chosen) == expected_full() and len(chosen) == len(set(chosen)) == 27 * 6 + 1 + 18 * 10
    # the skip patterns are what keep the per-sample linears out: by shape alone they qualify
    by_shape = set(fp8_candidates(full_meta)) - set(chosen)
    assert by_shape == {
        "suffix_embed.time_mlp.time_mlp_in",
        "suffix_embed.time_mlp.time_mlp_out",
        "backbone.suffix_norm.dense",
    } | {f"backbone.layers.{i}.suffix.{norm}.dense" for i in range(18) for norm in ("input_norm", "post_norm")}

    # per training sample (2 cameras, 200 text tokens, 50 actions) the converted linears carry 99% of
    # the linear FLOPs; what stays in bf16 is mostly the Gemma K/V projections
    def tokens(name):
        if name.startswith("vision."):
            return 2 * FULL.vision.tokens
        if ".prefix." in name:
            return 2 * FULL.vision.tokens + 200
        return 1 if name.endswith(".dense") or ".time_mlp." in name else 50

    flops = {n: tokens(n) * m.weight.numel() for n, m in full_meta.named_modules() if isinstance(m, nn.Linear)}
    assert sum(flops[n] for n in chosen) / sum(flops.values()) > 0.99


def test_tiny_pi05_selection():
    with torch.device("meta"):
        model = Pi05Model(TINY)
    assert max(TINY.llm.mlp, TINY.vision.mlp) < MIN_FEATURES
    assert fp8_candidates(model, skip=PI05_SKIP) == []
    linears = {n for n, m in model.named_modules() if type(m) is nn.Linear}
    chosen = set(fp8_candidates(model, min_features=16, skip=PI05_SKIP))
    skipped = {n for n in linears if ".time_mlp." in n or n.endswith(".dense")}
    assert chosen == linears - skipped and len(skipped) == 2 + 2 * TINY.expert.layers + 1


def test_missing_torchao_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)  # makes `import torchao...` raise ImportError
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    pin = torch.__version__.split("+")[0]  # the hint keeps the installed torch
    with pytest.raises(RuntimeError, match=rf"install vlabench\[fp8\]: pip install torch=={pin} -e '\.\[fp8\]'"):
        apply_fp8(nn.Sequential(nn.Linear(16, 16)), "tensorwise")


@needs_torchao
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_apply_fp8_converts_exactly_the_selection(full_meta, recipe):
    from torchao.float8.float8_linear import Float8Linear

    with torch.device("meta"):
        model = Pi05Model(FULL)
    before = {n: m.weight for n, m in model.named_modules() if isinstance(m, nn.Linear)}
    converted = apply_fp8(model, recipe, skip=PI05_SKIP)
    assert converted == fp8_candidates(full_meta, skip=PI05_SKIP)
    modules = dict(model.named_modules())
    for name, weight in before.items():
        assert isinstance(modules[name], Float8Linear) is (name in converted), name
        assert modules[name].weight is weight  # converted in place: the same parameters
    with pytest.raises(ValueError, match="unknown fp8 recipe"):
        apply_fp8(model, "mxfp8")


@needs_torchao
def test_emulated_fp8_tiny_pi05_trains_close_to_bf16_math():
    """The tiny model with every eligible linear in (emulated) FP8: same loss to FP8 precision, and
    gradients reach the converted weights."""
    workload = Workload(batch_size=2, cameras=2, text_tokens=24, action_horizon=6, seed=0)
    gen = torch.Generator().manual_seed(1)
    batch = to_device(make_batch(TINY, 2, 2, 24, 6, gen), "cpu", torch.float32)
    opts = parse_options({"recompute": "none"})
    ref = FAMILY.build("tiny", opts, workload, "cpu", torch.float32, 0).model
    ref_loss = ref.loss(batch)
    ref_loss.backward()
    model = FAMILY.build("tiny", opts, workload, "cpu", torch.float32, 0).model
    converted = apply_fp8(model, "tensorwise", min_features=16, skip=PI05_SKIP, emulate=True)
    loss = model.loss(batch)
    loss.backward()
    assert loss.item() == pytest.approx(ref_loss.item(), rel=5e-2) and loss.item() != ref_loss.item()

    def trained(m):  # the last layer's prefix Q/O/MLP feed only the unused prefix output: no gradient
        return {n for n, p in m.named_parameters() if p.grad is not None and p.grad.abs().sum() > 0}

    assert trained(model) == trained(ref) and {n + ".weight" for n in converted} & trained(model)
