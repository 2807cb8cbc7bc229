"""Where the FP8 step's cast time goes in one Gemma MLP of the pi05-beyond workload (2048 -> 16384 -> 2048 features,
32 samples of 712 prefix tokens), forward and backward, compiled as the per-layer compile unit is.

`vlabench profile` of the fp8 rung shows the MLP backward's fused kernel (GELU backward, amax, FP8 cast of the
gradients in both layouts) at 2.2 ms per layer against 0.87 ms for bf16's GELU backward: the weight-gradient GEMM
reads the gradient token-major, so the cast also writes a transposed copy. This times the MLP as bf16, as torchao
FP8 (tensorwise), with inductor's N-D tiling preferred, with the weight-gradient GEMMs left in bf16, and as
models/fp8_mlp.py's one function with tiled Triton casts (`fp8_mlp: triton`); then the
GELU backward with the two-layout cast alone: inductor's kernel against models/fp8_casts.py's tiled Triton kernel.

    python scripts/fp8_mlp_casts.py [--tokens N] [--repeats 20] [--out FILE.json]

Prints each variant's median ms (min-max) and its five largest kernels, and the tiles the Triton kernel's autotuning
chose.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]  # kept under docs/history/scripts/: the repository root
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from optimizer_step_gaps import forward_backward, measure  # noqa: E402

from models.fp8 import apply_fp8  # noqa: E402
from models.fp8_casts import (  # noqa: E402
    GELU_BACKWARD,
    cast_kernel,
    gelu_mul_backward,
    gelu_mul_backward_casts,
    launch,
    tensor_scale,
)
from models.pi05.config import FULL  # noqa: E402
from models.pi05.model import GemmaMLP  # noqa: E402


class Holder(torch.nn.Module):
    """apply_fp8 converts linears inside a module: the MLP under one."""

    def __init__(self):
        super().__init__()
        self.mlp = GemmaMLP(FULL.llm)

    def forward(self, x):
        return self.mlp(x)


def mlp_step(fp8: str | None, compile_options: dict | None, tokens: int) -> Callable[[], None]:
    """Forward and backward of one MLP (fresh weights, bf16) on a fixed input and output gradient."""
    torch.manual_seed(0)
    model = Holder().to("cuda", torch.bfloat16)
    if fp8 == "tensorwise":
        apply_fp8(model, "tensorwise")
    elif fp8 == "tensorwise, grad-weight bf16":
        from torchao.float8 import CastConfig, Float8LinearConfig, ScalingType, convert_to_float8_training

        off = CastConfig(scaling_type=ScalingType.DISABLED)
        config = dataclasses.replace(
            Float8LinearConfig.from_recipe_name("tensorwise"),
            cast_config_input_for_grad_weight=off,
            cast_config_grad_output_for_grad_weight=off,
        )
        convert_to_float8_training(model, config=config)
    elif fp8 == "triton":
        model.mlp.fp8_function = True  # `fp8_mlp: triton`: the MLP as one function with tiled Triton casts
    model.mlp.compile(fullgraph=True, options=compile_options)
    x = torch.randn(tokens, FULL.llm.width, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(tokens, FULL.llm.width, device="cuda", dtype=torch.bfloat16)
    return forward_backward(model, x, grad)


def kernel_totals(result: dict, top: int = 5) -> list[tuple[str, int, float]]:
    totals: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for run in result["timeline"]:
        totals[run["kernel"]][0] += run["count"]
        totals[run["kernel"]][1] += run["ms"]
    return sorted(((k, c, ms) for k, (c, ms) in totals.items()), key=lambda r: -r[2])[:top]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32 * 712, help="tokens through the MLP (batch x prefix)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("fp8_mlp_casts: needs a CUDA GPU with FP8 tensor cores (sm89+)", file=sys.stderr)
        return 2
    results = {}

    def report(name: str, result: dict) -> None:
        results[name] = {k: v for k, v in result.items() if k != "timeline"} | {"kernels": kernel_totals(result)}
        print(f"{name}: {result['median_ms']:.3f} ms (min {result['min_ms']:.3f}, max {result['max_ms']:.3f})")
        for kernel, count, ms in kernel_totals(result):
            print(f"    {ms:8.3f} ms  {count:4d}x  {kernel}")

    mlp_variants = {
        "MLP bf16": (None, None),
        "MLP fp8 tensorwise (torchao)": ("tensorwise", None),
        "MLP fp8 tensorwise, inductor prefer_nd_tiling": ("tensorwise", {"triton.prefer_nd_tiling": True}),
        "MLP fp8 tensorwise, grad-weight GEMMs in bf16": ("tensorwise, grad-weight bf16", None),
        "MLP fp8 tensorwise, one function with tiled Triton casts (fp8_mlp: triton)": ("triton", None),
    }
    for name, (fp8, options) in mlp_variants.items():
        try:
            report(name, measure(mlp_step(fp8, options, args.tokens), args.repeats))
        except Exception as err:  # one variant failing (a config this torchao lacks) still reports the others
            print(f"{name}: failed: {type(err).__name__}: {err}")
            results[name] = {"error": f"{type(err).__name__}: {err}"}
        torch._dynamo.reset()
        torch.cuda.empty_cache()

    torch.manual_seed(0)
    shape = (args.tokens, FULL.llm.mlp)
    g, gate, up = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    d_gate, d_up = gelu_mul_backward(g, gate, up)
    s_gate, s_up = tensor_scale(d_gate, True), tensor_scale(d_up, True)
    compiled = torch.compile(gelu_mul_backward_casts, fullgraph=True)
    eager = gelu_mul_backward_casts(g, gate, up, s_gate, s_up)
    for name, outs in {
        "inductor": compiled(g, gate, up, s_gate, s_up),
        "triton": launch(GELU_BACKWARD, [g, gate, up], [s_gate, s_up], True),
    }.items():
        mismatch = [(q.float() != e.float()).float().mean().item() for q, e in zip(outs, eager)]
        print(f"cast {name}: share of FP8 elements unlike torch's eager operations': {mismatch}")
        results[f"cast {name} mismatch"] = mismatch
    bytes_moved = 3 * g.numel() * 2 + 4 * g.numel()
    for name, fn in {
        "GELU backward + FP8 casts in both layouts, inductor": lambda: compiled(g, gate, up, s_gate, s_up),
        "GELU backward + FP8 casts in both layouts, models/fp8_casts.py's Triton kernel": lambda: launch(
            GELU_BACKWARD, [g, gate, up], [s_gate, s_up], True
        ),
    }.items():
        result = measure(fn, args.repeats)
        report(name, result)
        print(f"    {bytes_moved / result['median_ms'] / 1e9:.2f} TB/s at {bytes_moved / 1e9:.2f} GB (casts' traffic)")
    best = getattr(cast_kernel(), "cache", {})
    print(f"autotuned tiles per (M, N, MODE, ...): { {k: str(v) for k, v in best.items()} }")
    results["autotuned tiles"] = {str(k): str(v) for k, v in best.items()}
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
