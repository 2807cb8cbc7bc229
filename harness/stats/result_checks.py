"""Cross-checks of a result file on load: every figure it states must follow from the data stored beside it.

A rung's samples/s and its 10th/90th percentiles come from its step times (harness/stats/timing.py), a rung with
repeats states the median over its repeats, speedups are ratios of stated samples/s (harness/ladder/runner.py,
add_comparisons), loss parity follows from the stored losses (harness/stats/parity.py), and an evaluation's success counts are those of its stored episodes (harness/stats/rates.py)
A figure more than 1% off what the data says is refused in one line naming the key, the figure the data gives
and the figure found. Runs on a file the schema (harness/results.py) has already accepted.
"""

from __future__ import annotations

import math
import statistics

from .batch_sizes import BatchSizes
from .parity import recomputed_parity
from .rates import success_rates
from .timing import summarize_steps

TOLERANCE = 0.01  # relative: the stored figures are exact, this only absorbs rounding by other writers


class Mismatch(ValueError):
    """A stored figure that does not follow from the stored data: `key`, the figure expected, the one found."""

    def __init__(self, key: str, expected: str, got: str):
        self.key, self.expected, self.got = key, expected, got
        super().__init__(f"{key}: expected {expected}, got {got}")


def _num(x: float) -> str:
    return f"{x:.6g}"


def _close(found: float, expected: float) -> bool:
    return math.isclose(found, expected, rel_tol=TOLERANCE, abs_tol=1e-12)


def _agree(key: str, found: float | None, expected: float, how: str) -> None:
    """`found` (skipped when absent) within 1% of `expected`, which the data gives `how`."""
    if found is not None and not _close(found, expected):
        raise Mismatch(key, f"{_num(expected)} ({how}, within 1%)", _num(found))


def check_result(data: dict) -> None:
    """Every cross-check of a schema-valid result; raises Mismatch for the first figure that does not follow."""
    rungs = data["rungs"]
    if any(r["status"] == "ok" for r in rungs):
        samples = _samples_per_step(data)
        for rung in rungs:
            if rung["status"] == "ok":
                _check_rung(rung, samples)
    _check_speedups(rungs)
    _check_parity(rungs)
    _check_success_rates(data)


def _check_parity(rungs: list[dict]) -> None:
    """Each ok rung's stated loss parity against the parity recomputed from the stored losses (the runner's own
    function, harness/stats/parity.py): a `pass` that the losses do not give, or a max_rel_diff more than 1% off,
    is refused, so a result whose losses were changed cannot keep a passing parity."""
    for rung in rungs:
        if rung["status"] != "ok":
            continue
        expected = recomputed_parity(rung, rungs)
        if expected is None:
            continue
        key, stated = f"rungs.{rung['name']}.loss_parity", rung["loss_parity"]
        how = f"recomputed from the stored losses against {stated.get('against') or rungs[0]['name']}"
        if bool(stated.get("pass")) != expected["pass"]:
            diff = expected["max_rel_diff"]
            detail = "no comparable steps" if diff is None else f"max_rel_diff {_num(diff)}"
            raise Mismatch(
                f"{key}.pass",
                f"{str(expected['pass']).lower()} ({how}: {detail}, tolerance {_num(stated['tolerance'])})",
                str(stated.get("pass")).lower(),
            )
        if expected["max_rel_diff"] is not None and stated.get("max_rel_diff") is not None:
            _agree(f"{key}.max_rel_diff", stated["max_rel_diff"], expected["max_rel_diff"], how)


def _samples_per_step(data: dict) -> int:
    """The global batch (harness/stats/batch_sizes.py)."""
    if data["workload"].get("batch_size") is None:
        raise Mismatch("workload.batch_size", "a batch size (the file has ok rungs)", "nothing")
    return BatchSizes.of_result(data).global_


def _check_steps(record: dict, samples: int, key: str, median: bool = True) -> None:
    """The record's step-time figures against its own step times (samples / t per step); with `median` off,
    the median figures are left alone (a rung with repeats states the median over its repeats)."""
    stats = summarize_steps(record["step_times_s"], samples)
    how = f"{samples} samples / t over step_times_s"
    if median:
        _agree(f"{key}.samples_per_s", record["samples_per_s"], stats["samples_per_s"], f"the median of {how}")
        _agree(f"{key}.step_time_s", record.get("step_time_s"), stats["step_time_s"], "the median of step_times_s")
    for q in (10, 90):
        name = f"samples_per_s_p{q}"
        _agree(f"{key}.{name}", record.get(name), stats[name], f"the {q}th percentile of {how}")


def _check_rung(rung: dict, samples: int) -> None:
    key = f"rungs.{rung['name']}"
    if rung.get("repeats") is None:
        _check_steps(rung, samples, key)
        return
    ok = [(i, r) for i, r in enumerate(rung["repeats"]) if r["status"] == "ok"]
    if not ok:
        raise Mismatch(f"{key}.repeats", "at least one ok repeat (the rung is ok)", "none")
    for i, repeat in ok:
        _check_steps(repeat, samples, f"{key}.repeats[{i}]")
    pooled = [t for _, r in ok for t in r["step_times_s"]]
    if list(rung["step_times_s"]) != pooled:
        raise Mismatch(
            f"{key}.step_times_s",
            f"the ok repeats' step times one after another ({len(pooled)} steps)",
            f"{len(rung['step_times_s'])} steps" if len(rung["step_times_s"]) != len(pooled) else "other step times",
        )
    median = statistics.median(r["samples_per_s"] for _, r in ok)
    _agree(f"{key}.samples_per_s", rung["samples_per_s"], median, f"the median of {len(ok)} ok repeats' samples_per_s")
    _check_steps(rung, samples, key, median=False)


def _check_speedups(rungs: list[dict]) -> None:
    """Speedups over the ladder's first rung (the first record, when ok) and over the previous ok rung."""
    base = rungs[0] if rungs and rungs[0]["status"] == "ok" else None
    prev = None
    for rung in rungs:
        if rung["status"] != "ok":
            continue
        _speedup(rung, "speedup_vs_baseline", base, f"the first rung, {rungs[0]['name']}, is not ok")
        _speedup(rung, "speedup_vs_previous", prev, "no ok rung before it")
        prev = rung


def _speedup(rung: dict, field: str, other: dict | None, why_none: str) -> None:
    key, found = f"rungs.{rung['name']}.{field}", rung.get(field)
    if found is None:
        return  # not computed (e.g. a ladder run from a later rung has no baseline): nothing stated
    if other is None:
        raise Mismatch(key, f"null ({why_none})", _num(found))
    expected = rung["samples_per_s"] / other["samples_per_s"]
    _agree(key, found, expected, f"samples_per_s over that of {other['name']}")


def _check_success_rates(data: dict) -> None:
    """Each stored success-rate entry (a suite, or suite/task) against the stored episodes, when there are."""
    if data.get("episodes") is None or not data.get("success_rate"):
        return
    counted = success_rates(data["episodes"])
    for name, entry in data["success_rate"].items():
        key = f"success_rate.{name}"
        expected = counted.get(name, {"successes": 0, "trials": 0, "errors": 0})
        for field in ("trials", "successes", "errors"):
            if field in entry and entry[field] != expected[field]:
                raise Mismatch(f"{key}.{field}", f"{expected[field]} (from the stored episodes)", str(entry[field]))
        for field in ("rate", "wilson_low", "wilson_high"):
            if entry.get(field) is not None and field in expected:
                _agree(f"{key}.{field}", entry[field], expected[field], "from the stored episodes")
