"""`vlabench profile SCENARIO --rung R`: where one rung's step goes, for a figure that falls short of its goal.

The rung is built exactly as `vlabench run` builds it (harness/ladder/rung.py), warmed up, then a few steps run under
torch.profiler. Reported per step: the wall time, the time the device spent in kernels and the rest (launch gaps:
the device idle while the host issues work or waits, e.g. for data), the data wait, and the kernels that take the
most time. A launch-bound step shows kernels covering little of the wall time; a compute-bound one, most of it.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict

import torch

from ..spec import RungSpec


def is_annotation(name: str) -> bool:
    """Profiler ranges recorded on the device beside the kernels: optimizer steps, record_function blocks."""
    return "#" in name or name.startswith(("ProfilerStep", "Optimizer."))


def profile_rung(spec: RungSpec, steps: int = 5, top: int = 15) -> dict:
    from .rung import build, seed_step

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


def kernel_summary(prof, steps: int, wall_s: float, on_gpu: bool = True, top: int = 15) -> dict:
    """Per step of a torch.profiler run over `steps` steps of median wall time `wall_s`: the time the device spent
    in kernels, the rest (idle: launch gaps, host work, waits), the kernel launches and the top kernels."""
    kernels: dict[str, list[float]] = defaultdict(list)
    for event in prof.events():
        # device-side user annotations (e.g. "Optimizer.step#AdamW.step") span kernels: counting them too would
        # count those kernels twice
        if event.device_type == torch.autograd.DeviceType.CUDA and not is_annotation(event.name):
            kernels[event.name].append(event.device_time_total / 1e6)
    kernel_s = sum(sum(v) for v in kernels.values()) / steps
    ranked = sorted(kernels.items(), key=lambda kv: -sum(kv[1]))[:top]
    return {
        "steps": steps,
        "wall_s": wall_s,
        "kernel_s": kernel_s,
        "device_busy_share": kernel_s / wall_s if on_gpu else None,
        "idle_s": max(0.0, wall_s - kernel_s) if on_gpu else None,
        "kernel_launches": sum(len(v) for v in kernels.values()) / steps,
        "top_kernels": [
            {"name": name[:120], "calls_per_step": len(v) / steps, "ms_per_step": 1e3 * sum(v) / steps}
            for name, v in ranked
        ],
    }


def profile_table(name: str, p: dict) -> str:
    from tabulate import tabulate

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
    rows = [[k["name"], f"{k['calls_per_step']:.0f}", f"{k['ms_per_step']:.2f}"] for k in p["top_kernels"]]
    return "\n".join(
        [*head, tabulate(rows, headers=("kernel", "calls per step", "ms per step"), disable_numparse=True)]
    )
