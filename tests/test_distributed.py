"""Data-parallel rungs: two gloo processes on the CPU train exactly like one process on the global batch."""

import gc
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from harness.ladder.rung import build
from harness.ladder.runner import run_scenario, rung_command
from harness.machine.hardware import get_device, get_target
from harness.scenario import load_scenario
from harness.spec import RungSpec

WORKLOAD = {
    "batch_size": 2,
    "cameras": 2,
    "text_tokens": 16,
    "action_horizon": 4,
    "warmup_steps": 1,
    "timed_steps": 2,
    "seed": 0,
    "dtype": "fp32",
    "lr": 1e-3,
    "model_size": "tiny",
}
SPEC = {
    "model": "pi05",
    "backend": "cpu",
    "workload": WORKLOAD,
    "peak_flops": None,
    "options": {"camera_slots": "auto", "recompute": "none"},
}
GR00T_SPEC = {
    "model": "gr00t",
    "backend": "cpu",
    "workload": {**WORKLOAD, "text_tokens": 40, "action_horizon": 6},
    "peak_flops": None,
    "options": {},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_step(spec):
    setup = build(RungSpec.from_dict(spec), 1)
    model = setup.model
    torch.manual_seed(1)  # GR00T's DiT and state encoder drop out in training, as the reference does
    loss = setup.family.loss(model, setup.feed.fetch(0)[0])
    loss.backward()
    grads = {n.removeprefix("module."): p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return loss.detach(), grads


def rank_main(rank, world, port, out, spec=SPEC):
    os.environ.update(
        WORLD_SIZE=str(world), RANK=str(rank), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )
    import torch.distributed as dist

    loss, grads = one_step(spec)
    losses = [None] * world
    dist.all_gather_object(losses, float(loss))
    if rank == 0:
        torch.save({"losses": losses, "grads": grads}, out)
    # The DDP wrapper (its reducer holds the group) goes first, and both ranks leave together: a rank that tore
    # the group down while the other still used it aborted in gloo once ("terminate called without an active
    # exception")
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


@pytest.mark.slow
def test_two_processes_equal_one_process_on_the_global_batch(tmp_path):
    out = tmp_path / "ddp.pt"
    mp.spawn(rank_main, args=(2, free_port(), str(out)), nprocs=2, join=True)
    ddp = torch.load(out)
    # one process, the same global batch (2 x the per-process batch), the same parameters frozen
    single = {**SPEC, "workload": {**WORKLOAD, "batch_size": 4}, "options": {**SPEC["options"], "ddp": {}}}
    loss, grads = one_step(single)
    assert sum(ddp["losses"]) / 2 == pytest.approx(float(loss), rel=1e-5)
    assert ddp["grads"].keys() == grads.keys() and grads
    for name, g in grads.items():  # DDP averages the ranks' gradients
        assert torch.allclose(ddp["grads"][name], g, rtol=1e-4, atol=1e-6), name


@pytest.mark.slow
@pytest.mark.parametrize("base", [SPEC, GR00T_SPEC], ids=["pi05", "gr00t"])
def test_bucketed_all_reduce_gives_the_gradients_of_ddp(tmp_path, base):
    """Two gloo processes, LoongForge's gradient communication (reverse-order contiguous buckets, one async
    all-reduce per bucket in fp32 here so the comparison is exact; small buckets so there are several) against
    torch's DDP on the same shards: the same averaged gradients. Each family builds its optimizer beside the
    wrapper (GR00T's weight-decay groups read its own parameter names)."""
    buckets = {
        **base,
        "options": {
            **base["options"],
            "ddp": {"implementation": "buckets", "bucket_cap_mb": 0.05, "bucket_dtype": "fp32"},
        },
    }
    results = {}
    for name, spec in (("ddp", base), ("buckets", buckets)):
        out = tmp_path / f"{name}.pt"
        mp.spawn(rank_main, args=(2, free_port(), str(out), spec), nprocs=2, join=True)
        results[name] = torch.load(out)
    assert results["buckets"]["losses"] == pytest.approx(results["ddp"]["losses"], rel=1e-6)
    ddp, ours = results["ddp"]["grads"], results["buckets"]["grads"]
    assert ours.keys() == ddp.keys() and ddp
    for name, g in ddp.items():
        assert torch.allclose(ours[name], g, rtol=1e-5, atol=1e-7), name


def test_buckets_are_reverse_order_and_bounded():
    import torch.distributed as dist
    from torch import nn

    from models.ddp import BucketedDataParallel

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    model = nn.Sequential(*(nn.Linear(64, 64) for _ in range(6)))  # 6 x (4096 + 64) parameters
    device = get_device("cpu")
    # ~10k bf16 elements per bucket
    wrapped = BucketedDataParallel(model, bucket_mb=0.02, dtype="bf16", event=device.event)
    # reverse order, a bucket closed before it would pass 10,485 elements: 4,160 x 2 + 64, then 4,096 + 64 + ...
    assert [len(b.params) for b in wrapped.buckets] == [5, 4, 3]
    assert wrapped.buckets[0].params[0] is model[5].bias  # the last layer's gradients come first
    assert all(b.buffer.dtype == torch.bfloat16 for b in wrapped.buckets)
    x = torch.randn(3, 64)
    wrapped(x).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    with wrapped.no_sync():
        wrapped(x).sum().backward()  # local only: nothing launched
    assert all(b.work is None for b in wrapped.buckets)
    # one synchronised backward timed: the first bucket (last layers) launched before backward ended, the
    # others no later than the one before them
    timings = wrapped.timings(device.elapsed_s)
    (leads,) = timings["bucket_lead_ms"]
    assert len(leads) == 3 and leads[0] > 0 and leads[0] >= leads[1] >= leads[2] >= 0
    assert len(timings["comm_tail_ms"]) == 1 and timings["comm_tail_ms"][0] >= 0
    wrapped.reset_timings()
    assert wrapped.timings(device.elapsed_s) == {"bucket_lead_ms": [], "comm_tail_ms": []}


def test_arrival_order_buckets_are_rebuilt_after_the_first_backward():
    """A module registered last but used first (an encoder) gets its gradients last: reverse order puts it in
    the first bucket, which then launches only when backward ends. With `order="arrival"` the first synchronised
    backward records the order and the buckets are rebuilt in it; the averaged gradients stay each parameter's
    own (one process: averaging is the identity, so they equal an unwrapped copy's)."""
    import copy

    import torch.distributed as dist
    from torch import nn

    from models.ddp import BucketedDataParallel

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)

    class EncoderLast(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(*(nn.Linear(32, 32) for _ in range(3)))
            self.encoder = nn.Linear(8, 32)  # registered last, used first

        def forward(self, x):
            return self.body(self.encoder(x))

    torch.manual_seed(0)
    model = EncoderLast()
    plain = copy.deepcopy(model)
    wrapped = BucketedDataParallel(model, bucket_mb=0.005, dtype="fp32", order="arrival")  # ~1.3k elements
    assert wrapped.buckets[0].params[:2] == [model.encoder.bias, model.encoder.weight]  # reverse order
    x = torch.randn(4, 8)
    for step in range(2):
        for m in (model, plain):
            m.zero_grad(set_to_none=True)
        wrapped(x).sum().backward()
        plain(x).sum().backward()
        for (name, a), b in zip(model.named_parameters(), plain.parameters()):
            assert torch.equal(a.grad, b.grad), (step, name)
        if step == 0:  # rebuilt after the first synchronised backward: the last layer first, the encoder last
            order = [p for b in wrapped.buckets for p in b.params]
            assert order[0] is model.body[2].bias or order[0] is model.body[2].weight
            assert set(map(id, order[-2:])) == {id(model.encoder.weight), id(model.encoder.bias)}
            assert sorted(map(id, order)) == sorted(id(p) for p in model.parameters())
    with pytest.raises(ValueError, match="bucket order: expected reverse or arrival"):
        BucketedDataParallel(plain, order="forward")


def test_bucket_order_is_a_buckets_flag():
    from models.family import DdpFlags
    from models.schema import SchemaError, parse

    flags = parse(DdpFlags, {"implementation": "buckets", "bucket_order": "arrival"})
    assert flags.bucket_order == "arrival" and "bucket_order" not in flags.as_dict()
    with pytest.raises(SchemaError, match="bucket_order: expected implementation: buckets"):
        parse(DdpFlags, {"bucket_order": "arrival"})


def test_the_wrapper_made_from_flags_takes_their_values_or_the_defaults():
    import torch.distributed as dist
    from torch import nn

    from models.ddp import BUCKET_MB, BucketedDataParallel, DdpFlags, bucket_settings

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    assert bucket_settings(DdpFlags(implementation="buckets")) == (BUCKET_MB, "bf16", "reverse")
    flags = DdpFlags(implementation="buckets", bucket_cap_mb=0.005, bucket_dtype="fp32", bucket_order="arrival")
    model = nn.Sequential(nn.Linear(32, 32), nn.Linear(32, 32))
    wrapped = BucketedDataParallel.from_flags(model, flags)
    # 1,310 fp32 elements a bucket, in reverse order: the last layer's bias and weight and the first's bias, then its weight
    assert [len(b.params) for b in wrapped.buckets] == [3, 1]
    assert wrapped.buckets[0].buffer.dtype == torch.float32 and wrapped._arrivals == []


def test_torchrun_command():
    assert rung_command("s", "o")[1:] == ["-m", "harness.ladder.rung", "s", "o"]
    cmd = rung_command("s", "o", 4)
    assert cmd[1:5] == ["-m", "torch.distributed.run", "--nproc_per_node=4", "--standalone"]
    multi = rung_command("s", "o", 8, ["--nnodes", "2", "--node_rank", "1", "--rdzv_endpoint", "h:29500"])
    assert "--standalone" not in multi and multi[-4:] == ["-m", "harness.ladder.rung", "s", "o"]


@pytest.mark.slow
def test_run_with_two_processes_reports_global_and_per_device_rates(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("""
name: ddp-test
model: pi05
workload: {batch_size: 1, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 1, timed_steps: 3,
           seed: 0, dtype: fp32}
ladder:
  - {name: community, options: {camera_slots: auto, recompute: none}}
  - {name: buckets, options: {ddp: {implementation: buckets, bucket_cap_mb: 0.05, bucket_dtype: bf16}}}
targets:
  cpu: {model_size: tiny}
""")
    result = run_scenario(
        load_scenario(path), get_target("cpu"), tmp_path / "r.json", ["test"], nproc=2, progress=lambda _: None
    )
    rung = result["rungs"][0]
    assert rung["status"] == "ok", rung.get("reason")
    assert rung["world_size"] == 2 and len(rung["per_rank_step_times_s"]) == 2
    assert rung["samples_per_s_per_device"] == pytest.approx(rung["samples_per_s"] / 2)
    assert rung["nosync_step_time_s"] > 0 and "exposed_comm_s" in rung
    assert "bucket_sizes_mb" not in rung  # torch's DDP: its buckets are its own
    buckets = result["rungs"][1]
    assert buckets["status"] == "ok", buckets.get("reason")
    assert len(buckets["bucket_sizes_mb"]) == len(buckets["bucket_lead_ms"]) > 1
    assert min(buckets["bucket_sizes_mb"]) <= 0.05  # a bucket holds more only for a single larger parameter
    assert buckets["bucket_lead_ms"][0] > 0 and buckets["comm_tail_ms"] >= 0
    assert result["nproc"] == 2
