"""The GR00T N1.6 family through the ModelFamily protocol: options, build, batches, step, optimizer groups, FLOPs,
notes and loss parity between switches (CPU, tiny, fp32)."""

import pickle
import weakref
from dataclasses import replace

import pytest
import torch

from models.gr00t import FAMILY, parse_options
from models.recompute import name_matches
from models.schema import SchemaError
from models.weight_copies import copy_trainable_weights, weight_copies
from models.workload import Workload

WORKLOAD = Workload(
    batch_size=2,
    cameras=2,
    text_tokens=50,
    action_horizon=6,
    lr=1e-4,
    model_size="tiny",
    dtype="fp32",
    compile_backend="aot_eager",
)


def build(options=None, seed=0):
    return FAMILY.build("tiny", parse_options(options or {}), WORKLOAD, "cpu", torch.float32, seed)


@pytest.fixture(scope="module")
def batch():
    return FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.float32, seed=0)[0]


def loss_and_grads(model, batch, seed=5):
    torch.manual_seed(seed)  # the harness seeds every step: the DiT's dropout masks repeat
    loss = FAMILY.loss(model, batch)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def test_options_defaults_and_errors():
    opts = FAMILY.parse_options({})
    assert (opts.lm_head, opts.vl_pad, opts.attention, opts.compile, opts.ddp) == (True, None, "sdpa", "none", None)
    assert FAMILY.parse_options({"vl_pad": 220, "lm_head": False}).vl_pad == 220
    with pytest.raises(SchemaError, match="attention: expected one of sdpa, eager"):
        FAMILY.parse_options({"attention": "flash"})
    with pytest.raises(SchemaError, match="vl_pad"):
        FAMILY.parse_options({"vl_pad": 0})
    with pytest.raises(SchemaError, match="unknown key 'camera_slots'"):
        FAMILY.parse_options({"camera_slots": 3})
    assert FAMILY.parse_options({"ddp": {"static_graph": True}}).ddp.static_graph is True


def test_build_applies_the_switches():
    built = build({"lm_head": False, "vl_pad": 64, "attention": "eager"})
    model = built.model
    assert model.training and model.llm.lm_head is False and model.vl_pad == 64
    kinds = {model.llm.layers[0].attn.kind, model.dit.blocks[0].attn.kind, model.vision.layers[0].attn.kind}
    assert kinds == {"eager"}
    assert not any(layer.mlp.bias_in_gelu for layer in model.vision.layers)
    assert all(layer.mlp.bias_in_gelu for layer in build({"vision_fc1_bias": "gelu"}).model.vision.layers)
    assert built.applied.compile_units == ()
    assert model.autocast_dtype is None and all(p.dtype == torch.float32 for p in model.parameters())
    assert FAMILY.prepare_for_ddp(built, FAMILY.ddp_flags(FAMILY.parse_options({}))) == []


def test_step_and_optimizer_groups(batch):
    built = build()
    model = built.model
    opt = FAMILY.optimizer(model, FAMILY.parse_options({}), WORKLOAD, "cpu")
    decay, no_decay = opt.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    plain = {names[id(p)] for p in no_decay["params"]}
    assert decay["weight_decay"] == 1e-5 and no_decay["weight_decay"] == 0.0
    assert decayed | plain == {n for n, p in model.named_parameters() if p.requires_grad}
    assert {"dit.blocks.0.attn.to_q.bias", "vlln.weight", "llm.layers.3.attn.q_norm.weight"} <= plain
    assert "llm.layers.3.input_norm.weight" in plain and "dit.blocks.0.norm1.linear.weight" in decayed
    assert "state_encoder.layer1.bias" in decayed  # named `b` in the reference: transformers decays it
    step = FAMILY.make_step(model, opt, FAMILY.parse_options({}))
    before = model.dit.proj_out_2.weight.detach().clone()
    loss = step(batch)
    assert torch.isfinite(loss) and not torch.equal(before, model.dit.proj_out_2.weight)


def test_same_seed_same_model_and_batches():
    a, b = build(seed=4).model, build(seed=4).model
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    b1 = FAMILY.make_batches("tiny", WORKLOAD, 2, "cpu", torch.float32, 7)
    b2 = FAMILY.make_batches("tiny", WORKLOAD, 2, "cpu", torch.float32, 7)
    assert all(torch.equal(x[k], y[k]) for x, y in zip(b1, b2) for k in x)


@pytest.mark.parametrize(
    "options",
    [
        {"lm_head": False},
        {"vl_pad": 64},
        {"lm_head": False, "vl_pad": 64},
        {"attention": "eager"},
        {"vision_fc1_bias": "gelu"},
    ],
)
def test_switches_keep_loss_and_gradients(batch, options):
    base_loss, base_grads = loss_and_grads(build().model, batch)
    loss, grads = loss_and_grads(build(options).model, batch)
    tol, why = FAMILY.parity_tolerance(parse_options({}), parse_options(options), "fp32")
    assert why and abs(loss - base_loss) / base_loss <= tol
    assert grads.keys() == base_grads.keys()
    for name, g in grads.items():
        assert torch.allclose(g, base_grads[name], rtol=1e-3, atol=1e-6), name


@pytest.mark.slow
def test_compiled_blocks_match_eager(batch):
    """aot_eager traces every block (fullgraph) and keeps eager's kernels and dropout masks."""
    base_loss, base_grads = loss_and_grads(build().model, batch)
    built = build({"compile": "per-block"})
    assert len(built.applied.compile_units) == 2 + 4 + 4
    loss, grads = loss_and_grads(built.model, batch)
    assert torch.allclose(loss, base_loss, rtol=1e-5)
    for name, g in grads.items():
        assert torch.allclose(g, base_grads[name], rtol=1e-3, atol=1e-6), name


def test_compile_compiles_every_block_with_the_shared_call(monkeypatch):
    """`compile: per-block` compiles each unit as every family does (models/compile_units.py): in place, fullgraph,
    the workload's backend, and no inductor tuning (GR00T offers none)."""
    calls = []
    monkeypatch.setattr(torch.nn.Module, "compile", lambda self, **kwargs: calls.append(kwargs))
    built = FAMILY.build("tiny", parse_options({"compile": "per-block"}), WORKLOAD, "cpu", torch.float32, 0)
    assert len(calls) == len(built.applied.compile_units) == 2 + 4 + 4  # SigLIP2 layers, LLM layers, DiT blocks
    assert all(kwargs == {"backend": "aot_eager", "fullgraph": True} for kwargs in calls)


def test_flops_and_notes():
    full = replace(WORKLOAD, model_size="full", batch_size=16, text_tokens=92, action_horizon=50, dtype="bf16")
    assert FAMILY.flops_per_sample("full", full) / 1e12 == pytest.approx(1.51, abs=0.005)
    notes = FAMILY.rung_notes({}, {"lm_head": False}, full)
    assert len(notes) == 1 and "136.7 GFLOP/sample" in notes[0] and "0.99 GiB" in notes[0]
    assert "220 tokens" in FAMILY.rung_notes({"lm_head": False}, {"lm_head": False, "vl_pad": 220}, full)[0]
    copies = FAMILY.rung_notes({"adamw": "compiled"}, {"adamw": "compiled", "bf16_weights": "optimizer"}, full)
    assert len(copies) == 1 and "(1.29 B weights)" in copies[0] and "2.4 GiB" in copies[0]


@pytest.mark.parametrize("patterns", list(FAMILY.recompute_groups().values()) + [("dit.blocks.*.ff", "llm.layers.*")])
def test_recompute_keeps_loss_and_gradients_to_the_bit(batch, patterns):
    """Recompute reruns each module from the forward's RNG state: the DiT's dropout draws the forward's masks, so
    the loss and every gradient are the base's exactly; the optimizer groups read names without the wrappers."""
    base = build()
    built = build({"recompute": {"patterns": list(patterns)}})
    recomputed = built.applied.recomputed
    assert recomputed and all(any(name_matches(n, p) for p in patterns) for n in recomputed)
    base_loss, base_grads = loss_and_grads(base.model, batch)
    loss, grads = loss_and_grads(built.model, batch)
    assert torch.equal(loss, base_loss)
    plain = {n.replace(".module.", "."): g for n, g in grads.items()}
    assert plain.keys() == base_grads.keys() and all(torch.equal(g, base_grads[n]) for n, g in plain.items())

    def groups(model):
        names = {id(p): n.replace(".module.", ".") for n, p in model.named_parameters()}
        return [
            sorted(names[id(p)] for p in g["params"])
            for g in FAMILY.optimizer(model, parse_options({}), WORKLOAD, "cpu").param_groups
        ]

    assert groups(built.model) == groups(base.model)
    tol, why = FAMILY.parity_tolerance(parse_options({}), parse_options({"recompute": {"patterns": ["x"]}}), "fp32")
    assert tol == 1e-6 and "RNG state" in why


def test_recompute_must_replay_the_dropout_masks(batch):
    """Without the forward's RNG state the recomputed DiT blocks draw other dropout masks: the gradients would be
    wrong (the loss is still the forward's)."""
    from models.recompute import apply_recompute

    base_loss, base_grads = loss_and_grads(build().model, batch)
    model = build().model
    apply_recompute(model, ["dit.blocks.*"], preserve_rng_state=False)
    loss, grads = loss_and_grads(model, batch)
    name = "dit.blocks.0.ff.fc2.weight"
    assert torch.equal(loss, base_loss)
    assert not torch.allclose(grads[name.replace("blocks.0.", "blocks.0.module.")], base_grads[name])


def kept_bytes(model, batch) -> int:
    """Bytes of the tensors autograd still holds for backward once the forward is done (what recompute drops):
    every tensor saved during the forward that is still alive, counted once per storage."""
    saved = []

    def pack(t):
        saved.append(weakref.ref(t))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = FAMILY.loss(model, batch)
    alive = [t for t in (ref() for ref in saved) if t is not None]
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in alive}
    del loss
    return sum(storages.values())


def test_recompute_saves_activations_where_gradients_flow(batch):
    """The frozen SigLIP2 tower keeps nothing for backward, so recomputing it saves nothing; the trainable LLM
    layers and the DiT blocks keep activations that recompute drops."""
    base = kept_bytes(build().model, batch)
    saved = {
        g: base - kept_bytes(build(FAMILY.recompute_options(p)).model, batch)
        for g, p in FAMILY.recompute_groups().items()
    }
    assert saved["vit-layers"] == 0
    assert saved["llm-layers"] > 0 and saved["dit-blocks"] > 0


def test_recompute_option_errors():
    assert parse_options({}).recompute == "none"
    with pytest.raises(SchemaError, match="recompute"):
        parse_options({"recompute": {"patterns": []}})
    with pytest.raises(SchemaError, match="recompute"):
        parse_options({"recompute": "nested-full"})
    with pytest.raises(ValueError, match="recompute pattern 'dit.layers.*' matches no module"):
        build({"recompute": {"patterns": ["dit.layers.*"]}})


def train_bf16(options: dict, steps: int = 3):
    """`steps` steps of the tiny model in the bf16 workload's precision (fp32 trainable weights under bf16 autocast,
    on the CPU) with the compiled AdamW; returns the built model, the optimizer and the losses."""
    workload = replace(WORKLOAD, dtype="bf16")
    opts = parse_options({"adamw": "compiled", **options})
    built = FAMILY.build("tiny", opts, workload, "cpu", torch.bfloat16, 0)
    optimizer = FAMILY.optimizer(built.model, opts, workload, "cpu")
    step = FAMILY.make_step(built.model, optimizer, opts)
    batches = FAMILY.make_batches("tiny", workload, steps, "cpu", torch.bfloat16, seed=0)
    losses = []
    for i, batch in enumerate(batches):
        torch.manual_seed(i)  # the harness seeds every step: the DiT's dropout masks repeat across the two runs
        losses.append(step(batch).item())
    return built, optimizer, losses


def test_bf16_weights_from_the_optimizer_train_as_autocast():
    """The trainable linears read the bf16 copies the optimizer writes: the same values autocast casts, so three
    steps give the same losses and the same fp32 weights; the copies track the weights, checkpoints keep the fp32
    weights only, and a loaded checkpoint refreshes the copies in place."""
    base, _, base_losses = train_bf16({})
    built, optimizer, losses = train_bf16({"bf16_weights": "optimizer"})
    model = built.model
    copied = built.applied.weight_copies
    trainable_linears = {
        n for n, m in base.model.named_modules() if type(m) is torch.nn.Linear and m.weight.requires_grad
    }
    assert copied and set(copied) == trainable_linears
    assert not any(n.startswith("vision.") for n in copied)  # the frozen tower is bf16 already
    assert losses == base_losses
    params = dict(model.named_parameters())
    assert all(torch.equal(p, params[n]) for n, p in base.model.named_parameters())
    copies = weight_copies(model)
    assert len(copies) == len(copied) == len(optimizer.copies)
    assert all(c.dtype == torch.bfloat16 and torch.equal(c, w.to(torch.bfloat16)) for w, c in copies)
    state = model.state_dict()
    assert state.keys() == base.model.state_dict().keys() and state["dit.proj_out_2.weight"].dtype == torch.float32
    storages = [c.data_ptr() for _, c in copies]
    model.load_state_dict(
        base.model.state_dict() | {"dit.proj_out_2.weight": torch.zeros_like(state["dit.proj_out_2.weight"])}
    )
    assert [c.data_ptr() for _, c in copies] == storages
    assert not model.dit.proj_out_2.weight_copy.any()


def test_bf16_weights_option_errors():
    assert parse_options({}).bf16_weights == "autocast"
    with pytest.raises(SchemaError, match="bf16_weights: expected adamw: compiled"):
        parse_options({"bf16_weights": "optimizer"})
    with pytest.raises(SchemaError, match="bf16_weights: expected autocast for an fp32 workload"):
        build({"adamw": "compiled", "bf16_weights": "optimizer"})


def test_a_copied_weight_linear_pickles_and_its_load_refreshes_the_copy():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    assert copy_trainable_weights(model, torch.bfloat16) == ["0"]
    clone = pickle.loads(pickle.dumps(model))
    clone.load_state_dict({"0.weight": torch.ones(3, 4), "0.bias": torch.zeros(3)})
    assert torch.equal(clone[0].weight_copy, torch.ones(3, 4, dtype=torch.bfloat16))
