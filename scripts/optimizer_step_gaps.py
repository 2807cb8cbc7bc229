"""The optimizer part of a Pi0.5 training step alone, on the model's real parameters (openpi's precision: bf16 with a
few fp32 ones) and random gradients: the gradient clipping and AdamW step in pieces and whole, eager and replayed
from a CUDA graph, each timed with CUDA events, with the device's idle gaps over 100 us and the kernels around them.
`vlabench profile` finds one long idle gap per step inside the optimizer's part (docs/ladders.md); this says which
operation it belongs to, without the rest of the step.

    python scripts/optimizer_step_gaps.py [--size full] [--repeats 10] [--out FILE.json]

Prints one line per variant (median ms, min-max, the idle time in gaps over 100 us) and each variant's kernels in
order, consecutive kernels of one name collapsed, with the idle time before each run of them.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.ladder.profile import is_annotation, short_name  # noqa: E402
from models.family import clip_and_step  # noqa: E402
from models.pi05 import CLIP, FAMILY, parse_options  # noqa: E402
from models.workload import Workload  # noqa: E402

GAP_US = 100.0  # gaps shown in the timeline and summed per variant


def kernels_in_order(prof) -> list[tuple[float, float, str]]:
    """The device events (kernels, copies, fills) of a profile, as (start_us, end_us, name) in start order."""
    out = []
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA and not is_annotation(event.name):
            out.append((event.time_range.start, event.time_range.end, event.name))
    return sorted(out)


def timeline(kernels: list[tuple[float, float, str]]) -> list[dict]:
    """Consecutive kernels of one name collapsed into runs: name, count, device ms, and the idle ms before it."""
    runs, end = [], None
    for start, stop, name in kernels:
        idle = 0.0 if end is None else max(0.0, start - end) / 1e3
        name = short_name(name, 100)
        if runs and runs[-1]["kernel"] == name and idle * 1e3 < GAP_US:
            runs[-1]["count"] += 1
            runs[-1]["ms"] += (stop - start) / 1e3
            runs[-1]["idle_before_ms"] += idle
        else:
            runs.append({"kernel": name, "count": 1, "ms": (stop - start) / 1e3, "idle_before_ms": idle})
        end = stop if end is None else max(end, stop)
    return runs


def event_ms(fn: Callable[[], None], repeats: int, per_event: int = 1) -> list[float]:
    """ms per call of fn, `repeats` times: CUDA events around `per_event` back-to-back calls (3 calls first as
    warm-up)."""
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(per_event):
            fn()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) / per_event)
    return times


def measure(fn: Callable[[], None], repeats: int) -> dict:
    """fn's median time over `repeats` calls (CUDA events; 3 calls first as warm-up), then one profiled call."""
    times = event_ms(fn, repeats)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    runs = timeline(kernels_in_order(prof))
    return {
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "idle_in_gaps_over_100us_ms": sum(r["idle_before_ms"] for r in runs if r["idle_before_ms"] * 1e3 >= GAP_US),
        "timeline": runs,
    }


def forward_backward(module: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> Callable[[], None]:
    """One forward and backward of `module` on a fixed input and output gradient, the gradients dropped after it."""

    def step():
        module(x).backward(grad)
        x.grad = None
        for p in module.parameters():
            p.grad = None

    return step


def graphed(fn: Callable[[], None]) -> Callable[[], None]:
    """fn captured once as a CUDA graph (after warm-up calls on a side stream), replayed by the returned callable."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def variants(model: torch.nn.Module, workload: Workload) -> dict[str, Callable[[], Callable[[], None]]]:
    """name -> a maker of the callable to time (made when measured, so one optimizer's state lives at a time)."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad for p in params]

    def coefficient() -> torch.Tensor:
        total = torch.nn.utils.get_total_norm(grads, 2.0, foreach=True)
        return torch.clamp(CLIP / (total + 1e-6), max=1.0)

    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for g in grads:
        by_dtype.setdefault(g.dtype, []).append(g)
    coef = coefficient()

    def clip_and_adamw(adamw: str, capturable: bool) -> Callable[[], None]:
        """The step's clipping and optimizer as the family makes them (`adamw` option; capturable as for a graph)."""
        options = parse_options({"adamw": adamw, "cuda_graphs": "whole-step" if capturable else "none"})
        optimizer = FAMILY.optimizer(model, options, workload, "cuda")
        return lambda: clip_and_step(optimizer, params, CLIP)

    made = {
        "total norm (get_total_norm)": lambda: lambda: torch.nn.utils.get_total_norm(grads, 2.0, foreach=True),
        "clip coefficient (norm, add, reciprocal, mul, clamp)": lambda: coefficient,
        "clip_grad_norm_": lambda: lambda: torch.nn.utils.clip_grad_norm_(params, CLIP),
        "clip_grad_norm_, graphed": lambda: graphed(lambda: torch.nn.utils.clip_grad_norm_(params, CLIP)),
    }
    for dtype, group in by_dtype.items():
        made[f"_foreach_mul_ of the {len(group)} {dtype} gradients by a device scalar"] = lambda group=group: (
            lambda: torch._foreach_mul_(group, coef)
        )
    made.update(
        {
            "clip + AdamW foreach": lambda: clip_and_adamw("foreach", False),
            "clip + AdamW foreach capturable, graphed": lambda: graphed(clip_and_adamw("foreach", True)),
            "clip + AdamW fused": lambda: clip_and_adamw("fused", False),
            "clip + AdamW fused capturable, graphed": lambda: graphed(clip_and_adamw("fused", True)),
            "AdamW fused with the clip as its gradient scale (fused-clip), graphed": lambda: graphed(
                clip_and_adamw("fused-clip", True)
            ),
            "clip + AdamW in Triton kernels over every tensor (triton-clip)": lambda: clip_and_adamw(
                "triton-clip", True
            ),
            "clip + AdamW in Triton kernels over every tensor (triton-clip), graphed": lambda: graphed(
                clip_and_adamw("triton-clip", True)
            ),
        }
    )
    return made


def agreement(model: torch.nn.Module, workload: Workload, steps: int = 3) -> dict:
    """`steps` steps of triton-clip against fused-clip from the same weights and gradients: the total norm each
    clips with, and per tensor kind (weights, exp_avg, exp_avg_sq) the share of elements that are not bit-equal and
    the largest difference relative to the largest value (bf16 rounds each side's fp32 result)."""
    params = [p for p in model.parameters() if p.requires_grad]
    start = [p.detach().clone() for p in params]
    torch.manual_seed(1)  # fresh gradients: the variants timed before scaled them in place many times over
    grads = [torch.randn_like(p) * 1e-4 for p in params]  # fused-clip clips in place: each step starts from these
    out, ends = {}, {}
    for adamw in ("fused-clip", "triton-clip"):
        with torch.no_grad():
            for p, s in zip(params, start):
                p.copy_(s)
        options = parse_options({"adamw": adamw, "cuda_graphs": "whole-step"})
        optimizer = FAMILY.optimizer(model, options, workload, "cuda")
        for _ in range(steps):
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.grad.copy_(g)
            clip_and_step(optimizer, params, CLIP)
        state = [optimizer.state[p] for p in params]
        ends[adamw] = {
            "weights": [p.detach().clone() for p in params],
            "exp_avg": [s["exp_avg"] for s in state],
            "exp_avg_sq": [s["exp_avg_sq"] for s in state],
        }
        if adamw == "triton-clip":
            out["total_norm_triton"] = optimizer.total_norm().item()
        del optimizer
    out["total_norm_torch"] = torch.nn.utils.get_total_norm(grads, 2.0, foreach=True).item()
    for kind in ("weights", "exp_avg", "exp_avg_sq"):
        a_all, b_all = ends["fused-clip"][kind], ends["triton-clip"][kind]
        differ = sum(int((a != b).sum()) for a, b in zip(a_all, b_all))
        scale = max(a.abs().max().item() for a in a_all)
        out[kind] = {
            "share_not_bit_equal": differ / sum(a.numel() for a in a_all),
            "max_difference_over_max_value": max(
                (a.float() - b.float()).abs().max().item() for a, b in zip(a_all, b_all)
            )
            / scale,
        }
    with torch.no_grad():
        for p, s, g in zip(params, start, grads):
            p.copy_(s)
            p.grad.copy_(g)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="full", help="model size (full, small, tiny)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, help="also write the measurements as JSON")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("optimizer_step_gaps: needs a CUDA device (CUDA events and graphs)", file=sys.stderr)
        return 2
    workload = Workload(batch_size=1, cameras=2, text_tokens=8, action_horizon=4, seed=0, lr=2.5e-5)
    model = FAMILY.build(args.size, parse_options({}), workload, "cuda", torch.bfloat16, 0).model
    params = [p for p in model.parameters() if p.requires_grad]
    torch.manual_seed(0)
    for p in params:
        p.grad = torch.randn_like(p) * 1e-4
    dtypes = {str(dt): sum(p.numel() for p in params if p.dtype == dt) for dt in {p.dtype for p in params}}
    print(f"{len(params)} parameter tensors, elements by dtype: {dtypes}")
    results = {}
    for name, make in variants(model, workload).items():
        results[name] = measure(make(), args.repeats)
        r = results[name]
        print(
            f"{name}: {r['median_ms']:.2f} ms ({r['min_ms']:.2f}-{r['max_ms']:.2f}), idle in gaps over 100 us "
            f"{r['idle_in_gaps_over_100us_ms']:.2f} ms"
        )
        for run in r["timeline"]:
            idle = f"  [idle {run['idle_before_ms']:.2f} ms before]" if run["idle_before_ms"] * 1e3 >= GAP_US else ""
            print(f"    {run['count']:5d} x {run['kernel']}  {run['ms']:.2f} ms{idle}")
        torch.cuda.empty_cache()
    agree = agreement(model, workload)
    print(f"triton-clip against fused-clip after 3 steps from the same weights and gradients: {json.dumps(agree)}")
    if args.out:
        args.out.write_text(
            json.dumps(
                {"parameters": len(params), "elements": dtypes, "variants": results, "triton_vs_fused_clip": agree},
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
