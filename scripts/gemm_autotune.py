"""Whether inductor's Triton GEMM templates, with the GELU and its backward fused into their epilogues, beat cuBLAS
on the pi05-beyond workload's bf16 layers: one Gemma MLP (32 samples x 712 prefix tokens, 2048 -> 16384 -> 2048)
and one SigLIP layer (32 samples x 2 cameras of 256 patches, batched), forward and backward, compiled as the
per-layer compile units are, with `compile_tuning: default` and `max-autotune-gemm` (models/pi05/techniques.py).

The bf16 step's profile puts Gemma's GELU x up and its backward at 26.6 ms a step, each one pass over a
[22784, 16384] tensor that the GEMM beside it has just written or is about to read. In a GEMM's epilogue that pass
would not write and re-read the tensor, if the template's GEMM keeps up with cuBLAS. Each variant is replayed from a
CUDA graph, as the step runs it; the seconds its first call took (compiling and, for max-autotune-gemm, benchmarking
every GEMM's candidates) are printed beside it, since the rung pays them in its warm-up.

    python scripts/gemm_autotune.py [--repeats 20] [--only mlp|siglip] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fp8_mlp_casts import kernel_totals  # noqa: E402
from optimizer_step_gaps import forward_backward, graphed, measure  # noqa: E402

from harness.results import provenance  # noqa: E402
from models.pi05.config import FULL  # noqa: E402
from models.pi05.model import GemmaMLP, vision_kernel  # noqa: E402
from models.pi05.techniques import COMPILE_TUNING  # noqa: E402
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
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--only", choices=sorted(UNITS), help="time this unit alone")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gemm_autotune: needs a CUDA GPU", file=sys.stderr)
        return 2
    results: dict = {"provenance": provenance([sys.executable, *sys.argv]), "timed": {}}
    for unit in [args.only] if args.only else list(UNITS):
        per_step = UNITS[unit][2]
        for tuning in TUNINGS:
            name = f"{unit}, {tuning}"
            try:
                step = unit_step(unit, tuning)
                start = time.perf_counter()
                step()  # compiles (and benchmarks the GEMMs' candidates)
                torch.cuda.synchronize()
                first_s = time.perf_counter() - start
                result = measure(graphed(step), args.repeats)
            except Exception as err:  # one variant failing still reports the others
                print(f"{name}: failed: {type(err).__name__}: {err}", flush=True)
                results["timed"][name] = {"error": f"{type(err).__name__}: {err}"}
                continue
            finally:
                torch._dynamo.reset()
                torch.cuda.empty_cache()
            every = kernel_totals(result, 1000)
            results["timed"][name] = {k: v for k, v in result.items() if k != "timeline"} | {
                "first_call_s": first_s,
                "kernels_ms": sum(ms for _, _, ms in every),
                "kernels": every,
                "per_step": per_step,
            }
            print(f"{name}: {result['median_ms']:.3f} ms (min {result['min_ms']:.3f}, max {result['max_ms']:.3f}), "
                  f"x{per_step} a step = {per_step * result['median_ms']:.1f} ms; first call {first_s:.0f} s",
                  flush=True)  # fmt: skip
            for kernel, count, ms in every[:8]:
                print(f"    {ms:8.3f} ms  {count:4d}x  {kernel[:110]}")
        base, tuned = (results["timed"].get(f"{unit}, {t}", {}) for t in TUNINGS)
        if "median_ms" in base and "median_ms" in tuned:
            saved = per_step * (base["median_ms"] - tuned["median_ms"])
            print(f"{unit}: max-autotune-gemm saves {saved:.1f} ms of the step ({per_step} units)\n", flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
