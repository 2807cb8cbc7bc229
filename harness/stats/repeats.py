"""Repeats of a rung (`vlabench run --repeats N`): each in a fresh process, the rung order rotated between
rounds so that drift over the run spreads over every rung instead of landing on one.

The rung record keeps every repeat under `repeats` and sets its figures from them: `samples_per_s` is the
median over the ok repeats, `samples_per_s_interval` a 95% t interval over them (it includes the spread
between processes), `step_times_s` every ok repeat's steps one after the other (so p10/p90 are over all of
them), losses and the machine probe those of the first ok repeat, peak memory the largest, `process_spread` the
sd of the log whole-run rate over the ok repeats (the spread between processes). Other fields
(compile time, data wait, ...) are the median repeat's.
"""

from __future__ import annotations

import statistics

from .spread import geometric_interval, log_spread, whole_rate
from .timing import percentile

CONFIDENCE = 0.95


def rotated(items: list, round_index: int) -> list:
    """Round k runs the rungs starting from the k-th (k = 0 keeps the ladder's order)."""
    if not items:
        return []
    k = round_index % len(items)
    return items[k:] + items[:k]


def ok_repeats(record: dict) -> list[dict]:
    """The ok repeats of a rung record, or the record itself as its one repeat when it has none."""
    if "repeats" not in record:
        return [record] if record.get("status") == "ok" else []
    return [r for r in record["repeats"] if r.get("status") == "ok"]


def repeat_count(record: dict) -> int:
    return len(record.get("repeats") or [record])


def _median_repeat(ok: list[dict]) -> dict:
    """The repeat whose samples/s is the median (the lower of the two middle ones for an even count)."""
    ranked = sorted(ok, key=lambda r: r["samples_per_s"])
    return ranked[(len(ranked) - 1) // 2]


def combine(repeats: list[dict], samples_per_step: int) -> dict:
    """One rung record from its repeats (each a rung process's record, in the order they ran)."""
    ok = [r for r in repeats if r["status"] == "ok"]
    if not ok:  # every repeat failed: the rung failed, as the first failure says
        return {**repeats[0], "repeats": repeats}
    mid = _median_repeat(ok)
    median = statistics.median(r["samples_per_s"] for r in ok)
    steps = [t for r in ok for t in r["step_times_s"]]
    rates = [samples_per_step / t for t in steps]
    interval = geometric_interval([r["samples_per_s"] for r in ok], CONFIDENCE)
    peaks = [r["peak_memory_gib"] for r in ok if r.get("peak_memory_gib") is not None]
    reserved = [r["peak_reserved_gib"] for r in ok if r.get("peak_reserved_gib") is not None]
    record = {
        **mid,
        "status": "ok",
        "reason": None,
        "samples_per_s": median,
        "samples_per_s_p10": percentile(rates, 10),
        "samples_per_s_p90": percentile(rates, 90),
        "samples_per_s_interval": None if interval is None else [interval[1], interval[2]],
        "step_time_s": statistics.median(r["step_time_s"] for r in ok),
        "step_times_s": steps,
        "losses": ok[0]["losses"],
        "machine_probe": ok[0].get("machine_probe"),
        "peak_memory_gib": max(peaks) if peaks else None,
        "peak_reserved_gib": max(reserved) if reserved else None,
        "repeats": repeats,
    }
    # the spread between processes (sd of the log whole-run rate over the ok repeats): what a single run of this
    # rung on this target is later judged with (harness/judge/gates.py process_spread)
    spread = log_spread([whole_rate(r["step_times_s"], samples_per_step) for r in ok])
    if spread is not None:
        record["process_spread"] = spread
    if mid.get("mfu") is not None:
        record["mfu"] = mid["mfu"] * median / mid["samples_per_s"]
    if "samples_per_s_per_device" in mid:
        record["samples_per_s_per_device"] = mid["samples_per_s_per_device"] * median / mid["samples_per_s"]
    failed = len(repeats) - len(ok)
    if failed:
        record["failed_repeats"] = failed
    return record


def run_of(record: dict) -> str | None:
    """Which `vlabench run` measured a rung (its run id, or its start time in results before run ids)."""
    measured = record.get("measured") or {}
    return measured.get("run_id") or measured.get("created_at")


def same_run(a: dict, b: dict) -> bool:
    """Whether two rungs were measured in one run (a ratio of rungs of different runs, e.g. parts merged with
    --append from other calls or machines, mixes their machines' states)."""
    ra, rb = run_of(a), run_of(b)
    return ra is None or rb is None or ra == rb


def per_repeat(record: dict, key: str = "samples_per_s") -> list[float]:
    """A figure of each ok repeat (one value for a rung without repeats)."""
    return [r[key] for r in ok_repeats(record)]
