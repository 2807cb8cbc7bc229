"""Loss parity: a rung's losses over the timed steps against its parity baseline rung's (the one function the runner
states parity with, harness/ladder/runner.py add_comparisons, and the load checks recompute it with,
harness/stats/result_checks.py)."""

from __future__ import annotations


def loss_parity(losses: list[float], baseline: list[float], tolerance: float, why: str) -> dict:
    """Max relative loss difference over the timed steps against the baseline rung's losses."""
    if not losses or len(losses) != len(baseline):
        return {
            "max_rel_diff": None,
            "tolerance": tolerance,
            "pass": False,
            "why": why,
            "note": "baseline has a different number of timed steps",
        }
    diff = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, baseline))
    return {"max_rel_diff": diff, "tolerance": tolerance, "pass": diff <= tolerance, "why": why}


def recomputed_parity(rung: dict, rungs: list[dict]) -> dict | None:
    """The rung's stored `loss_parity` recomputed from the stored losses of both rungs (its `against` rung, or the
    ladder's first rung in results from before `against` was kept) at the stored tolerance; None when there is
    nothing to recompute (no parity stated, or the rung it was stated against is not in the file or not ok). A
    non-finite loss (stored as null) fails parity, as NaN does when the runner states it."""
    stated = rung.get("loss_parity")
    if not stated or stated.get("tolerance") is None:
        return None
    against = stated.get("against") or (rungs[0]["name"] if rungs else None)
    other = next((r for r in rungs if r["name"] == against), None)
    if other is None or other.get("status") != "ok" or other.get("losses") is None or rung.get("losses") is None:
        return None
    losses, baseline = list(rung["losses"]), list(other["losses"])
    if any(x is None for x in losses + baseline):
        return {**stated, "max_rel_diff": None, "pass": False}
    return {**stated, **loss_parity(losses, baseline, stated["tolerance"], stated.get("why", ""))}
