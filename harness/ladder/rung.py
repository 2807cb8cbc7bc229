"""One rung, run in its own process: build the model with the rung's options, warm up, time the steps.

The runner starts `python -m harness.ladder.rung SPEC.json OUT.json` per rung, so compile caches, memory
statistics and a crash stay inside the rung. Progress goes to stdout, the record to OUT.json.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time
import traceback
from dataclasses import dataclass

import torch

from models import ModelFamily, get_family
from models.ddp import BucketedDataParallel
from models.family import TORCH_DTYPES, Applied, DdpFlags, Step
from models.schema import parse
from models.workload import Workload

from ..data.pipeline import DatasetFeed, LoaderOptions, SyntheticFeed, feed_kind
from ..machine.hardware import Device, get_device
from ..machine.probe import MachineProbe
from ..spec import RungSpec
from ..stats.timing import mfu, summarize_steps
from .distributed import PROCESS_GROUP_BACKEND, context_from_env, gather, init_process_group, shard
from .sabotage import apply_sabotage, configured_sabotage

GIB = 1024**3
# TEST-ONLY: VLABENCH_TEST_SLOWDOWN=0.3 makes every timed step really take 30% longer (a busy wait inside the
# timed region), so tests can check that the gates catch a slowdown. The rung record says it was set;
# never set it for a measurement.
TEST_SLOWDOWN_ENV = "VLABENCH_TEST_SLOWDOWN"


def log(msg: str) -> None:
    if context_from_env().rank == 0:  # under torchrun, one voice for the progress output
        print(msg, flush=True)


def seed_step(seed: int, step: int) -> None:
    """Random draws made inside a step (e.g. flow time sampled on the device) repeat across rungs."""
    torch.manual_seed(seed * 100_003 + step)


def wrap_ddp(model: torch.nn.Module, flags: DdpFlags, applied: Applied, device: Device) -> torch.nn.Module:
    """DistributedDataParallel with the rung's flags (plus its gradient compression hook). Without a launcher
    (torchrun sets the env) this is a one-process group, which still runs DDP's bucketing, hooks and
    all-reduce calls."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    if not dist.is_initialized():
        backend = PROCESS_GROUP_BACKEND[device.torch_device.type]
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    if flags.implementation == "buckets":
        if dist.get_world_size() == 1:
            return model  # averaging over one process is the identity: nothing to wrap, nothing to overlap
        return BucketedDataParallel.from_flags(model, flags, event=device.event)
    kwargs = flags.as_dict()
    hook = kwargs.pop("comm_hook", None)
    device_ids = None if device.torch_device.type == "cpu" else [torch.device(device.torch_device).index or 0]
    if len(applied.compile_units) > 1:
        # Several compile units already give DDP one graph per layer to overlap with; DDPOptimizer would
        # split those graphs again at bucket boundaries (LoongForge: it must be off with nested compile).
        torch._dynamo.config.optimize_ddp = False
    ddp = DistributedDataParallel(model, device_ids=device_ids, **kwargs)
    if hook:
        ddp.register_comm_hook(None, getattr(default_hooks, f"{hook}_hook"))
    return ddp


def configured_test_slowdown() -> float:
    """The test-only slowdown fraction from the environment (0 when unset)."""
    return float(os.environ.get(TEST_SLOWDOWN_ENV) or 0)


def slow_down_for_test(device, started: float, fraction: float) -> None:
    """TEST-ONLY: busy-wait `fraction` x the step's time so far (measured on the host after a device sync),
    inside the timed region, so the slowdown is real for every timer (host clock or device events). A busy wait,
    not a sleep, as a real regression is more work: a sleeping process hands its CPU to the machine's other jobs,
    and the machine probe after the step then reads a slower machine (in a clean-clone CI run the probe read 21%
    slower around a slept 30%, and the gate called the pair inconclusive three times)."""
    if fraction > 0:
        device.synchronize()
        deadline = time.perf_counter() + fraction * (time.perf_counter() - started)
        while time.perf_counter() < deadline:
            pass
        device.synchronize()


@dataclass
class RungSetup:
    """Everything a rung's steps need, built the same way for `vlabench run` and the pytest-benchmark module."""

    family: ModelFamily
    model: torch.nn.Module  # DDP-wrapped when the rung trains data-parallel
    applied: Applied
    step: Step
    feed: SyntheticFeed | DatasetFeed  # the batches, and how long each step waited for its batch
    device: Device


def dataset_feed(
    spec: RungSpec, family: ModelFamily, device: Device, shard: tuple[int, int] = (0, 1), start: int = 0
) -> DatasetFeed:
    """The rung's input pipeline over the workload's dataset (its `loader` options), for this process's shard,
    from batch `start` on: the same for a ladder rung and a training run (harness/train/setup.py)."""
    workload = spec.workload
    return DatasetFeed(
        workload.data,
        parse(LoaderOptions, spec.loader),
        family,
        workload.model_size,
        workload,
        device.torch_device,
        TORCH_DTYPES[workload.dtype],
        workload.seed,
        shard,
        start,
    )


def synthetic_feed(spec: RungSpec, family: ModelFamily, device: Device, steps: int, ctx) -> SyntheticFeed:
    """`steps` synthetic batches: every rank draws the same global batches and keeps its shard."""
    workload = dataclasses.replace(spec.workload, batch_size=spec.batches(ctx.world_size).global_)
    dtype = TORCH_DTYPES[workload.dtype]
    batches = family.make_batches(workload.model_size, workload, steps, device.torch_device, dtype, workload.seed)
    return SyntheticFeed([shard(b, ctx) for b in batches])


def build(spec: RungSpec, steps: int) -> RungSetup:
    """The rung's model (options applied, DDP when asked or when several processes run), optimizer and
    training step, `steps` batches and the device."""
    family, workload = get_family(spec.model), spec.workload
    ctx = context_from_env()
    device = get_device(spec.backend, index=ctx.local_rank if ctx.distributed and spec.backend != "cpu" else None)
    if ctx.distributed:
        init_process_group(ctx, spec.backend)
    dtype = TORCH_DTYPES[workload.dtype]
    options = family.parse_options(spec.options)
    built = family.build(workload.model_size, options, workload, device.torch_device, dtype, workload.seed)
    apply_sabotage(family, built.model)  # TEST-ONLY, before the optimizer exists (harness/ladder/sabotage.py)
    model = built.model
    flags = family.ddp_flags(options)
    if flags is None and ctx.distributed:
        flags = DdpFlags()  # several processes always train data-parallel; DDP's defaults unless the rung says more
    if flags is not None:
        family.prepare_for_ddp(built, flags)
        model = wrap_ddp(model, flags, built.applied, device)
    optimizer = family.optimizer(built.model, options, workload, spec.backend)  # the parameters, unwrapped
    if feed_kind(workload.data, spec.loader) == "synthetic":
        feed = synthetic_feed(spec, family, device, steps, ctx)
    else:
        feed = dataset_feed(spec, family, device, (ctx.rank, ctx.world_size))
    return RungSetup(family, model, built.applied, family.make_step(model, optimizer, options), feed, device)


PROBES_AROUND = 3  # machine probes right before the first timed step and right after the last
NOSYNC_STEPS = 5  # steps timed again without the gradient all-reduce (several processes)


def data_wait(waits: list[float], step_times: list[float], feed) -> dict:
    """How long the steps waited for their batches (0 for synthetic batches already on the device)."""
    out = feed.describe()
    if isinstance(feed, DatasetFeed):
        median_wait = statistics.median(waits)
        out.update(
            data_wait_s=waits,
            data_wait_ms=1000 * median_wait,
            data_wait_share=median_wait / statistics.median(step_times),
        )
    return out


def bucket_record(wrapper: BucketedDataParallel, ranks: list[dict]) -> dict:
    """The bucketed all-reduce's timing over the timed steps: each bucket's size and median lead (how long
    before backward's end its all-reduce started, on rank 0), and the median tail (from backward's end until
    every bucket was averaged back, the slowest rank per step)."""
    leads = ranks[0]["bucket_lead_ms"]
    tails = [max(r["comm_tail_ms"][i] for r in ranks) for i in range(min(len(r["comm_tail_ms"]) for r in ranks))]
    return {
        "bucket_sizes_mb": wrapper.bucket_sizes_mb(),
        "bucket_lead_ms": [statistics.median(step[b] for step in leads) for b in range(len(wrapper.buckets))],
        "comm_tail_ms": statistics.median(tails),
    }


@dataclass
class Timed:
    """What the timed steps measured: on this process, or over every rank once `combine_ranks` has run."""

    step_times: list[float]
    losses: list  # the steps' detached losses (floats once combined)
    waits: list[float]
    peak: int | None  # the peak memory and reserved memory in bytes (None where the device cannot say)
    reserved: int | None
    buckets: dict | None  # the bucketed all-reduce's timings (None without a bucketed wrapper, or unused)


def warm_up(setup: RungSetup, workload: Workload) -> tuple[float, float | None]:
    """The warm-up steps; returns their seconds and the first one's (compilation happens there)."""
    device, warmup = setup.device, workload.warmup_steps
    first_step_s, t0 = None, time.perf_counter()
    for i in range(warmup):
        seed_step(workload.seed, i)
        ts = time.perf_counter()
        setup.step(setup.feed.fetch(i)[0])
        device.synchronize()
        first_step_s = first_step_s or time.perf_counter() - ts
        log(f"warm-up {i + 1}/{warmup}: {time.perf_counter() - ts:.2f}s")
    return time.perf_counter() - t0, first_step_s


def bucketed(setup: RungSetup) -> BucketedDataParallel | None:
    return setup.model if isinstance(setup.model, BucketedDataParallel) else None


def bucket_timings(setup: RungSetup) -> dict | None:
    """The bucketed wrapper's timings of the timed steps, None without one or when its hooks never ran (a CUDA
    graph's replay averages outside them)."""
    buckets = bucketed(setup)
    timings = buckets.timings(setup.device.elapsed_s) if buckets is not None else None
    return timings if timings is not None and timings["comm_tail_ms"] else None


def time_steps(setup: RungSetup, workload: Workload, probe: MachineProbe, slowdown: float) -> Timed:
    """The timed steps, each between device events with its batch fetched inside, the probe sampled after each
    (and before the first and after the last)."""
    device, warmup, timed = setup.device, workload.warmup_steps, workload.timed_steps
    for _ in range(PROBES_AROUND):
        probe.sample("before")
    device.reset_peak_memory()
    if bucketed(setup) is not None:
        bucketed(setup).reset_timings()  # the timed steps' buckets only
    out = Timed([], [], [], None, None, None)
    for i in range(timed):
        seed_step(workload.seed, warmup + i)
        start, end = device.event(), device.event()
        start.record()
        started = time.perf_counter()
        batch, wait = setup.feed.fetch(warmup + i)  # inside the step: a real input pipeline is part of it
        out.waits.append(wait)
        out.losses.append(setup.step(batch))
        slow_down_for_test(device, started, slowdown)
        end.record()
        device.synchronize()
        out.step_times.append(device.elapsed_s(start, end))
        out.peak = device.peak_memory_bytes()  # before the probe, whose buffers are not the rung's
        out.reserved = device.peak_reserved_bytes()
        probe.sample(f"step {i + 1}")
        log(
            f"step {i + 1}/{timed}: {out.step_times[-1]:.3f}s loss {out.losses[-1].item():.5f}"
            + (f" (waited {1000 * wait:.0f} ms for data)" if wait else "")
        )
    for _ in range(PROBES_AROUND):
        probe.sample("after")
    out.buckets = bucket_timings(setup)
    return out


def nosync_step_times(setup: RungSetup, first: int, n: int) -> list[float]:
    """`n` more steps (batches from `first` on) with DDP's gradient all-reduce switched off (no_sync), in this
    process on this batch: what the all-reduce adds to the step is what overlap left exposed."""
    device, times = setup.device, []
    for i in range(n):
        start, end = device.event(), device.event()
        start.record()
        with setup.model.no_sync():
            setup.step(setup.feed.fetch(first + i)[0])
        end.record()
        device.synchronize()
        times.append(device.elapsed_s(start, end))
    return times


def combine_ranks(setup: RungSetup, workload: Workload, mine: Timed, ctx) -> tuple[Timed, dict]:
    """Every rank's timed steps combined (a data-parallel step ends when its slowest rank ends; the global loss
    is the mean over shards), and the distributed fields of the record: the exposed communication."""
    timed = workload.timed_steps
    nosync = nosync_step_times(setup, workload.warmup_steps + timed, min(timed, NOSYNC_STEPS))
    ranks = gather(
        {
            "step_times_s": mine.step_times,
            "losses": [float(x) for x in mine.losses],
            "peak": mine.peak,
            "reserved": mine.reserved,
            "nosync_s": nosync,
            "buckets": mine.buckets,
        },
        ctx,
    )
    step_times = [max(r["step_times_s"][i] for r in ranks) for i in range(timed)]
    combined = Timed(
        step_times,
        [sum(r["losses"][i] for r in ranks) / len(ranks) for i in range(timed)],
        mine.waits,
        None if mine.peak is None else max(r["peak"] for r in ranks),
        None if mine.reserved is None else max(r["reserved"] for r in ranks),
        mine.buckets,
    )
    nosync_s = statistics.median(max(r["nosync_s"][i] for r in ranks) for i in range(len(nosync)))
    distributed = {
        "world_size": ctx.world_size,
        "per_rank_step_times_s": [r["step_times_s"] for r in ranks],
        "nosync_step_time_s": nosync_s,
        "exposed_comm_s": statistics.median(step_times) - nosync_s,
    }
    if mine.buckets is not None:
        distributed.update(bucket_record(bucketed(setup), [r["buckets"] for r in ranks]))
    return combined, distributed


def measure(spec: RungSpec) -> dict:
    """Run warm-up and timed steps; returns the measured fields of the rung record."""
    workload, ctx = spec.workload, context_from_env()
    t0 = time.perf_counter()
    setup = build(spec, workload.warmup_steps + workload.timed_steps)
    setup.device.synchronize()
    log(f"built in {time.perf_counter() - t0:.1f}s; warm-up {workload.warmup_steps} steps")
    warmup_s, first_step_s = warm_up(setup, workload)
    slowdown, probe = configured_test_slowdown(), MachineProbe(setup.device)
    timed = time_steps(setup, workload, probe, slowdown)
    distributed = {}
    if ctx.distributed:
        timed, distributed = combine_ranks(setup, workload, timed, ctx)
    record_data = data_wait(timed.waits, timed.step_times, setup.feed)
    setup.feed.close()
    stats = summarize_steps(timed.step_times, spec.batches(ctx.world_size).global_)
    flops = setup.family.flops_per_sample(workload.model_size, workload)
    return {
        **stats,
        **distributed,
        "samples_per_s_per_device": stats["samples_per_s"] / ctx.world_size,
        "step_times_s": timed.step_times,
        "losses": [float(x) for x in timed.losses],
        "peak_memory_gib": None if timed.peak is None else timed.peak / GIB,
        "peak_memory_kind": "process peak RSS" if spec.backend == "cpu" else "peak allocated by torch",
        "peak_reserved_gib": None if timed.reserved is None else timed.reserved / GIB,
        "mfu": mfu(stats["samples_per_s"] / ctx.world_size, flops, spec.peak_flops),
        "warmup_s": warmup_s,
        "compile_s": max(0.0, (first_step_s or 0.0) - stats["step_time_s"]),
        "machine_probe": probe.record(),
        "applied": setup.applied.as_dict(),
        **record_data,
        **({"test_slowdown": slowdown} if slowdown else {}),
        **({"test_train_sabotage": configured_sabotage()} if configured_sabotage() else {}),
    }


def run(spec: RungSpec) -> dict:
    record = {"status": "ok", "reason": None}
    try:
        record.update(measure(spec))
    except torch.OutOfMemoryError as exc:
        record.update(status="oom", reason=str(exc).splitlines()[0][:500])
    except Exception as exc:  # recorded, never lost: the ladder goes on with the next rung
        record.update(
            status="error",
            reason=f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
            traceback=traceback.format_exc()[-4000:],
        )
    return record


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    with open(spec_path) as f:
        spec = RungSpec.from_dict(json.load(f))
    record = run(spec)
    import torch.distributed as dist

    if dist.is_initialized():  # a DDP rung's process group: close it cleanly before the process ends
        dist.destroy_process_group()
    if context_from_env().rank == 0:  # rank 0 holds what every rank measured
        with open(out_path, "w") as f:
            json.dump(record, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
