"""Does a rung still learn? Its smoothed training loss over the last steps against a reference run's.

The ladder's loss parity (harness/ladder/runner.py) compares 20 timed steps from the same weights: it catches a rung
that computes other numbers, not one that computes the same numbers and learns less (parameters left out of
training, a wrong gradient that only shows as the weights move). The convergence check trains the rung and a
reference (the ladder's baseline rung) for the same steps on the same batches (same data order, noise and flow
time per step: harness/data/pipeline.py) and compares the mean loss over the last `window` steps.

Tolerance: a rung passes when its smoothed final loss is within `tolerance` (relative, either way) of the
reference's; 10% by default. Measured on the tiny CPU model after 200 steps (batch 4, lr 1e-3, the last 20
steps): another rung of the same math +0.0%, the same rung in bf16 against fp32 +0.2%, the test sabotage
(harness/ladder/sabotage.py) +39.6%. The default sits between, with room for FP8 and longer runs, whose spread
between correct rungs the H200 runs must measure before the default is trusted there. Lower is not better here:
a scaled-down target also lowers the loss, so both sides fail. The per-step differences are paired (the same
batch), so the check also reports their standard error.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from tabulate import tabulate

DEFAULT_TOLERANCE = 0.10
WINDOW_FRACTION = 0.1  # the last 10% of the steps
MIN_WINDOW = 10


def window_for(steps: int) -> int:
    """The smoothing window of a run of `steps` steps: its last 10%, at least 10 steps (or all of them)."""
    return min(steps, max(MIN_WINDOW, round(steps * WINDOW_FRACTION)))


def smoothed_loss(losses: list[float | None], window: int | None = None) -> float | None:
    """The mean loss over the last `window` steps (None if empty or any of them is non-finite)."""
    if not losses:
        return None
    tail = losses[-(window or window_for(len(losses))) :]
    if any(x is None or not math.isfinite(x) for x in tail):
        return None
    return statistics.fmean(tail)


@dataclass(frozen=True)
class ConvergenceCheck:
    name: str  # the checked run (its rung)
    reference: str
    steps: int  # steps compared (the shorter run's)
    window: int
    loss: float | None
    reference_loss: float | None
    rel_diff: float | None  # (loss - reference) / reference
    paired_se: float | None  # standard error of the mean per-step difference, relative to the reference
    tolerance: float
    passed: bool
    note: str = ""

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def _train(result: dict) -> dict:
    return result.get("train") or {}


def check_convergence(
    result: dict,
    reference: dict,
    tolerance: float = DEFAULT_TOLERANCE,
    window: int | None = None,
    names: tuple[str, str] | None = None,
) -> ConvergenceCheck:
    """`result`'s smoothed final loss against `reference`'s (both `vlabench train` results, or anything with a
    `train.losses` curve) over the same steps; `names` label the two (default: their rungs)."""
    run, ref = _train(result), _train(reference)
    losses, ref_losses = list(run.get("losses") or []), list(ref.get("losses") or [])
    steps = min(len(losses), len(ref_losses))
    name, ref_name = names or (run.get("rung", "run"), ref.get("rung", "reference"))
    window = min(window or window_for(steps), steps)
    if steps == 0:
        return ConvergenceCheck(name, ref_name, 0, 0, None, None, None, None, tolerance, False, "no steps to compare")
    a, b = smoothed_loss(losses[:steps], window), smoothed_loss(ref_losses[:steps], window)
    note = "" if len(losses) == len(ref_losses) else f"compared over the first {steps} steps of both"
    if a is None or b is None or b <= 0:
        return ConvergenceCheck(
            name, ref_name, steps, window, a, b, None, None, tolerance, False, "a non-finite loss in the window"
        )
    diffs = [x - y for x, y in zip(losses[steps - window : steps], ref_losses[steps - window : steps])]
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) / b if len(diffs) > 1 else None
    rel = (a - b) / b
    return ConvergenceCheck(name, ref_name, steps, window, a, b, rel, se, tolerance, abs(rel) <= tolerance, note)


def convergence_table(checks: list[ConvergenceCheck]) -> str:
    """One line per checked run: its smoothed loss, the reference's, the difference and the verdict."""
    rows = []
    for c in checks:
        diff = "-" if c.rel_diff is None else f"{c.rel_diff:+.1%}" + (f" (se {c.paired_se:.1%})" if c.paired_se else "")
        rows.append(
            [
                c.name,
                c.reference,
                c.steps,
                c.window,
                "-" if c.loss is None else f"{c.loss:.4f}",
                "-" if c.reference_loss is None else f"{c.reference_loss:.4f}",
                diff,
                ("pass" if c.passed else "FAIL") + f" (|diff| <= {c.tolerance:.0%})",
                c.note,
            ]
        )
    headers = ["run", "reference", "steps", "last", "loss", "reference loss", "difference", "verdict", "note"]
    return tabulate(rows, headers=headers)
