"""Whether inductor's Triton GEMM templates, with the GELU and its backward fused into their epilogues, beat cuBLAS
on the pi05-beyond workload's bf16 layers: one Gemma MLP (32 samples x 712 prefix tokens, 2048 -> 16384 -> 2048)
and one SigLIP layer (32 samples x 2 cameras of 256 patches, batched), forward and backward, compiled as the
per-layer compile units are, with `compile_tuning: default` and `max-autotune-gemm` (models/compile_units.py).

The bf16 step's profile puts Gemma's GELU x up and its backward at 26.6 ms a step, each one pass over a
[22784, 16384] tensor that the GEMM beside it has just written or is about to read. In a GEMM's epilogue that pass
would not write and re-read the tensor, if the template's GEMM keeps up with cuBLAS. Each variant is replayed from a
CUDA graph, as the step runs it, the variants alternated in rounds; the seconds its first call took (compiling and,
for max-autotune-gemm, benchmarking every GEMM's candidates) are printed beside it: the rung pays them in its
warm-up.

    python scripts/gemm_autotune.py [--repeats 20] [--rounds 5] [--only mlp|siglip] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]  # kept under docs/history/scripts/: the repository root
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from fp8_mlp_casts import kernel_totals  # noqa: E402
from optimizer_step_gaps import event_ms, forward_backward, graphed, measure  # noqa: E402

from harness.results import provenance  # noqa: E402
from models.compile_units import COMPILE_TUNING  # noqa: E402
from models.pi05.config import FULL  # noqa: E402
from models.pi05.model import GemmaMLP, vision_kernel  # noqa: E402
from models.siglip import VisionLayer  # noqa: E402

TUNINGS = ("default", "max-autotune-gemm")
# (the module, its input's shape, how many the bf16 step runs: 18 Gemma layers, 27 SigLIP layers)
UNITS = {
    "mlp": (lambda: GemmaMLP(FULL.llm), (32 * 712, FULL.llm.width), FULL.llm.layers),
    "siglip": (
        lambda: VisionLayer(FULL.vision, vision_kernel, "sdpa"),
        (64, FULL.vision.tokens, FULL.vision.width),
        FULL.vision.layers,
    ),
}


def unit_step(unit: str, tuning: str):
    """The unit (bf16, seeded weights) compiled with the tuning's options, forward and backward on a fixed input."""
    make, shape, _ = UNITS[unit]
    torch.manual_seed(0)
    module = make().to("cuda", torch.bfloat16)
    module.compile(fullgraph=True, options=COMPILE_TUNING[tuning])
    x = torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    return forward_backward(module, x, torch.randn_like(x))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20, help="replays timed per variant per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds alternating the variants (order rotated)")
    parser.add_argument("--only", choices=sorted(UNITS), help="time this unit alone")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gemm_autotune: needs a CUDA GPU", file=sys.stderr)
        return 2
    results: dict = {"provenance": provenance([sys.executable, *sys.argv]), "timed": {}}
    for unit in [args.only] if args.only else list(UNITS):
        timed = time_unit(unit, args.repeats, args.rounds)
        results["timed"].update({f"{unit}, {tuning}": record for tuning, record in timed.items()})
        if args.out:  # after each unit, so that a call cut short keeps what it measured
            args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


def time_unit(unit: str, repeats: int, rounds: int) -> dict[str, dict]:
    """Each tuning's unit compiled and captured as a CUDA graph, then the graphs' replays timed in alternating
    rounds (so a clock that drifts while the other variant compiles shifts both), then each profiled once."""
    per_step, replays, records, steps = UNITS[unit][2], {}, {}, []
    for tuning in TUNINGS:
        try:
            step = unit_step(unit, tuning)
            start = time.perf_counter()
            step()  # compiles (and benchmarks the GEMMs' candidates)
            torch.cuda.synchronize()
            records[tuning] = {"first_call_s": time.perf_counter() - start, "per_step": per_step, "times_ms": []}
            replays[tuning] = graphed(step)
            steps.append(step)  # the graph replays into the step's module, input and gradient: keep them alive
        except Exception as err:  # one variant failing still reports the others
            print(f"{unit}, {tuning}: failed: {type(err).__name__}: {err}", flush=True)
            records[tuning] = {"error": f"{type(err).__name__}: {err}"}
        finally:
            torch._dynamo.reset()  # the captured graphs replay without the compiled code's guards
    for r in range(rounds):
        order = list(replays)[r % len(replays) :] + list(replays)[: r % len(replays)]
        for tuning in order:
            records[tuning]["times_ms"] += event_ms(replays[tuning], repeats)
    for tuning, replay in replays.items():
        times, profiled = records[tuning]["times_ms"], measure(replay, 3)
        every = kernel_totals(profiled, 1000)
        records[tuning] |= {
            "median_ms": statistics.median(times),
            "min_ms": min(times),
            "max_ms": max(times),
            "profiled_kernels_ms": sum(ms for _, _, ms in every),
            "kernels": every,
        }
        print(f"{unit}, {tuning}: {records[tuning]['median_ms']:.3f} ms (min {min(times):.3f}, max {max(times):.3f}; "
              f"{len(times)} replays in {rounds} alternating rounds), x{per_step} a step = "
              f"{per_step * records[tuning]['median_ms']:.1f} ms; first call {records[tuning]['first_call_s']:.0f} s",
              flush=True)  # fmt: skip
        for kernel, count, ms in every[:8]:
            print(f"    {ms:8.3f} ms  {count:4d}x  {kernel[:110]}")
    if len(replays) == len(TUNINGS):
        base, tuned = (records[t]["median_ms"] for t in TUNINGS)
        print(f"{unit}: max-autotune-gemm {base / tuned:.3f}x, {per_step * (base - tuned):.1f} ms of the step\n")
    return records


if __name__ == "__main__":
    raise SystemExit(main())
