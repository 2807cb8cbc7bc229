"""What `layer_norm: triton` changes in one SigLIP layer of the pi05-beyond workload (32 samples x 2 cameras of 256
patches, batched: [64, 256, 1152]), forward and backward, compiled as the per-layer compile unit is and replayed
from a CUDA graph as the step is: torch's LayerNorms (inductor writes their backward) against models/layer_norm.py's
(the backward in one Triton kernel per LayerNorm, the residual add fused into the second); then the residual add
and LayerNorm alone, both ways.

    python scripts/siglip_layer_norms.py [--images 64] [--repeats 20] [--out FILE.json]

Prints each variant's median ms (min-max), the sum of its kernels and its largest kernels, and the largest
difference of the layer's output and input gradient between the two (one eager call each). The JSON holds every
kernel and the provenance.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fp8_mlp_casts import kernel_totals  # noqa: E402
from optimizer_step_gaps import graphed, measure  # noqa: E402

from harness.results import provenance  # noqa: E402
from models.layer_norm import add_layer_norm  # noqa: E402
from models.pi05.config import FULL  # noqa: E402
from models.pi05.model import vision_kernel  # noqa: E402
from models.siglip import VisionLayer  # noqa: E402


def layer_step(kernels: bool, images: int):
    """One SigLIP layer (bf16, seeded weights), compiled, forward and backward on a fixed input and gradient."""
    torch.manual_seed(0)
    layer = VisionLayer(FULL.vision, vision_kernel, "sdpa").to("cuda", torch.bfloat16)
    layer.norm_kernels = kernels
    layer.compile(fullgraph=True)
    x = torch.randn(images, FULL.vision.tokens, FULL.vision.width, device="cuda", dtype=torch.bfloat16)
    x.requires_grad_()
    grad = torch.randn_like(x)

    def step():
        out = layer(x)
        out.backward(grad)
        step.last = (out.detach().clone(), x.grad.detach().clone())
        x.grad = None
        for p in layer.parameters():
            p.grad = None

    return step


def norm_step(kernels: bool, images: int):
    """The residual add and LayerNorm alone: (s, LayerNorm(s)) of s = x + y, compiled, forward and backward."""
    torch.manual_seed(0)
    norm = nn.LayerNorm(FULL.vision.width, eps=FULL.vision.eps).to("cuda", torch.bfloat16)
    shape = (images * FULL.vision.tokens, FULL.vision.width)
    x, y = (torch.randn(shape, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(2))
    g_s, g = torch.randn(shape, device="cuda", dtype=torch.bfloat16), torch.randn_like(x)

    def plain(a, b):
        s = a + b
        return s, norm(s)

    fn = torch.compile((lambda a, b: add_layer_norm(a, b, norm)) if kernels else plain, fullgraph=True)

    def step():
        s, out = fn(x, y)
        torch.autograd.backward((s, out), (g_s, g))
        x.grad = y.grad = norm.weight.grad = norm.bias.grad = None

    return step


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=64, help="images through the layer (batch x cameras)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("siglip_layer_norms: needs a CUDA GPU", file=sys.stderr)
        return 2
    results, outputs = {"provenance": provenance([sys.executable, *sys.argv])}, {}
    for name, make, kernels in (
        ("SigLIP layer, torch LayerNorms", layer_step, False),
        ("SigLIP layer, layer_norm: triton", layer_step, True),
        ("add + LayerNorm, torch", norm_step, False),
        ("add + LayerNorm, layer_norm: triton", norm_step, True),
    ):
        step = make(kernels, args.images)
        step()  # compiles, autotunes the kernel, and keeps one eager call's values
        if hasattr(step, "last"):
            outputs[kernels] = step.last
        result = measure(graphed(step), args.repeats)
        every = kernel_totals(result, 1000)
        busy = sum(ms for _, _, ms in every)
        results[name] = {k: v for k, v in result.items() if k != "timeline"} | {"kernels_ms": busy, "kernels": every}
        print(f"{name}: {result['median_ms']:.3f} ms (min {result['min_ms']:.3f}, max {result['max_ms']:.3f}), "
              f"kernels {busy:.3f} ms over {sum(c for _, c, _ in every)} launches")  # fmt: skip
        for kernel, count, ms in every[:12]:
            print(f"    {ms:8.3f} ms  {count:4d}x  {kernel[:110]}")
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    (out_a, dx_a), (out_b, dx_b) = outputs[False], outputs[True]
    diff = {
        "output": (out_a.float() - out_b.float()).abs().max().item(),
        "input gradient": (dx_a.float() - dx_b.float()).abs().max().item(),
        "input gradient, largest": dx_a.float().abs().max().item(),
    }
    print("largest difference, torch vs triton LayerNorms:", json.dumps(diff))
    results["difference"] = diff
    if args.out:
        args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
