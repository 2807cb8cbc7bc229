"""Where the FP8 MLP functions' cast time goes in the pi05-beyond step, cast by cast, and which tiling serves each.

`vlabench profile` of `fp8-triton-vision-mlp` puts models/fp8_casts.py's kernel at 107 ms a step over 756 launches,
all under one name. This times every launch the step's FP8 MLPs make (Gemma's backbone and action expert, SigLIP
per camera), at the workload's shapes, with the kernel autotuned over its tiles as the step runs it and with each
candidate tiling alone; prints per cast the ms per call, the ms per step (times its calls per step), the bytes it
moves and the TB/s, and sums the step's total per tiling choice. Launches of small tensors time the host's launch,
not the kernel (the step replays them from a CUDA graph).

    python scripts/fp8_cast_tiles.py [--repeats 20] [--only gemma] [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[3]  # kept under docs/history/scripts/: the repository root
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from optimizer_step_gaps import event_ms  # noqa: E402

from models.fp8_casts import (  # noqa: E402
    GELU,
    GELU_BACKWARD,
    GELU_GRAD,
    GELU_MUL,
    PLAIN,
    TILES,
    launch,
    launch_amax,
    launch_gelu_grad_amax_sum,
)
from models.pi05.config import FULL  # noqa: E402

# candidate tilings (rows, columns, warps) beyond the kernel's own; rows a multiple of 32 (the column sums' rows)
CANDIDATES = TILES + ((256, 64, 8), (256, 128, 8), (128, 256, 8), (64, 256, 8), (128, 128, 4), (256, 32, 4))
BATCH, CAMERAS, PREFIX, ACTIONS = 32, 2, 712, 50  # the pi05-beyond workload (batch 32, 2 cameras, 200 text tokens)


def casts() -> list[dict]:
    """Every cast launch of one step: name, mode, shape, inputs read, FP8 outputs written, amax pass, calls per step."""
    llm, expert, vision = FULL.llm, FULL.expert, FULL.vision
    out = []
    for stream, tokens, cfg in (("gemma", BATCH * PREFIX, llm), ("expert", BATCH * ACTIONS, expert)):
        t, w, m, layers = tokens, cfg.width, cfg.mlp, cfg.layers
        out += [
            dict(name=f"{stream} x", mode=PLAIN, shape=(t, w), reads=1, pairs=1, amax=False, calls=layers),
            dict(name=f"{stream} gate/up weights", mode=PLAIN, shape=(m, w), reads=1, pairs=1, amax=False, calls=2 * layers),
            dict(name=f"{stream} down weight", mode=PLAIN, shape=(w, m), reads=1, pairs=1, amax=False, calls=layers),
            dict(name=f"{stream} gelu x up amax", mode=GELU_MUL, shape=(t, m), reads=2, pairs=0, amax=True, calls=layers),
            dict(name=f"{stream} gelu x up cast", mode=GELU_MUL, shape=(t, m), reads=2, pairs=1, amax=False, calls=layers),
            dict(name=f"{stream} output gradient", mode=PLAIN, shape=(t, w), reads=1, pairs=1, amax=False, grad=True, calls=layers),
            dict(name=f"{stream} gelu backward amax", mode=GELU_BACKWARD, shape=(t, m), reads=3, pairs=0, amax=True, calls=layers),
            dict(name=f"{stream} gelu backward cast", mode=GELU_BACKWARD, shape=(t, m), reads=3, pairs=2, amax=False, grad=True, calls=layers),
        ]  # fmt: skip
    t, w, m, calls = BATCH * vision.tokens, vision.width, vision.mlp, vision.layers * CAMERAS
    out += [
        dict(name="siglip x", mode=PLAIN, shape=(t, w), reads=1, pairs=1, amax=False, calls=calls),
        dict(name="siglip fc1 weight", mode=PLAIN, shape=(m, w), reads=1, pairs=1, amax=False, calls=calls),
        dict(name="siglip fc2 weight", mode=PLAIN, shape=(w, m), reads=1, pairs=1, amax=False, calls=calls),
        dict(name="siglip gelu amax", mode=GELU, shape=(t, m), reads=1, pairs=0, amax=True, calls=calls),
        dict(name="siglip gelu cast", mode=GELU, shape=(t, m), reads=1, pairs=1, amax=False, calls=calls),
        dict(name="siglip output gradient", mode=PLAIN, shape=(t, w), reads=1, pairs=1, amax=False, grad=True, calls=calls),
        dict(name="siglip gelu gradient amax + bias sum", mode=GELU_GRAD, shape=(t, m), reads=2, pairs=0, amax=True, calls=calls),
        dict(name="siglip gelu gradient cast", mode=GELU_GRAD, shape=(t, m), reads=2, pairs=1, amax=False, grad=True, calls=calls),
    ]  # fmt: skip
    return out


def runner(case: dict, tiles) -> callable:
    m, n = case["shape"]
    inputs = [torch.randn(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(case["reads"])]
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16) if case["mode"] in (GELU, GELU_GRAD) else None
    scales = [torch.ones(1, device="cuda") * 10, torch.ones(1, device="cuda") * 10]
    mode = case["mode"]
    if case["amax"] and mode == GELU_GRAD:
        return lambda: launch_gelu_grad_amax_sum(*inputs, bias, tiles=tiles)
    if case["amax"]:
        return lambda: launch_amax(mode, inputs, bias, tiles=tiles)
    return lambda: launch(mode, inputs, scales, case.get("grad", False), bias, tiles=tiles)


def time_ms(fn, repeats: int, per_event: int = 5) -> float:
    """Median ms per call (CUDA events around `per_event` back-to-back calls, 3 warm-up calls first)."""
    return statistics.median(event_ms(fn, repeats, per_event))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--only", default="", help="the casts whose name contains this (e.g. gemma)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("fp8_cast_tiles: needs a CUDA GPU with FP8 support (sm89+)", file=sys.stderr)
        return 2
    rows, totals = [], {"autotuned": 0.0, "best single tiling per cast": 0.0}
    totals.update({str(t): 0.0 for t in CANDIDATES})
    for case in [c for c in casts() if args.only in c["name"]]:
        m, n = case["shape"]
        moved = m * n * (2 * case["reads"] + 2 * case["pairs"])  # bf16 reads, FP8 writes in both layouts
        torch.manual_seed(0)
        auto = time_ms(runner(case, TILES), args.repeats)
        each = {str(t): time_ms(runner(case, (t,)), args.repeats) for t in CANDIDATES}
        best = min(each, key=each.get)
        totals["autotuned"] += auto * case["calls"]
        totals["best single tiling per cast"] += each[best] * case["calls"]
        for t, ms in each.items():
            totals[t] += ms * case["calls"]
        row = {k: v for k, v in case.items()} | {
            "bytes": moved, "autotuned_ms": auto, "autotuned_tb_s": moved / auto / 1e9, "per_tiling_ms": each,
            "best_tiling": best, "best_ms": each[best], "best_tb_s": moved / each[best] / 1e9,
        }  # fmt: skip
        rows.append(row)
        print(
            f"{case['name']:40s} {m}x{n} x{case['calls']}: autotuned {auto:.3f} ms ({row['autotuned_tb_s']:.2f} TB/s, "
            f"{auto * case['calls']:.2f} ms a step); best {best} {each[best]:.3f} ms ({row['best_tb_s']:.2f} TB/s)",
            flush=True,
        )
    print("ms a step, all casts:")
    for name, ms in sorted(totals.items(), key=lambda kv: kv[1]):
        print(f"    {ms:8.2f}  {name}")
    copy = torch.empty(BATCH * PREFIX, FULL.llm.mlp, device="cuda", dtype=torch.bfloat16)
    copy_ms = time_ms(lambda: copy.clone(), args.repeats)
    print(f"reference: a bf16 clone of {tuple(copy.shape)} moves {2 * 2 * copy.numel() / copy_ms / 1e9:.2f} TB/s")
    if args.out:
        args.out.write_text(json.dumps({"casts": rows, "totals_ms_per_step": totals, "clone_ms": copy_ms}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
