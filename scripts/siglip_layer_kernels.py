"""One SigLIP layer of the pi05-beyond workload (32 samples x 2 cameras of 256 patches, batched: [64, 256, 1152],
bf16), forward and backward, compiled as the per-layer compile unit is: which operator launches each of its kernels,
and what the layer costs with fc1's bias added by the GEMM (nn.Linear) and in the GELU's kernel
(`vision_fc1_bias: gelu`).

The step's profile lists about 30 strided copies a step (`direct_copy_kernel`, 0.12 ms each) that no eager code of
ours makes. Replayed from a CUDA graph, the step's kernels carry no operator; here the compiled layer runs eagerly
under the profiler, so each kernel is attributed to the operator around its launch (and that operator's callers).
Then each variant is timed replayed from a CUDA graph, as the step runs it.

    python scripts/siglip_layer_kernels.py [--images 64] [--repeats 20] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fp8_mlp_casts import kernel_totals  # noqa: E402
from optimizer_step_gaps import forward_backward, graphed, measure  # noqa: E402

from harness.results import provenance  # noqa: E402
from models.pi05.config import FULL  # noqa: E402
from models.pi05.model import vision_kernel  # noqa: E402
from models.siglip import VisionLayer  # noqa: E402

VARIANTS = {"fc1's bias in the GEMM (nn.Linear)": False, "fc1's bias in the GELU (vision_fc1_bias: gelu)": True}


def layer_step(images: int, bias_in_gelu: bool):
    """One SigLIP layer (bf16, seeded weights), compiled, forward and backward on a fixed input and gradient."""
    torch.manual_seed(0)
    layer = VisionLayer(FULL.vision, vision_kernel, "sdpa").to("cuda", torch.bfloat16)
    layer.mlp.bias_in_gelu = bias_in_gelu
    layer.compile(fullgraph=True)
    x = torch.randn(images, FULL.vision.tokens, FULL.vision.width, device="cuda", dtype=torch.bfloat16)
    x.requires_grad_()
    return forward_backward(layer, x, torch.randn_like(x))


def kernel_sources(step) -> list[dict]:
    """Every kernel of one eager call of `step`, with the operator around its launch and that operator's callers."""
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
        step()
        torch.cuda.synchronize()
    rows = []
    for event in prof.events():
        for kernel in event.kernels:
            callers, parent = [], event.cpu_parent
            while parent is not None:
                callers.append(parent.name)
                parent = parent.cpu_parent
            rows.append(
                {
                    "kernel": kernel.name,
                    "us": kernel.duration,
                    "operator": event.name,
                    "shapes": [list(s) for s in event.input_shapes if s],
                    "callers": callers,
                }
            )
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=64, help="images through the layer (batch x cameras)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("siglip_layer_kernels: needs a CUDA GPU", file=sys.stderr)
        return 2
    results: dict = {"provenance": provenance([sys.executable, *sys.argv]), "timed": {}, "sources": {}}
    for name, bias_in_gelu in VARIANTS.items():
        step = layer_step(args.images, bias_in_gelu)
        for _ in range(3):  # compiles
            step()
        results["sources"][name] = kernel_sources(step)
        result = measure(graphed(step), args.repeats)
        every = kernel_totals(result, 1000)
        busy = sum(ms for _, _, ms in every)
        results["timed"][name] = {k: v for k, v in result.items() if k != "timeline"} | {
            "kernels_ms": busy,
            "kernels": every,
        }
        print(f"{name}: {result['median_ms']:.3f} ms (min {result['min_ms']:.3f}, max {result['max_ms']:.3f}), "
              f"kernels {busy:.3f} ms over {sum(c for _, c, _ in every)} launches")  # fmt: skip
        for kernel, count, ms in every[:10]:
            if not kernel.startswith("nvjet"):
                print(f"    {ms:8.3f} ms  {count:4d}x  {kernel[:110]}")
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    for name, rows in results["sources"].items():
        print(f"\n{name}: where each kernel is launched (GEMMs and memsets left out), the operator < its callers:")
        for row in rows:
            if not row["kernel"].startswith(("nvjet", "Memset")):
                chain = " < ".join([row["operator"], *row["callers"][:2]])
                print(f"  {row['us']:8.1f} us  {row['kernel'][:60]:60s}  {chain[:90]}  {row['shapes'][:3]}")
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
