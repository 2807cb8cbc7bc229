"""Judging a train-ladder's rungs against its reference rung, and against another train-ladder result (the gate):
speed (training samples/s), convergence (harness/train/convergence.py) and success (Fisher, harness/judge/gates.py)."""

from __future__ import annotations

from ..train.convergence import check_convergence


def _ok(record: dict | None) -> bool:
    return bool(record) and record.get("status") == "ok"


def speedup(record: dict, reference: dict) -> float | None:
    a, b = (record.get("train") or {}).get("samples_per_s"), (reference.get("train") or {}).get("samples_per_s")
    return a / b if a and b else None


def convergence(record: dict, reference: dict, tolerance: float) -> dict | None:
    """The convergence check of one rung's training against another's (None before both trained)."""
    if not (record.get("train") and reference.get("train")):
        return None
    names = (record["name"], reference["name"])
    return check_convergence(record, reference, tolerance, names=names).as_dict()


def success_checks(record: dict, reference: dict, tolerance: float, confidence: float = 0.95) -> list[dict]:
    """The success gate of each suite the reference was evaluated on: the rung's successes against it."""
    from .gates import Limits, success_check

    limits = Limits(success_tolerance=tolerance, confidence=confidence)
    rates, base = record.get("success_rate") or {}, reference.get("success_rate") or {}
    return [success_check(suite, entry, rates.get(suite), limits).to_dict() for suite, entry in base.items()]


def judge(records: dict[str, dict], reference: str, block) -> dict:
    """Each ok rung against the reference rung: speedup, convergence and the success gate per suite."""
    ref = records.get(reference)
    if not _ok(ref):
        return {}
    out = {}
    for name, record in records.items():
        if name == reference or not _ok(record):
            continue
        out[name] = {
            "speedup": speedup(record, ref),
            "convergence": convergence(record, ref, block.convergence_tolerance),
            "success": success_checks(record, ref, block.success_tolerance),
        }
    return out
