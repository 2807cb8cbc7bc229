"""`vlabench compare` of trained rungs: train-ladder results of one scenario side by side per target, each rung's
training samples/s (and speedup over the ladder's reference) beside its success rate per suite."""

from __future__ import annotations

from collections import defaultdict

from tabulate import tabulate

from .. import kinds


def _cell(record: dict, versus: dict, suites: list[str]) -> str:
    if record.get("status") != "ok":
        return record.get("status", "-")
    sps = (record.get("train") or {}).get("samples_per_s")
    speed = "-" if sps is None else f"{sps:.0f}/s"
    s = (versus.get(record["name"]) or {}).get("speedup")
    if s is not None:
        speed += f" ({s:.2f}x)"
    rates = record.get("success_rate") or {}
    success = ", ".join(
        ("" if len(suites) == 1 else f"{suite} ")  # a ladder of several suites names each
        + f"{rates[suite]['successes'] / rates[suite]['trials']:.0%} of {rates[suite]['trials']}"
        for suite in suites
        if suite in rates
    )
    return f"{speed}; success {success or '-'}"


def training_tables(results: list[tuple[str, dict]], fmt: str = "simple") -> str:
    """One table per scenario of the train-ladder results among `results` (none: an empty string)."""
    by_scenario: dict[str, list[dict]] = defaultdict(list)
    for _, result in results:
        if kinds.kind_of(result).in_training_tables:
            by_scenario[result["scenario"]["name"]].append(result)
    parts = []
    for scenario, group in by_scenario.items():
        names = list(dict.fromkeys(r["name"] for res in group for r in res["train_ladder"]["rungs"]))
        headers = ["rung", *(res["target"]["name"] for res in group)]
        rows = []
        for name in names:
            row = [name]
            for res in group:
                ladder = res["train_ladder"]
                record = next((r for r in ladder["rungs"] if r["name"] == name), None)
                suites = (ladder.get("eval") or {}).get("suites") or []
                row.append("-" if record is None else _cell(record, ladder.get("versus_reference") or {}, suites))
            rows.append(row)
        title = f"{scenario}: training samples/s (speedup over each ladder's reference) and success rate per target"
        parts.append(title + "\n" + tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True))
    return "\n\n".join(parts)
