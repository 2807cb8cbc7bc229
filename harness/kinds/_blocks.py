"""Load-time checks every result kind shares (harness/kinds ResultKind.check), beyond the rungs' step figures:
counts that cannot happen (successes above trials, negative or zero counts, steps done beyond those planned), names written twice (two rungs of one name: a gate would judge only the last), and blocks of
the wrong type (`rungs: "oops"`). Each problem raises a `SchemaError` or `Mismatch` naming its key path.

A block is checked wherever it appears, whatever the file's kind: `rungs` (ladders, recompute sweeps), `success_rate`
(evaluations), `train` (training runs), `train_ladder` (train-ladders), `floor` (floors); then the figures that must
follow from the stored data (harness/stats/result_checks.py). What a kind requires on top (a train-ladder's block)
is in its own module. Runs on a file the ResultFile schema has already accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from models.schema import AT_LEAST_ONE, NON_NEGATIVE, POSITIVE, Bounds, Expect, SchemaError, parse

from ..stats.result_checks import Mismatch, check_result

__all__ = ["Floor", "Rate", "TrainLadder", "TrainRecord", "shared_checks"]

Count = Annotated[int, NON_NEGATIVE]
Share = Annotated[float, Bounds(0, 1)]


@dataclass(frozen=True)
class Rate:
    """A success-rate entry: k successes of n trials, its rate and Wilson interval when stated."""

    __open_schema__ = True
    successes: Count
    trials: Annotated[int, AT_LEAST_ONE]
    errors: Count | None = None
    rate: Share | None = None
    wilson_low: Share | None = None
    wilson_high: Share | None = None

    def __post_init__(self):
        if self.successes > self.trials:
            raise SchemaError("successes", f"at most trials ({self.trials})", str(self.successes))
        if self.errors is not None and self.errors > self.trials:
            raise SchemaError("errors", f"at most trials ({self.trials})", str(self.errors))
        if self.rate is not None and abs(self.rate - self.successes / self.trials) > 1e-6:
            want = f"{self.successes}/{self.trials} = {self.successes / self.trials:.6g}"
            raise SchemaError("rate", f"successes / trials ({want})", f"{self.rate:.6g}")
        low, high = self.wilson_low, self.wilson_high
        if low is not None and high is not None and not low <= high:
            raise SchemaError("wilson_low", f"at most wilson_high ({high:.6g})", f"{low:.6g}")


Rates = dict[str, Rate]


@dataclass(frozen=True)
class TrainRecord:
    """A training run's figures (`vlabench train`'s `train` block, a train-ladder rung's)."""

    __open_schema__ = True
    steps_planned: Annotated[int, AT_LEAST_ONE] | None = None
    steps_done: Count | None = None
    steps_timed: Count | None = None
    samples_per_s: Annotated[float, POSITIVE] | None = None
    wall_s: Annotated[float, NON_NEGATIVE] | None = None
    final_loss: float | None = None
    losses: Annotated[tuple[float | None, ...], Expect("a list of numbers (null for a non-finite loss)")] | None = None

    def __post_init__(self):
        done, planned, timed = self.steps_done, self.steps_planned, self.steps_timed
        if done is not None and planned is not None and done > planned:
            raise SchemaError("steps_done", f"at most steps_planned ({planned})", str(done))
        if timed is not None and done is not None and timed > done:
            raise SchemaError("steps_timed", f"at most steps_done ({done})", str(timed))


@dataclass(frozen=True)
class CurvePoint:
    """A point of a rung's success curve (train-ladder --curve-every): a checkpoint's step, the training's wall time
    up to it, and its success on each suite evaluated."""

    __open_schema__ = True
    step: Annotated[int, AT_LEAST_ONE]
    success_rate: Rates
    wall_s: Annotated[float, NON_NEGATIVE] | None = None


@dataclass(frozen=True)
class TrainLadderRung:
    __open_schema__ = True
    name: str
    status: str
    train: TrainRecord | None = None
    success_rate: Rates | None = None
    suite_errors: dict[str, str] | None = None  # the suites whose evaluation failed, with the error
    curve: Annotated[tuple[CurvePoint, ...], Expect("a list of curve points")] | None = None

    def __post_init__(self):
        points = self.curve or ()
        for i in range(1, len(points)):
            before, point = points[i - 1], points[i]
            if point.step <= before.step:
                raise SchemaError(f"curve[{i}].step", f"more than the point before's ({before.step})", str(point.step))
            if point.wall_s is not None and before.wall_s is not None and point.wall_s < before.wall_s:
                want = f"at least the point before's ({before.wall_s:.6g})"
                raise SchemaError(f"curve[{i}].wall_s", want, f"{point.wall_s:.6g}")


@dataclass(frozen=True)
class SeedRun:
    """One training seed's rung records of a train-ladder --seeds N (`train_ladder.seed_runs[i]`)."""

    __open_schema__ = True
    seed: int
    rungs: Annotated[tuple[TrainLadderRung, ...], Expect("a list of rung records")]


@dataclass(frozen=True)
class TrainLadder:
    __open_schema__ = True
    reference: str
    steps: Annotated[int, AT_LEAST_ONE]
    rungs: Annotated[tuple[TrainLadderRung, ...], Expect("a list of rung records")]
    seed_runs: Annotated[tuple[SeedRun, ...], Expect("a list of seed runs")] | None = None
    convergence_tolerance: Annotated[float, POSITIVE] | None = None
    success_tolerance: Share | None = None
    versus_reference: dict[str, Any] | None = None


@dataclass(frozen=True)
class Floor:
    __open_schema__ = True
    flops: Annotated[float, POSITIVE] | None = None
    gemms: Annotated[tuple[dict[str, Any], ...], Expect("a list of GEMM records")] | None = None
    attention: Annotated[tuple[dict[str, Any], ...], Expect("a list of attention records")] | None = None


def _once(names: list, key: str) -> None:
    """Each name once: `key[i].name` of the second of two records of one name."""
    first: dict = {}
    for i, name in enumerate(names):
        if first.setdefault(name, i) != i:
            raise Mismatch(f"{key}[{i}].name", "each rung name once", f"{name!r} again (first at {key}[{first[name]}])")


def _block(cls, data: dict, key: str):
    return None if data.get(key) is None else parse(cls, data[key], key)


def shared_checks(data: dict) -> None:
    """The checks every kind shares; raises SchemaError or Mismatch."""
    _once([r["name"] for r in data["rungs"]], "rungs")
    if data.get("success_rate") is not None and data.get("episodes") is None:  # else counted from the episodes
        parse(Rates, data["success_rate"], "success_rate")
    _block(TrainRecord, data, "train")
    _block(Floor, data, "floor")
    ladder = _block(TrainLadder, data, "train_ladder")
    if ladder is not None:
        names = [r.name for r in ladder.rungs]
        _once(names, "train_ladder.rungs")
        for i, run in enumerate(ladder.seed_runs or ()):
            _once([r.name for r in run.rungs], f"train_ladder.seed_runs[{i}].rungs")
        seeds = [run.seed for run in ladder.seed_runs or ()]
        twice = next((i for i, seed in enumerate(seeds) if seed in seeds[:i]), None)
        if twice is not None:
            raise Mismatch(f"train_ladder.seed_runs[{twice}].seed", "each seed once", f"{seeds[twice]} again")
        judged = set(ladder.versus_reference or ())
        if judged and ladder.reference not in names:
            raise Mismatch("train_ladder.reference", "a rung of train_ladder.rungs (verdicts were given against it)",
                           repr(ladder.reference))  # fmt: skip
        if judged - set(names):
            stray = sorted(judged - set(names))[0]
            raise Mismatch("train_ladder.versus_reference", "verdicts of rungs in train_ladder.rungs", repr(stray))
    check_result(data)  # figures that must follow from the stored data (harness/stats/result_checks.py)
