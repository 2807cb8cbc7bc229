"""Provenance is never written by hand: a result's commit comes from the run's own checkout or from an explicit
claim the harness recorded as one (harness/results.py provenance), and every rung names the run that measured it.

`provenance_problems(result)` lists what a hand edit leaves behind:

- a `git_sha_from` (the header's or one in `provenance_earlier`) that the harness never writes (GIT_SHA_FROM);
- a rung (or one of its repeats) whose `measured` block disagrees with the provenance of the run that measured it:
  its run is the header's when `measured.run_id` is the header's `run_id`, else the entry of `provenance_earlier`
  with that run id (rungs merged from earlier runs by --append carry their own); results written before run ids
  find their run by `created_at`. A run found nowhere, or a `git_sha`, `dirty` or `created_at` that differs from
  that run's provenance, is a problem: the header or the rung was rewritten after the run.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GIT_SHA_FROM", "provenance_problems"]

# The values harness/results.py provenance() writes as `git_sha_from` (kept here so this module imports no torch).
GIT_SHA_FROM = ("git", "VLABENCH_GIT_SHA", "--commit", "unknown")
_RUN_KEYS = ("git_sha", "dirty", "created_at")


def _claim_problems(where: str, prov: Any) -> list[str]:
    if not isinstance(prov, dict):
        return [f"{where}: expected a provenance object, got {type(prov).__name__}"]
    problems = []
    source = prov.get("git_sha_from")
    if source not in GIT_SHA_FROM:
        problems.append(
            f"{where}.git_sha_from: expected one of {', '.join(GIT_SHA_FROM)} (what the harness writes), got {source!r}"
        )
    sha = prov.get("git_sha")
    if source == "unknown" and (sha != "unknown" or prov.get("dirty") is not None):
        problems.append(f"{where}: git_sha_from 'unknown' with git_sha {sha!r}, dirty {prov.get('dirty')!r}")
    return problems


def _run_of(measured: dict, runs: list[tuple[str, dict]]) -> tuple[str, dict] | None:
    """The (where, provenance) of the run that measured a rung, or None when the file names no such run."""
    run_id = measured.get("run_id")
    for where, prov in runs:
        if run_id is not None and prov.get("run_id") == run_id:
            return where, prov
        if run_id is None and prov.get("run_id") is None and prov.get("created_at") == measured.get("created_at"):
            return where, prov  # a result from before run ids: its run is known by its start time
    return None


def _measured_problems(where: str, measured: Any, runs: list[tuple[str, dict]]) -> list[str]:
    if not isinstance(measured, dict):
        return [f"{where}.measured: expected an object, got {type(measured).__name__}"]
    found = _run_of(measured, runs)
    if found is None:
        run = measured.get("run_id") or measured.get("created_at")
        return [
            f"{where}.measured: run {run!r} (commit {measured.get('git_sha')!r}) is neither this file's run nor one "
            "in provenance_earlier (a rung merged by hand?)"
        ]
    run_where, prov = found
    return [
        f"{where}.measured.{key}: expected {prov.get(key)!r} (the {run_where} of its run), got {measured.get(key)!r}"
        for key in _RUN_KEYS
        if key in measured and measured.get(key) != prov.get(key)
    ]


def provenance_problems(result: dict) -> list[str]:
    """One line per sign of provenance written by hand in a result file (empty when there is none); a file
    without a `provenance` block has nothing to check."""
    if not isinstance(result, dict) or "provenance" not in result:
        return []
    header = result["provenance"]
    earlier = result.get("provenance_earlier") or []
    problems = _claim_problems("provenance", header)
    if not isinstance(earlier, list):
        return [*problems, f"provenance_earlier: expected a list, got {type(earlier).__name__}"]
    for i, prov in enumerate(earlier):
        problems += _claim_problems(f"provenance_earlier[{i}]", prov)
    runs = [("provenance", header)] if isinstance(header, dict) else []
    runs += [(f"provenance_earlier[{i}]", p) for i, p in enumerate(earlier) if isinstance(p, dict)]
    rungs = result.get("rungs")
    for i, rung in enumerate(rungs if isinstance(rungs, list) else []):
        if not isinstance(rung, dict):
            continue
        name = f"rungs[{i}] ({rung.get('name')})"
        if "measured" in rung:
            problems += _measured_problems(name, rung["measured"], runs)
        repeats = rung.get("repeats")
        for j, rep in enumerate(repeats if isinstance(repeats, list) else []):
            if isinstance(rep, dict) and "measured" in rep:
                problems += _measured_problems(f"{name}.repeats[{j}]", rep["measured"], runs)
    return problems
