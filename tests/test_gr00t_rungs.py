"""GR00T N1.6 rungs beyond the model: per-micro-batch CUDA graphs (`cuda_graphs`), the optimizer step in a graph
of its own (`adamw: fused` or `compiled`, `graph_optimizer`), the bf16 weight copies (`bf16_weights: optimizer`)
and FP8 DiT linears (`linear: fp8`). Options, targets and the FP8 selection on the CPU; emulated FP8 on the CPU
where torchao is installed; the graphed step against the eager one on a GPU (skipped without CUDA)."""

import importlib.util
from dataclasses import replace

import pytest
import torch
from torch import nn

from models.gr00t import FAMILY, FULL, Gr00tModel, GraphedStep, parse_options
from models.gr00t.graphs import average_gradients, comm_settings
from models.gr00t.techniques import apply_linear, fp8_linears
from models.schema import SchemaError
from models.weight_copies import weight_copies
from models.workload import Workload

WORKLOAD = Workload(batch_size=2, cameras=2, text_tokens=50, action_horizon=6, lr=1e-4, model_size="tiny", dtype="fp32")
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs need a CUDA device")
needs_torchao = pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed")


@pytest.fixture(autouse=True)
def keep_tf32():
    """A bf16 build turns TF32 on (the reference's `tf32: True`); put it back for the tests after."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def build(options, device="cpu", dtype=torch.float32, seed=0, workload=WORKLOAD):
    return FAMILY.build("tiny", parse_options(options), workload, device, dtype, seed).model


# ----------------------------------------------------------------------------- options and targets


def test_options_and_targets():
    opts = parse_options({"vl_pad": 220, "cuda_graphs": True, "linear": "fp8", "fp8_recipe": "rowwise"})
    assert (opts.cuda_graphs, opts.linear, opts.fp8_recipe) == (True, "fp8", "rowwise")
    with pytest.raises(SchemaError, match=r"^cuda_graphs: expected vl_pad set as well .*, got vl_pad null$"):
        parse_options({"cuda_graphs": True})
    with pytest.raises(SchemaError, match="linear: expected one of bf16, fp8"):
        parse_options({"linear": "int8"})
    graphs, fp8 = parse_options({"vl_pad": 220, "cuda_graphs": True}), parse_options({"linear": "fp8"})
    assert "CUDA device" in FAMILY.unsupported_reason(graphs, "cpu", frozenset())
    assert "CUDA device" in FAMILY.unsupported_reason(graphs, "npu", frozenset())
    assert FAMILY.unsupported_reason(graphs, "cuda", frozenset()) is None
    assert "FP8" in FAMILY.unsupported_reason(fp8, "cuda", frozenset())
    assert FAMILY.unsupported_reason(fp8, "cuda", frozenset({"fp8"})) is None
    tol, why = FAMILY.parity_tolerance(parse_options({}), fp8, "bf16")
    assert tol == 5e-2 and "FP8" in why
    full = replace(WORKLOAD, model_size="full", batch_size=16, text_tokens=92)
    notes = FAMILY.rung_notes({"vl_pad": 220}, {"vl_pad": 220, "cuda_graphs": True}, full)
    assert len(notes) == 1 and "CUDA graph" in notes[0] and "all-reduce" not in notes[0]  # one process: none
    notes = FAMILY.rung_notes({"vl_pad": 220}, {"vl_pad": 220, "cuda_graphs": True}, full, processes=2)
    assert "all-reduce runs after the replay" in notes[0]


def test_graphed_step_needs_cuda_tensors():
    model = build({"vl_pad": 64, "cuda_graphs": True})
    opt = FAMILY.optimizer(model, parse_options({}), WORKLOAD, "cpu")
    step = FAMILY.make_step(model, opt, parse_options({"vl_pad": 64, "cuda_graphs": True}))
    assert isinstance(step, GraphedStep) and step.vl_pad == 64 and step.pad_id == model.cfg.pad_token_id
    batch = FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.float32, 0)[0]
    with pytest.raises(ValueError, match="cuda_graphs: every batch entry must be a CUDA tensor"):
        step(batch)
    with pytest.raises(ValueError, match="more than vl_pad=8"):
        GraphedStep(FAMILY.loss, model, opt, 8, model.cfg.pad_token_id)(batch)


def test_graph_optimizer_options_and_refusals():
    graphed = {"vl_pad": 64, "cuda_graphs": True, "adamw": "fused", "graph_optimizer": True}
    with pytest.raises(SchemaError, match=r"^graph_optimizer: expected cuda_graphs: true as well"):
        parse_options({"graph_optimizer": True})
    with pytest.raises(SchemaError, match="adamw"):
        parse_options({"adamw": "apex"})
    model = build(graphed)
    optimizer = FAMILY.optimizer(model, parse_options(graphed), WORKLOAD, "cuda")
    assert all(g["fused"] and g["capturable"] for g in optimizer.param_groups)
    step = FAMILY.make_step(model, optimizer, parse_options(graphed))
    assert isinstance(step, GraphedStep) and step.graph_optimizer
    plain = FAMILY.optimizer(model, parse_options({}), WORKLOAD, "cpu")  # the reference's: foreach, on the host
    assert not any(g["fused"] or g["capturable"] for g in plain.param_groups)
    with pytest.raises(ValueError, match="graph_optimizer: needs an optimizer made with capturable=True"):
        FAMILY.make_step(model, plain, parse_options(graphed))
    notes = FAMILY.rung_notes({"vl_pad": 64, "cuda_graphs": True}, graphed, WORKLOAD)
    assert any("AdamW fused" in n for n in notes) and any("second CUDA graph" in n for n in notes)


def test_in_graph_gradient_sync_options_and_refusals():
    in_graph = {"vl_pad": 64, "cuda_graphs": True, "grad_sync": "in-graph"}
    opts = parse_options({**in_graph, "ddp": {"implementation": "buckets"}})
    assert opts.grad_sync == "in-graph"
    with pytest.raises(SchemaError, match=r"^grad_sync: expected cuda_graphs: true as well"):
        parse_options({"grad_sync": "in-graph"})
    with pytest.raises(SchemaError, match=r"^grad_sync: expected ddp implementation: buckets .*, got torch-ddp$"):
        parse_options({**in_graph, "ddp": {}})
    model = build(in_graph)
    optimizer = FAMILY.optimizer(model, parse_options(in_graph), WORKLOAD, "cpu")
    step = FAMILY.make_step(model, optimizer, parse_options(in_graph))
    assert not step.in_graph  # one process, no wrapper: nothing to synchronise
    wrapper = nn.Module()  # a wrapper without the buckets' hooks (torch DDP's reducer cannot be captured)
    wrapper.module = model
    with pytest.raises(
        ValueError, match="grad_sync: in-graph needs the gradient buckets of ddp implementation: buckets"
    ):
        GraphedStep(FAMILY.loss, wrapper, optimizer, 64, 0, grad_sync="in-graph")
    notes = FAMILY.rung_notes({"vl_pad": 64, "cuda_graphs": True}, in_graph, WORKLOAD, processes=2)
    assert any("captured into the graph" in n for n in notes)
    # one process has no all-reduce to capture (a rung after an unsupported multi-process rung inherits the option)
    assert not FAMILY.rung_notes({"vl_pad": 64, "cuda_graphs": True}, in_graph, WORKLOAD)


def test_a_captured_optimizer_step_refuses_a_changed_learning_rate():
    from models.graph_capture import check_learning_rates, learning_rates

    optimizer = torch.optim.AdamW([nn.Parameter(torch.zeros(2))], lr=1e-4)
    captured = learning_rates(optimizer)
    check_learning_rates(optimizer, captured, "graph_optimizer")  # unchanged: replays
    optimizer.param_groups[0]["lr"] = 5e-5
    with pytest.raises(ValueError, match=r"graph_optimizer: the learning rate changed from \(0.0001,\) to \(5e-05,\)"):
        check_learning_rates(optimizer, captured, "graph_optimizer")


def test_out_of_graph_all_reduce_settings():
    from models.family import DdpFlags

    assert comm_settings(None) == (25.0, torch.float32)
    assert comm_settings(DdpFlags(implementation="buckets")) == (400.0, torch.bfloat16)
    assert comm_settings(DdpFlags(implementation="buckets", bucket_cap_mb=100, bucket_dtype="fp32")) == (
        100,
        torch.float32,
    )
    assert comm_settings(DdpFlags(comm_hook="bf16_compress")) == (25.0, torch.bfloat16)


def test_average_gradients_packs_and_unpacks_buckets():
    import torch.distributed as dist

    # an in-process rung earlier in the session may have left its one-process group: use it then
    owns_group = not dist.is_initialized()
    if owns_group:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert dist.get_world_size() == 1
        grads = [torch.randn(5), torch.randn(3, 4), torch.randn(7)]
        before = [g.clone() for g in grads]
        average_gradients(grads, bucket_mb=40 / 2**20, dtype=torch.float32)  # 10 values a bucket: 3 buckets
        assert all(torch.equal(a, b) for a, b in zip(grads, before))
        # bf16 buckets: every gradient comes back in place, rounded through bf16
        average_gradients(grads, bucket_mb=20 / 2**20, dtype=torch.bfloat16)
        assert all(torch.equal(a, b.to(torch.bfloat16).float()) for a, b in zip(grads, before))
        assert not all(torch.equal(a, b) for a, b in zip(grads, before))
    finally:
        if owns_group:
            dist.destroy_process_group()


# ----------------------------------------------------------------------------- FP8


def test_fp8_selection_is_the_dit_blocks_large_linears():
    with torch.device("meta"):
        model = Gr00tModel(FULL)
    chosen = fp8_linears(model)
    per_block = ("attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out", "ff.fc1", "ff.fc2")
    assert chosen == [f"dit.blocks.{i}.{p}" for i in range(FULL.dit.layers) for p in per_block]
    # the AdaLN modulation (one row per sample) qualifies by shape and is skipped by name
    assert model.dit.blocks[0].norm1.linear.in_features == 1536
    assert not any(n.endswith("norm1.linear") for n in chosen)

    # share of the DiT's linear FLOPs per sample (51 tokens, 220 VL tokens for cross-attention K/V)
    def rows(name):
        if ".norm1." in name:
            return 1
        cross = int(name.split(".")[2]) % 2 == 0 and name.endswith(("to_k", "to_v"))
        return 220 if cross else 51

    flops = {
        n: rows(n) * m.weight.numel()
        for n, m in model.named_modules()
        if isinstance(m, nn.Linear) and n.startswith("dit.blocks.")
    }
    assert sum(flops[n] for n in chosen) / sum(flops.values()) > 0.95


@needs_torchao
def test_emulated_fp8_tiny_trains_close_to_full_precision():
    from torchao.float8.float8_linear import Float8Linear

    batch = FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.float32, 0)[0]
    ref = build({})
    torch.manual_seed(1)
    ref_loss = FAMILY.loss(ref, batch)
    model = build({})
    converted = apply_linear(model, parse_options({"linear": "fp8"}), min_features=16, emulate=True)
    assert len(converted) == 6 * model.cfg.dit.layers
    assert all(isinstance(model.get_submodule(n), Float8Linear) for n in converted)
    torch.manual_seed(1)
    loss = FAMILY.loss(model, batch)
    loss.backward()
    assert loss.item() == pytest.approx(ref_loss.item(), rel=5e-2) and loss.item() != ref_loss.item()
    assert all(model.get_submodule(n).weight.grad.abs().sum() > 0 for n in converted)


# ----------------------------------------------------------------------------- GPU: the graphed step


def cuda_pair(options, dtype=torch.float32, dropout=True, workload=WORKLOAD, eager_drops=("cuda_graphs",)):
    """The eager model (without the options named in `eager_drops`) and the graphed step's model, built alike
    (same seed), and the graphed step."""
    eager_options = {k: v for k, v in options.items() if k not in eager_drops}
    eager = build(eager_options, "cuda", dtype, workload=workload)
    model = build(options, "cuda", dtype, workload=workload)
    for m in (eager, model):
        for module in m.modules():
            if isinstance(module, nn.Dropout) and not dropout:
                module.p = 0.0
    opts = parse_options(options)
    step = FAMILY.make_step(model, FAMILY.optimizer(model, opts, workload, "cuda"), opts)
    return eager, model, step


def grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@needs_cuda
@pytest.mark.parametrize("dropout", [False, True])
def test_graphed_forward_backward_matches_eager(dropout):
    """Same loss and gradients as eager, dropout off, and on: the replay draws the masks eager draws from the
    same seed (graph-safe Philox state)."""
    eager, model, step = cuda_pair({"vl_pad": 64, "cuda_graphs": True}, dropout=dropout)
    batches = FAMILY.make_batches("tiny", WORKLOAD, 3, "cuda", torch.float32, 0)
    for i, batch in enumerate(batches):  # prompts of different lengths: the step pads them all to 64
        torch.manual_seed(10 + i)
        loss = step.forward_backward(batch)
        torch.manual_seed(10 + i)
        ref = FAMILY.loss(eager, batch)
        ref.backward()
        assert torch.allclose(loss, ref.detach(), rtol=1e-5, atol=1e-7), (i, loss, ref)
        got, want = grads(model), grads(eager)
        assert got.keys() == want.keys()
        for name in want:
            assert torch.allclose(got[name], want[name], rtol=1e-4, atol=1e-6), (i, name)
        eager.zero_grad(set_to_none=True)
    assert (step.captures, step.replays, len(step.graphs)) == (1, 3, 1)


@needs_cuda
def test_graphed_training_steps_match_eager_and_reuse_the_graph():
    eager, model, step = cuda_pair({"vl_pad": 64, "cuda_graphs": True})
    eager_step = FAMILY.make_step(
        eager, FAMILY.optimizer(eager, parse_options({}), WORKLOAD, "cuda"), parse_options({"vl_pad": 64})
    )
    batches = FAMILY.make_batches("tiny", WORKLOAD, 4, "cuda", torch.float32, 0)
    for i, batch in enumerate(batches):
        torch.manual_seed(i)
        loss = step(batch)
        torch.manual_seed(i)
        ref = eager_step(batch)
        assert torch.allclose(loss, ref, rtol=1e-4), (i, loss, ref)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-6), name
    assert (step.captures, step.replays) == (1, 4)
    # a new batch shape gets its own graph; the first shape's graph is replayed again afterwards
    small = FAMILY.make_batches("tiny", replace(WORKLOAD, batch_size=1), 1, "cuda", torch.float32, 0)[0]
    step(small)
    assert (step.captures, len(step.graphs)) == (2, 2)
    step(batches[0])
    assert (step.captures, step.replays) == (2, 6)
    entry = next(e for e in step.graphs.values() if e.inputs["input_ids"].shape[0] == 2)
    assert all(p.grad is g for p, g in zip(step.params, entry.grads))


@needs_cuda
@pytest.mark.parametrize("adamw", ["fused", "compiled"])
def test_graphed_optimizer_steps_match_eager_fused_steps(adamw):
    """The clipping and AdamW step replayed from their own graph (fused; or compiled, by inductor before the
    capture, by a warm-up that moves nothing): the same losses and weights as the eager fused step over four
    steps, one optimizer graph per batch shape, and the optimizer's state kept across shapes (a second shape's
    capture does not reset it)."""
    graphed = {"vl_pad": 64, "cuda_graphs": True, "adamw": adamw, "graph_optimizer": True}
    eager, model, step = cuda_pair(graphed, dropout=False, eager_drops=("cuda_graphs", "graph_optimizer"))
    eager_opts = parse_options({"vl_pad": 64, "adamw": "fused"})
    eager_step = FAMILY.make_step(eager, FAMILY.optimizer(eager, eager_opts, WORKLOAD, "cuda"), eager_opts)
    batches = FAMILY.make_batches("tiny", WORKLOAD, 4, "cuda", torch.float32, 0)
    for i, batch in enumerate(batches):
        loss, ref = step(batch), eager_step(batch)
        assert torch.allclose(loss, ref, rtol=1e-4), (i, loss, ref)
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-6), name
    entry = next(iter(step.graphs.values()))
    assert entry.optimizer_graph is not None and (step.captures, step.replays) == (1, 4)
    steps = {int(s["step"].item()) for s in step.optimizer.state.values()}
    assert steps == {4}  # the zero update that made the state is not counted
    small = FAMILY.make_batches("tiny", replace(WORKLOAD, batch_size=1), 1, "cuda", torch.float32, 0)[0]
    step(small)
    assert {int(s["step"].item()) for s in step.optimizer.state.values()} == {5}
    assert all(e.optimizer_graph is not None for e in step.graphs.values()) and len(step.graphs) == 2


@needs_cuda
def test_bf16_weight_copies_in_the_graphed_steps():
    """`bf16_weights: optimizer` in the graphed rungs (bf16 workload, forward and backward replayed from one graph,
    the compiled AdamW from a second): the copies the optimizer's graph writes are what the next replay of the
    forward reads, so four steps give autocast's losses and weights to the bit, and the copies end as the weights
    rounded to bf16.

    The fp32 weights are compared within a few fp32 roundings of the update rather than to the bit: the two runs'
    AdamW updates are two kernels inductor generates separately (one also writes the copies), and on an H100 their
    fp32 arithmetic rounded differently in the last bit (on an H200 they were bit-equal). The losses, which read
    the weights through their bf16 rounding, stay equal to the bit."""
    bf16 = replace(WORKLOAD, dtype="bf16")
    graphed = {"vl_pad": 64, "cuda_graphs": True, "adamw": "compiled", "graph_optimizer": True}
    runs = []
    for extra in ({}, {"bf16_weights": "optimizer"}):
        opts = parse_options({**graphed, **extra})
        model = build({**graphed, **extra}, "cuda", torch.bfloat16, workload=bf16)
        step = FAMILY.make_step(model, FAMILY.optimizer(model, opts, bf16, "cuda"), opts)
        losses = []
        for i, batch in enumerate(FAMILY.make_batches("tiny", bf16, 4, "cuda", torch.bfloat16, 0)):
            torch.manual_seed(i)
            losses.append(step(batch).item())
        runs.append((model, losses, step))
    (base, base_losses, _), (model, losses, step) = runs
    assert losses == base_losses and step.replays == 4
    params = list(zip(model.parameters(), base.parameters()))
    unequal = sum(int((p != q).sum()) for p, q in params)
    worst = max(float(((p - q).abs() / q.abs().clamp_min(1e-30)).max()) for p, q in params)
    print(f"weights after 4 graphed steps: {unequal} of {sum(p.numel() for p, _ in params)} differ, worst {worst:.1e}")
    assert worst <= 4 * torch.finfo(torch.float32).eps, f"{unequal} weights differ, worst relative {worst:.1e}"
    copies = weight_copies(model)
    assert copies and all(torch.equal(c, w.to(torch.bfloat16)) for w, c in copies)


def loss_and_grads_without_dropout(model, batch):
    """One loss and backward of `model` with its dropout off: (the loss, the gradients by name)."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    loss = FAMILY.loss(model, batch)
    loss.backward()
    return loss.detach(), grads(model)


def test_reference_host_syncs_change_no_value():
    """`host_syncs: reference` makes the reference step's host synchronisations (boolean-index image scatter,
    host-list gathers in the vision tower, the mask check, the Beta draw through the host) on the same values:
    the loss and every gradient are the plain step's, bit for bit; a CUDA graph refuses the option."""
    batch = FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.float32, 0)[0]
    results = []
    for syncs in ("none", "reference"):
        model = build({"host_syncs": syncs})
        assert model.reference_syncs == model.vision.reference_syncs == (syncs == "reference")
        results.append(loss_and_grads_without_dropout(model, batch))
    (loss, plain), (synced_loss, synced) = results
    assert torch.equal(loss, synced_loss) and plain.keys() == synced.keys() and plain
    assert all(torch.equal(plain[k], synced[k]) for k in plain)
    with pytest.raises(SchemaError, match=r"^host_syncs: expected none with cuda_graphs"):
        parse_options({"vl_pad": 64, "cuda_graphs": True, "host_syncs": "reference"})


def test_reference_vision_packing_trains_as_the_plain_step():
    """`vision_packing: reference` (with the reference's syncs, as the community rung runs it): the loss and the
    trainable gradients are the plain step's up to summation order; a CUDA graph refuses the option."""
    batch = FAMILY.make_batches("tiny", WORKLOAD, 1, "cpu", torch.float32, 0)[0]
    results = []
    for options in ({}, {"host_syncs": "reference", "vision_packing": "reference"}):
        model = build(options)
        assert model.vision.reference_packing == bool(options)
        results.append(loss_and_grads_without_dropout(model, batch))
    (loss, plain), (packed_loss, packed) = results
    assert torch.allclose(loss, packed_loss, rtol=1e-5) and plain.keys() == packed.keys() and plain
    assert all(torch.allclose(plain[k], packed[k], rtol=1e-4, atol=1e-6) for k in plain)
    with pytest.raises(SchemaError, match=r"^vision_packing: expected none with cuda_graphs"):
        parse_options({"vl_pad": 64, "cuda_graphs": True, "vision_packing": "reference"})


def test_compiled_optimizer_trains_as_the_reference_optimizer():
    """`adamw: compiled`: the family's ClippedAdamW (clipping at 1.0 in its update, compiled with the workload's
    backend, aot_eager here); three standard steps give the losses and weights of torch's foreach AdamW after
    clip_grad_norm_, the reference's optimizer."""
    from models.clipped_adamw import ClippedAdamW

    workload = replace(WORKLOAD, compile_backend="aot_eager")
    opts = parse_options({"adamw": "compiled"})
    model, ref_model = build({}, workload=workload), build({}, workload=workload)
    optimizer = FAMILY.optimizer(model, opts, workload, "cpu")
    assert isinstance(optimizer, ClippedAdamW) and optimizer.max_norm == 1.0
    assert [g["weight_decay"] for g in optimizer.param_groups] == [1e-5, 0.0]
    step = FAMILY.make_step(model, optimizer, opts)
    ref_step = FAMILY.make_step(ref_model, FAMILY.optimizer(ref_model, parse_options({}), workload, "cpu"), opts)
    for module in (*model.modules(), *ref_model.modules()):
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    for batch in FAMILY.make_batches("tiny", workload, 3, "cpu", torch.float32, 0):
        loss, ref = step(batch), ref_step(batch)
        assert torch.allclose(loss, ref, rtol=1e-5), (loss, ref)
    moved = 0
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        assert torch.allclose(p, q, rtol=1e-4, atol=1e-6), name
        moved += p.requires_grad
    assert moved > 0
    notes = FAMILY.rung_notes({"adamw": "fused"}, {"adamw": "compiled"}, WORKLOAD)
    assert notes == [n for n in notes if "clipping folded into the AdamW update" in n] and len(notes) == 1


@needs_cuda
def test_in_graph_gradient_sync_captures_the_buckets_all_reduce():
    """The bucketed wrapper (models/ddp.py) around the model on a one-rank NCCL group, the all-reduce captured into the graph:
    the gradients after each replay are eager's (averaging over one rank is the identity, in fp32 buckets), a
    step under no_sync() replays a graph of its own, and no timing event was recorded (none can be captured)."""
    import torch.distributed as dist

    from models.ddp import BucketedDataParallel

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    group = dist.new_group(ranks=[0], backend="nccl")
    options = {"vl_pad": 64, "cuda_graphs": True, "grad_sync": "in-graph"}
    eager, model, _ = cuda_pair(options, dropout=False, eager_drops=("cuda_graphs", "grad_sync"))
    events = []

    def event():
        events.append(torch.cuda.Event(enable_timing=True))
        return events[-1]

    wrapped = BucketedDataParallel(model, bucket_mb=0.5, dtype="fp32", process_group=group, event=event)
    assert len(wrapped.buckets) > 1
    opts = parse_options({**options, "ddp": {"implementation": "buckets", "bucket_dtype": "fp32"}})
    step = FAMILY.make_step(wrapped, FAMILY.optimizer(model, opts, WORKLOAD, "cuda"), opts)
    assert step.in_graph
    batches = FAMILY.make_batches("tiny", WORKLOAD, 3, "cuda", torch.float32, 0)
    for i, batch in enumerate(batches):
        step.forward_backward(batch)
        ref = FAMILY.loss(eager, batch)
        ref.backward()
        got, want = grads(model), grads(eager)
        assert set(want) <= set(got), (i, set(want) - set(got))  # the frozen towers have none on either side
        for name, g in got.items():  # a bucket's view of a parameter eager's backward never reached stays zero
            assert torch.allclose(g, want.get(name, torch.zeros_like(g)), rtol=1e-4, atol=1e-6), (i, name)
        eager.zero_grad(set_to_none=True)
    assert step.captures == 1 and events == []  # warm-up and capture untimed; a replay fires no hook
    with wrapped.no_sync():
        step.forward_backward(batches[0])
    assert step.captures == 2 and len(step.graphs) == 2


@needs_cuda
def test_graphed_step_in_mixed_precision():
    """bf16 autocast over fp32 trainable weights (the workload's precision): the graphed loss follows eager's."""
    bf16 = replace(WORKLOAD, dtype="bf16")
    eager, model, step = cuda_pair({"vl_pad": 64, "cuda_graphs": True}, torch.bfloat16, workload=bf16)
    batch = FAMILY.make_batches("tiny", bf16, 1, "cuda", torch.bfloat16, 0)[0]
    torch.manual_seed(0)
    loss = step.forward_backward(batch)
    torch.manual_seed(0)
    ref = FAMILY.loss(eager, batch)
    assert torch.isfinite(loss) and abs(loss - ref) / ref < 2e-2


fp8_capable = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability(0) < (8, 9),
    reason="FP8 needs a GPU with FP8 tensor cores",
)


@fp8_capable
@needs_torchao
@pytest.mark.parametrize("graphs", [False, True])
def test_fp8_dit_on_the_gpu(graphs):
    """torchao float8 (tensorwise) in the tiny DiT: the loss stays within FP8's tolerance of bf16's, eagerly and
    inside a CUDA graph. 16 DiT tokens per sample keep every FP8 GEMM's dimensions multiples of 16."""
    wl = replace(WORKLOAD, dtype="bf16", action_horizon=15)
    options = {"vl_pad": 64, **({"cuda_graphs": True} if graphs else {})}
    eager, model, step = cuda_pair(options, torch.bfloat16, workload=wl)
    converted = apply_linear(model, parse_options({"linear": "fp8"}), min_features=16)
    assert converted
    batch = FAMILY.make_batches("tiny", wl, 1, "cuda", torch.bfloat16, 0)[0]
    torch.manual_seed(0)
    ref = FAMILY.loss(eager, batch)
    torch.manual_seed(0)
    loss = step.forward_backward(batch) if graphs else FAMILY.loss(model, batch)
    assert torch.isfinite(loss) and abs(loss - ref) / ref < 5e-2


@needs_cuda
def test_compiled_blocks_inside_the_graphed_step():
    """The `compile` rung on top of CUDA graphs: inductor compiles each block during the eager warm-up, its
    kernels are captured and replayed. Dropout off, so the loss and gradients must follow eager's closely
    (inductor fuses and reorders fp32 sums)."""
    eager, model, step = cuda_pair(
        {"vl_pad": 64, "cuda_graphs": True, "compile": "per-block"},
        dropout=False,
        eager_drops=("cuda_graphs", "compile"),
    )
    assert step.module.dit.blocks[0]._compiled_call_impl is not None  # compiled in place
    batches = FAMILY.make_batches("tiny", WORKLOAD, 2, "cuda", torch.float32, 0)
    for i, batch in enumerate(batches):
        loss = step.forward_backward(batch)
        ref = FAMILY.loss(eager, batch)
        ref.backward()
        assert torch.allclose(loss, ref.detach(), rtol=1e-4), (i, loss, ref)
        got, want = grads(model), grads(eager)
        for name in want:
            assert torch.allclose(got[name], want[name], rtol=1e-3, atol=1e-5), (i, name)
        eager.zero_grad(set_to_none=True)
    assert (step.captures, step.replays) == (1, 2)
