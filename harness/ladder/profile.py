"""`vlabench profile SCENARIO --rung R`: where one rung's step goes, for a figure that falls short of its goal.

The rung is built exactly as `vlabench run` builds it (harness/ladder/rung.py), warmed up, then a few steps run under
torch.profiler. Reported per step: the wall time, the time the device spent in kernels and the rest (launch gaps:
the device idle while the host issues work or waits, e.g. for data), the data wait, the kernels that take the
most time, all kernels' time by kind (GEMM, attention, the optimizer's foreach kernels, ...), and on a GPU the
idle gaps between kernels by size, with the largest and the kernels around them. A launch-bound step shows
kernels covering little of the wall time; a compute-bound one, most of it.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

import torch
from tabulate import tabulate

from models import get_family
from models.schema import parse

from ..data.pipeline import LoaderOptions
from ..machine.hardware import get_device
from ..spec import RungSpec
from .rung import build, dataset_feed, seed_step


def is_annotation(name: str) -> bool:
    """Profiler ranges recorded on the device beside the kernels: optimizer steps, record_function blocks (named
    like "Optimizer.step#AdamW.step"). A kernel's name may hold a "#" too (a lambda's, "{lambda(float)#1}"), but
    always within its template or parameter list, which a range's name has none of."""
    return name.startswith(("ProfilerStep", "Optimizer.")) or ("#" in name and "<" not in name and "(" not in name)


def profile_rung(spec: RungSpec, steps: int = 5, top: int = 15) -> dict:
    workload = spec.workload
    warmup = max(1, workload.warmup_steps)
    setup = build(spec, warmup + steps)
    device = setup.device
    for i in range(warmup):
        seed_step(workload.seed, i)
        setup.step(setup.feed.fetch(i)[0])
    device.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.backend == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    walls, waits = [], []
    with torch.profiler.profile(activities=activities) as prof:
        for i in range(steps):
            seed_step(workload.seed, warmup + i)
            start = time.perf_counter()
            with torch.profiler.record_function(f"{STEP_MARK}{i}"):  # the step's span on the device timeline too
                batch, wait = setup.feed.fetch(warmup + i)
                setup.step(batch)
            device.synchronize()
            walls.append(time.perf_counter() - start)
            waits.append(wait)
    setup.feed.close()
    return {
        **kernel_summary(prof, steps, statistics.median(walls), device.backend == "cuda", top),
        "data_wait_s": statistics.median(waits),
    }


def data_path_rate(spec: RungSpec, batches: int = 50) -> dict:
    """The rung's input pipeline alone: its batches fetched back to back with no step between them, each waited for
    until it is on the device. The warm-up takes the workload's warm-up batches and as many more as the loader's
    queues hold (workers x prefetch_factor, and the async loader's buffers), so the window starts with them drained:
    the samples/s over it is the most the pipeline can feed, and a step faster than that waits for data on it. No
    model is built."""
    device = get_device(spec.backend)
    feed = dataset_feed(spec, get_family(spec.model), device)
    options = parse(LoaderOptions, spec.loader)
    prefetched = options.workers * options.prefetch_factor if options.kind in ("torch", "async") else 0
    queued = prefetched + (options.buffers if options.kind in ("async", "memory") else 0)
    warmup = max(1, spec.workload.warmup_steps) + queued
    times = []
    try:
        for i in range(warmup + batches):
            start = time.perf_counter()
            feed.fetch(i)
            device.synchronize()
            if i >= warmup:
                times.append(time.perf_counter() - start)
        described = feed.describe()
    finally:
        feed.close()
    size = spec.workload.batch_size
    deciles = statistics.quantiles(times, n=10) if len(times) > 1 else [times[0]] * 9
    return {
        "batches": batches,
        "warmup_batches": warmup,
        "batch_s": times,
        "samples_per_s": size * len(times) / sum(times),  # over the window: queued batches and slow ones alike
        "median_batch_ms": 1000 * statistics.median(times),
        "p10_p90_batch_ms": [1000 * deciles[0], 1000 * deciles[-1]],
        **described,
    }


def data_rate_table(name: str, r: dict) -> str:
    loader = r["loader"]
    lines = [
        f"{name}: the input pipeline alone ({loader['kind']} loader, {loader['workers']} workers, "
        f"preprocess {loader['preprocess']}), {r['batches']} batches fetched back to back after "
        f"{r['warmup_batches']} (its queues drained)",
        f"  {r['samples_per_s']:.1f} samples/s over the window; a batch every {r['median_batch_ms']:.1f} ms at the "
        f"median (p10-p90 {r['p10_p90_batch_ms'][0]:.1f}-{r['p10_p90_batch_ms'][1]:.1f} ms)",
        "  a step faster than this waits for its data with this loader",
    ]
    return "\n".join(lines)


# Namespaces that fill a templated kernel's name before the part that tells kernels apart (a foreach kernel's
# functor: which operation it is); shown without them, and without the parameter list that repeats the template.
NAME_NOISE = ("void ", "at::native::", "(anonymous namespace)::")


def short_name(name: str, width: int = 120) -> str:
    for noise in NAME_NOISE:
        name = name.replace(noise, "")
    if ">(" in name:
        name = name[: name.index(">(") + 1]
    return name[:width]


# Gaps between one kernel's end and the next one's start, by size: under 10 us is the device's own latency between
# dependent kernels (what fewer, larger kernels remove); over 100 us the device waited for the host (Python work,
# a sync, a copy or data); between, either.
# (key, shown as, from us, below us)
GAP_CLASSES = (
    ("under_10us", "under 10 us", 0.0, 10.0),
    ("10_to_100us", "10-100 us", 10.0, 100.0),
    ("over_100us", "over 100 us", 100.0, float("inf")),
)


# The profiled steps are marked with record_function ranges of these names (the "#" keeps them out of the kernels),
# which the profiler also records on the device timeline: where in its step each large gap falls.
STEP_MARK = "vlabench.step#"


def step_of(at_us: float, spans: list[tuple[float, float]]) -> dict:
    """Which profiled step (its device-side span) holds the time `at_us`, and how far into it; step None between
    two steps; {} without spans (a profile that recorded none)."""
    for i, (start, stop) in enumerate(spans):
        if start <= at_us < stop:
            return {"step": i, "at_ms": (at_us - start) / 1e3, "step_ms": (stop - start) / 1e3}
    return {"step": None} if spans else {}


def device_gaps(kernels: list[tuple], steps: int, top: int = 5, spans: list[tuple[float, float]] = ()) -> dict:
    """From the kernels' (start_us, end_us, name[, stream]) over the profiled steps, per step: the device's busy time
    (the union of the kernels' intervals: kernels on several streams at once count once) and its idle gaps between
    the first kernel and the last, by size class (count and ms), with the `top` largest gaps, the kernels on either
    side of each and their streams, and (given the steps' device-side `spans`) the step each falls in and where."""
    busy_us, gaps, end, last = 0.0, [], None, None
    for kernel in sorted(kernels, key=lambda k: k[:2]):
        start, stop = kernel[:2]
        if end is None or start > end:
            if end is not None:
                gaps.append((start - end, last, kernel))
            busy_us += stop - start
            end, last = stop, kernel
        elif stop > end:  # overlaps the running interval: only the part beyond it is new busy time
            busy_us += stop - end
            end, last = stop, kernel
    classes = {
        label: {
            "count_per_step": sum(lo <= g < hi for g, _, _ in gaps) / steps,
            "ms_per_step": sum(g for g, _, _ in gaps if lo <= g < hi) / 1e3 / steps,
        }
        for label, _, lo, hi in GAP_CLASSES
    }
    largest = sorted(gaps, key=lambda g: -g[0])[:top]
    between = [g for g, after, _ in gaps if spans and step_of(after[1], spans)["step"] is None]
    return {
        "busy_s": busy_us / 1e6 / steps,
        "gap_s": sum(g for g, _, _ in gaps) / 1e6 / steps,
        "gaps": classes,
        # the part of the idle time between two steps (the host between them), where the steps' spans are recorded
        **({"between_steps_ms_per_step": sum(between) / 1e3 / steps} if spans else {}),
        "largest_gaps": [gap_record(g, a, b, spans) for g, a, b in largest],
    }


def gap_record(us: float, after: tuple, before: tuple, spans) -> dict:
    record = {"us": us, "after": short_name(after[2]), "before": short_name(before[2])}
    if len(after) > 3 and len(before) > 3:  # the streams, where the profiler names them
        record.update(after_stream=after[3], before_stream=before[3])
    return {**record, **step_of(after[1], spans)}


# Kernel kinds by name, first match wins (lower-cased substrings): so that a step's time adds up by what it does even
# where one kind is spread over many kernels (inductor's foreach kernels of a compiled optimizer, say).
KERNEL_KINDS = (
    ("communication", ("nccl",)),
    ("attention", ("sdpa", "flash", "fmha", "attention", "attn")),
    ("GEMM", ("nvjet", "gemm", "cutlass", "xmma", "cublas", "triton_tem_", "_mm_", "matmul")),
    ("optimizer and other foreach", ("multi_tensor_apply", "triton_for_", "foreach", "adam")),
    ("inductor pointwise", ("triton_poi_",)),
    ("inductor reductions", ("triton_red_", "triton_per_")),
    ("norms and softmax", ("norm", "softmax")),
    ("copies, fills and indexing", ("copy", "fill", "memcpy", "memset", "cat", "index", "gather", "scatter")),
    ("aten elementwise", ("elementwise", "reduce")),
)


def kernel_kind(name: str) -> str:
    lower = name.lower()
    return next((kind for kind, keys in KERNEL_KINDS if any(k in lower for k in keys)), "other")


def kernel_summary(prof, steps: int, wall_s: float, on_gpu: bool = True, top: int = 15) -> dict:
    """Per step of a torch.profiler run over `steps` steps of median wall time `wall_s`: the time the device spent
    in kernels, the rest (idle: launch gaps, host work, waits), the kernel launches, the top kernels and (on a GPU)
    the idle gaps between kernels by size (device_gaps)."""
    kernels: dict[str, list[float]] = defaultdict(list)
    intervals, spans = [], []
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if event.name.startswith(STEP_MARK):
            spans.append((event.time_range.start, event.time_range.end))
        # device-side user annotations (e.g. "Optimizer.step#AdamW.step") span kernels: counting them too would
        # count those kernels twice
        elif not is_annotation(event.name):
            kernels[event.name].append(event.device_time_total / 1e6)
            intervals.append((event.time_range.start, event.time_range.end, event.name, event.device_resource_id))
    kernel_s = sum(sum(v) for v in kernels.values()) / steps
    ranked = sorted(kernels.items(), key=lambda kv: -sum(kv[1]))[:top]
    kinds: dict[str, list[float]] = defaultdict(list)
    for name, times in kernels.items():
        kinds[kernel_kind(name)] += times
    return {
        **({"device": device_gaps(intervals, steps, spans=sorted(spans))} if on_gpu and intervals else {}),
        "steps": steps,
        "wall_s": wall_s,
        "kernel_s": kernel_s,
        "device_busy_share": kernel_s / wall_s if on_gpu else None,
        "idle_s": max(0.0, wall_s - kernel_s) if on_gpu else None,
        "kernel_launches": sum(len(v) for v in kernels.values()) / steps,
        "top_kernels": [
            {"name": short_name(name), "calls_per_step": len(v) / steps, "ms_per_step": 1e3 * sum(v) / steps}
            for name, v in ranked
        ],
        "kernel_kinds": [
            {"kind": kind, "calls_per_step": len(v) / steps, "ms_per_step": 1e3 * sum(v) / steps}
            for kind, v in sorted(kinds.items(), key=lambda kv: -sum(kv[1]))
        ],
    }


def gap_place(gap: dict) -> str:
    """Where a gap is: the kernels around it (with their streams), and its step and offset where recorded."""
    streams = "after_stream" in gap and gap["after_stream"] is not None
    after = gap["after"] + (f" (stream {gap['after_stream']})" if streams else "")
    before = gap["before"] + (f" (stream {gap['before_stream']})" if streams else "")
    if gap.get("step") is not None:
        where = f", {gap['at_ms']:.1f} ms into step {gap['step'] + 1} of {gap['step_ms']:.1f} ms"
    else:
        where = ", between two steps" if "step" in gap else ""
    return f"after {after} before {before}{where}"


def profile_table(name: str, p: dict) -> str:
    head = [
        f"profile of {name}: {1e3 * p['wall_s']:.1f} ms per step (median of {p['steps']}), data wait "
        f"{1e3 * p['data_wait_s']:.1f} ms"
    ]
    if p["device_busy_share"] is not None:
        head.append(
            f"kernels {1e3 * p['kernel_s']:.1f} ms per step ({p['device_busy_share']:.0%} of the step), "
            f"{p['kernel_launches']:.0f} kernel launches per step; the device idle {1e3 * p['idle_s']:.1f} ms "
            "(launch gaps, host work, waits)"
        )
    if p.get("device"):
        d = p["device"]
        parts = []
        for label, shown, _, _ in GAP_CLASSES:
            n, ms = d["gaps"][label]["count_per_step"], d["gaps"][label]["ms_per_step"]
            parts.append(f"{shown}: {n:.{0 if n >= 10 else 1}f} ({ms:.1f} ms)")
        classes = ", ".join(parts)
        head.append(
            f"device busy {1e3 * d['busy_s']:.1f} ms per step (kernels' union); gaps between kernels "
            f"{1e3 * d['gap_s']:.1f} ms: {classes}"
        )
        if "between_steps_ms_per_step" in d:
            head.append(f"  of which between two steps: {d['between_steps_ms_per_step']:.1f} ms per step")
        head += [f"  gap of {g['us']:.0f} us {gap_place(g)}" for g in d["largest_gaps"]]
    rows = [[k["name"], f"{k['calls_per_step']:.0f}", f"{k['ms_per_step']:.2f}"] for k in p["top_kernels"]]
    tables = [tabulate(rows, headers=("kernel", "calls per step", "ms per step"), disable_numparse=True)]
    if p.get("kernel_kinds"):  # profiles written before the kinds were added have none
        kinds = [[k["kind"], f"{k['calls_per_step']:.0f}", f"{k['ms_per_step']:.2f}"] for k in p["kernel_kinds"]]
        tables.append(
            tabulate(kinds, headers=("kernels by kind", "calls per step", "ms per step"), disable_numparse=True)
        )
    return "\n".join([*head, *tables])
