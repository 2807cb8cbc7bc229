"""Judging a train-ladder's rungs against its reference rung, and against another train-ladder result (the gate):
speed (training samples/s, and the whole training's wall time), convergence (harness/train/convergence.py) and
success (Fisher, harness/judge/gates.py, on one seed; over seeds, harness/judge/seeds.py's rule, the one
`vlabench train-seeds` judges with).

A verdict word of a rung against the reference (pass, FAIL, inconclusive) needs MIN_SEEDS training seeds: with
fewer, the convergence and success judgements over seeds give the figures and "n/a" (harness/judge/seeds.py)."""

from __future__ import annotations

import statistics
from dataclasses import asdict

from ..train.convergence import check_convergence
from .gates import Limits, success_check
from .seeds import MIN_SEEDS, NOT_JUDGED, judge_seed_runs, too_few

Runs = list[tuple[int, dict[str, dict]]]  # per training seed: that seed's rung records by name


def _ok(record: dict | None) -> bool:
    return bool(record) and record.get("status") == "ok"


def speedup(record: dict, reference: dict) -> float | None:
    a, b = (record.get("train") or {}).get("samples_per_s"), (reference.get("train") or {}).get("samples_per_s")
    return a / b if a and b else None


def wall_speedup(record: dict, reference: dict) -> float | None:
    """How many times faster the rung trained its steps than the reference, by the whole training's wall time
    (compilation, data, checkpoints and all): the time-to-train ratio beside the median step's `speedup`."""
    a, b = (record.get("train") or {}).get("wall_s"), (reference.get("train") or {}).get("wall_s")
    return b / a if a and b else None


def convergence(record: dict, reference: dict, tolerance: float) -> dict | None:
    """The convergence check of one rung's training against another's (None before both trained)."""
    if not (record.get("train") and reference.get("train")):
        return None
    names = (record["name"], reference["name"])
    return check_convergence(record, reference, tolerance, names=names).as_dict()


def success_checks(record: dict, reference: dict, tolerance: float, confidence: float = 0.95) -> list[dict]:
    """The success gate of each suite the reference was evaluated on: the rung's successes against it."""
    limits = Limits(success_tolerance=tolerance, confidence=confidence)
    rates, base = record.get("success_rate") or {}, reference.get("success_rate") or {}
    return [success_check(suite, entry, rates.get(suite), limits).to_dict() for suite, entry in base.items()]


def judge(records: dict[str, dict], reference: str, block) -> dict:
    """Each ok rung against the reference rung of one seed's run: speedups, convergence and the success gate
    per suite (Fisher's test on the evaluations' trials)."""
    ref = records.get(reference)
    if not _ok(ref):
        return {}
    out = {}
    for name, record in records.items():
        if name == reference or not _ok(record):
            continue
        out[name] = {
            "speedup": speedup(record, ref),
            "wall_speedup": wall_speedup(record, ref),
            "convergence": convergence(record, ref, block.convergence_tolerance),
            "success": success_checks(record, ref, block.success_tolerance),
        }
    return out


def ladder_runs(result: dict) -> Runs:
    """A train-ladder result's runs, every record (failed ones too) by rung name, per training seed: each seed of
    `train-ladder --seeds N` (train_ladder.seed_runs), else the one seed it trained."""
    ladder = result["train_ladder"]
    runs = ladder.get("seed_runs") or [{"seed": result["workload"].get("seed", 0), "rungs": ladder["rungs"]}]
    return [(run["seed"], {r["name"]: r for r in run["rungs"]}) for run in runs]


def _ratio_of_means(pairs: list[tuple[dict, dict]], key: str, inverse: bool = False) -> float | None:
    values = [((rec.get("train") or {}).get(key), (ref.get("train") or {}).get(key)) for rec, ref in pairs]
    if not values or not all(a and b for a, b in values):
        return None
    a, b = statistics.fmean(v[0] for v in values), statistics.fmean(v[1] for v in values)
    return b / a if inverse else a / b


def convergence_over_seeds(pairs: list[tuple[dict, dict]], tolerance: float) -> dict:
    """The convergence check over seeds: each seed's relative difference of the smoothed final loss, and their
    mean within the tolerance either way (pass) or not (FAIL); n/a with fewer than MIN_SEEDS seeds."""
    checks = [convergence(rec, ref, tolerance) for rec, ref in pairs]
    diffs = [c["rel_diff"] for c in checks if c and c.get("rel_diff") is not None]
    mean = statistics.fmean(diffs) if diffs else None
    if len(diffs) < MIN_SEEDS:
        verdict, note = NOT_JUDGED, too_few(len(diffs))
    else:
        verdict = "pass" if abs(mean) <= tolerance else "FAIL"
        note = f"mean of {len(diffs)} seeds within {tolerance:.0%}" if verdict == "pass" else f"beyond {tolerance:.0%}"
    return {"rel_diffs": diffs, "mean_rel_diff": mean, "tolerance": tolerance, "verdict": verdict, "note": note}


def judge_runs(runs: Runs, reference: str, block) -> dict:
    """Each rung against the reference over every seed of the ladder: the first seed's judgement (`judge`) and,
    under `over_seeds`, the seeds where both trained: the speedups of the means, the convergence over seeds and
    the success gate over seeds (harness/judge/seeds.py), whose verdict words need MIN_SEEDS seeds."""
    if not runs:
        return {}
    first = judge(runs[0][1], reference, block)
    ok_runs = [(seed, {n: r for n, r in recs.items() if _ok(r)}) for seed, recs in runs]
    checks = judge_seed_runs(ok_runs, reference, block.success_tolerance)
    names = dict.fromkeys(n for _, recs in ok_runs if reference in recs for n in recs if n != reference)
    out = {}
    for name in names:
        paired = [(seed, recs[name], recs[reference]) for seed, recs in ok_runs if name in recs and reference in recs]
        pairs = [(a, b) for _, a, b in paired]
        out[name] = {
            **first.get(name, {}),
            "over_seeds": {
                "seeds": [seed for seed, _, _ in paired],
                "speedup": _ratio_of_means(pairs, "samples_per_s"),
                "wall_speedup": _ratio_of_means(pairs, "wall_s", inverse=True),
                "convergence": convergence_over_seeds(pairs, block.convergence_tolerance),
                "success": [asdict(c) for c in checks if c.rung == name],
            },
        }
    return out
