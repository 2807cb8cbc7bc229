"""One SigLIP layer as a family's step runs it, compiled as the per-layer compile unit is: which operator launches
each of its kernels, and what the layer costs with fc1's bias added by the GEMM (nn.Linear) and in the GELU's kernel
(`vision_fc1_bias: gelu`).
- pi05: the pi05-beyond workload, 32 samples x 2 cameras of 256 patches batched ([64, 256, 1152], bf16), forward
  and backward (SigLIP trains).
- gr00t: the gr00t-loongforge workload, 16 samples x 2 views of 256 patches ([32, 256, 1152], bf16), forward only
  (SigLIP2 is frozen in N1.6 fine-tuning and nothing before it trains, so no gradient is made).

The step's profile lists strided copies (`direct_copy_kernel`) that no eager code of ours makes. Replayed from a
CUDA graph, the step's kernels carry no operator; here the compiled layer runs eagerly under the profiler, so each
kernel is attributed to the operator around its launch (and that operator's callers). Then both variants are timed
replayed from CUDA graphs, in alternating rounds (the same machine state for both).

    python scripts/siglip_layer_kernels.py [--family pi05|gr00t] [--images N] [--repeats 20] [--rounds 5]
        [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fp8_mlp_casts import kernel_totals  # noqa: E402
from optimizer_step_gaps import event_ms, forward_backward, graphed, measure  # noqa: E402

from harness.results import provenance  # noqa: E402
from models.gr00t import config as gr00t_config  # noqa: E402
from models.gr00t import model as gr00t_model  # noqa: E402
from models.pi05 import config as pi05_config  # noqa: E402
from models.pi05 import model as pi05_model  # noqa: E402
from models.siglip import VisionLayer  # noqa: E402

VARIANTS = {"fc1's bias in the GEMM (nn.Linear)": False, "fc1's bias in the GELU (vision_fc1_bias: gelu)": True}
# family -> (vision config, attention kernel, patches per image, images in the step, trains)
FAMILIES = {
    "pi05": (pi05_config.FULL.vision, pi05_model.vision_kernel, pi05_config.FULL.vision.tokens, 64, True),
    "gr00t": (gr00t_config.FULL.vision, gr00t_model.vision_kernel, gr00t_config.FULL.vision.patches**2, 32, False),
}


def layer_step(family: str, images: int, bias_in_gelu: bool):
    """One SigLIP layer (bf16, seeded weights), compiled, on a fixed input: forward and backward where the family
    trains it, else forward only without autograd."""
    cfg, kernel, patches, _, trains = FAMILIES[family]
    torch.manual_seed(0)
    layer = VisionLayer(cfg, kernel, "sdpa").to("cuda", torch.bfloat16)
    layer.mlp.bias_in_gelu = bias_in_gelu
    layer.compile(fullgraph=True)
    x = torch.randn(images, patches, cfg.width, device="cuda", dtype=torch.bfloat16)
    if trains:
        x.requires_grad_()
        return forward_backward(layer, x, torch.randn_like(x))
    layer.requires_grad_(False)

    @torch.no_grad()
    def forward():
        layer(x)

    return forward


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
    parser.add_argument("--family", choices=sorted(FAMILIES), default="pi05")
    parser.add_argument("--images", type=int, help="images through the layer (batch x cameras; default the step's)")
    parser.add_argument("--repeats", type=int, default=20, help="timed replays per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds, the variants alternating")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("siglip_layer_kernels: needs a CUDA GPU", file=sys.stderr)
        return 2
    images = args.images or FAMILIES[args.family][3]
    results: dict = {"provenance": provenance([sys.executable, *sys.argv]), "family": args.family, "images": images}
    results |= {"timed": {}, "sources": {}}
    replays, steps = {}, {}  # steps: each graph reads its layer and input, which only the step's closure holds
    for name, bias_in_gelu in VARIANTS.items():
        step = steps[name] = layer_step(args.family, images, bias_in_gelu)
        for _ in range(3):  # compiles
            step()
        results["sources"][name] = kernel_sources(step)
        replays[name] = graphed(step)
        result = measure(replays[name], args.repeats)
        every = kernel_totals(result, 1000)
        results["timed"][name] = {"kernels_ms": sum(ms for _, _, ms in every), "kernels": every, "rounds_ms": []}
    for _ in range(args.rounds):
        for name, replay in replays.items():
            results["timed"][name]["rounds_ms"].append(statistics.median(event_ms(replay, args.repeats)))
    print(f"SigLIP layer, {args.family}, {images} images, {args.rounds} alternating rounds of {args.repeats} replays")
    for name, timed in results["timed"].items():
        rounds = timed["rounds_ms"]
        timed["median_ms"] = statistics.median(rounds)
        launches = sum(c for _, c, _ in timed["kernels"])
        print(f"{name}: {timed['median_ms']:.3f} ms (rounds {min(rounds):.3f}-{max(rounds):.3f}), "
              f"kernels {timed['kernels_ms']:.3f} ms over {launches} launches")  # fmt: skip
        for kernel, count, ms in timed["kernels"][:10]:
            print(f"    {ms:8.3f} ms  {count:4d}x  {kernel[:110]}")
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
