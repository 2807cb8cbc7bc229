"""How long a training run would take on the hardware a ladder measured: the samples of the run over each rung's
measured samples/s. `python -m harness.train.predict [RESULT] [--steps N] [--batch B]` prints it; the default is
openpi's pi05_libero fine-tune (30,000 steps of 256 samples, harness/train/recipe.py) on the committed H200 ladder.

One GPU: the ladder's samples/s as measured (batch 32 per step; the 256-sample step as 8 accumulated
micro-batches of 32 does the same work per sample). Several GPUs: linear scaling assumed (each GPU a 32-sample
share of the step, the all-reduce hidden), which is not measured. Not counted: reading the data (2-4% of the
step on the H200 data ladder, docs/ladders.md), the EMA update and checkpoint writes.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from ..errors import InputError
from ..results import load_result
from .recipe import OPENPI_PI05_LIBERO

DEFAULT_RESULT = Path(__file__).resolve().parent.parent.parent / "results" / "h200" / "pi05-loongforge.json"


@dataclass(frozen=True)
class Prediction:
    rung: str
    samples_per_s: float  # measured, per GPU
    hours: dict[int, float]  # GPUs -> predicted wall-clock hours


def predict(result: dict, steps: int, batch: int, gpus: tuple[int, ...] = (1, 8)) -> list[Prediction]:
    """Each ok rung's predicted wall time for `steps` x `batch` samples on 1 and more GPUs (linear scaling)."""
    samples = steps * batch
    per_device = result.get("nproc", 1)
    out = []
    for rung in result["rungs"]:
        if rung.get("status") != "ok":
            continue
        rate = rung["samples_per_s"] / per_device  # samples/s of one GPU
        out.append(Prediction(rung["name"], rate, {n: samples / (rate * n) / 3600 for n in gpus}))
    return out


def prediction_table(result: dict, steps: int, batch: int, gpus: tuple[int, ...] = (1, 8)) -> str:
    rows = [
        [p.rung, f"{p.samples_per_s:.2f}", *(f"{p.hours[n]:.1f} h" for n in gpus)]
        for p in predict(result, steps, batch, gpus)
    ]
    headers = ["rung", "samples/s per GPU (measured)", *(f"{n} GPU{'s' if n > 1 else ''}" for n in gpus)]
    head = (
        f"{steps:,} steps x {batch} samples = {steps * batch:,} samples, at the samples/s of "
        f"{result['scenario']['name']} on {result['target']['name']} (batch {result['workload']['batch_size']} per "
        f"GPU); more than one GPU assumes linear scaling (not measured)"
    )
    return head + "\n" + tabulate(rows, headers=headers)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harness.train.predict", description=__doc__.splitlines()[0])
    p.add_argument("result", nargs="?", default=str(DEFAULT_RESULT), help="a ladder result (default: the H200 one)")
    p.add_argument("--steps", type=int, default=OPENPI_PI05_LIBERO.steps, help="default: openpi pi05_libero's")
    p.add_argument("--batch", type=int, default=OPENPI_PI05_LIBERO.batch_size, help="default: openpi pi05_libero's")
    args = p.parse_args(argv)
    try:
        print(prediction_table(load_result(args.result), args.steps, args.batch))
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
