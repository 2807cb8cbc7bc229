"""The table `vlabench train-ladder` and `vlabench show` print for a train-ladder result: per rung, its speed beside
its success, and the verdicts against the reference rung."""

from __future__ import annotations

from collections import Counter

from ..judge.train_ladder import judge
from .ladder import TrainBlock
from .report import _duration

_DEFAULTS = TrainBlock(steps=1)  # the tolerances a result without them was judged with


def _rate(entry: dict | None) -> str:
    if not entry:
        return "-"
    return (
        f"{entry['successes'] / entry['trials']:.1%} [{entry['wilson_low']:.0%}-{entry['wilson_high']:.0%}] "
        f"({entry['successes']}/{entry['trials']})"
    )


def _verdicts(versus: dict | None) -> tuple[str, str, str]:
    """Speedup, convergence and success-gate cells of a rung against the reference."""
    if not versus:
        return "-", "-", "-"
    s = versus.get("speedup")
    conv = versus.get("convergence") or {}
    rel = conv.get("rel_diff")
    conv_text = "-" if rel is None else f"{rel:+.1%} " + ("pass" if conv.get("passed") else "FAIL")
    return ("-" if s is None else f"{s:.2f}x"), conv_text, _gate_cell(versus.get("success", []))


def _gate_cell(checks: list[dict]) -> str:
    """Each suite's verdict with its change and test; its tasks' verdicts counted, the failed ones named."""
    tasks = [c for c in checks if "/" in c["subject"]]
    cells = [f"{c['verdict']} ({c['change']}, {c['note'].split(':')[0]})" for c in checks if "/" not in c["subject"]]
    if tasks:
        counts = Counter(c["verdict"] for c in tasks)
        named = [f"{c['subject'].split('/')[-1]} {c['verdict']} {c['change']}" for c in tasks if c["verdict"] == "FAIL"]
        summary = ", ".join(f"{n} {v}" for v, n in sorted(counts.items()))
        cells.append(f"tasks: {summary}" + (f" ({'; '.join(named)})" if named else ""))
    return "; ".join(cells) or "-"


def _row(record: dict, ladder: dict, versus: dict) -> list[str]:
    t = record.get("train") or {}
    suites = ladder.get("eval", {}).get("suites") or []
    rates = record.get("success_rate") or {}
    success = "; ".join(_rate(rates.get(s)) for s in suites) if rates else "-"
    name = record["name"] + (" (SABOTAGED)" if t.get("test_train_sabotage") else "")
    if record["status"] != "ok":
        return [name, f"{record['status']} in {record.get('stage')}: {record.get('error', '')[:60]}", *["-"] * 7]
    sps = t.get("samples_per_s")
    speed, conv, gate = (
        ("reference", "reference", "reference")
        if record["name"] == ladder["reference"]
        else _verdicts(versus.get(record["name"]))
    )
    return [
        name,
        f"{t.get('steps_done')}/{t.get('steps_planned')}",
        _duration(t.get("wall_s")),
        "-" if sps is None else f"{sps:.0f}",
        speed,
        "-" if t.get("final_loss") is None else f"{t['final_loss']:.4f}",
        conv,
        success,
        gate,
    ]


def train_ladder_table(result: dict, fmt: str = "simple") -> str:
    """One row per rung: steps, training wall time, samples/s and speedup beside the smoothed final loss, its
    convergence check, the success rate with its Wilson interval and the success gate, all against the
    reference rung."""
    from tabulate import tabulate

    ladder = result["train_ladder"]
    w, ev = result.get("workload") or {}, ladder.get("eval") or {}
    recipe = ladder.get("recipe") or {}
    title = (
        f"{result['scenario']['name']} on {result['target']['name']}: {w.get('model_size')} model trained "
        f"{ladder['steps']} steps of batch {w.get('batch_size')} ({w.get('dtype')}, seed {w.get('seed')}, lr {recipe.get('peak_lr')}, "
        f"{recipe.get('warmup_steps')} warm-up steps, cosine to {recipe.get('decay_lr')}) per rung; evaluated on "
        f"{', '.join(ev.get('suites', []))}, {ev.get('trials')} trials per task; against {ladder['reference']}"
    )
    headers = ["rung", "steps", "train wall", "samples/s", "speedup", "final loss", "convergence", "success [95%]",
               "success gate"]  # fmt: skip
    conv = ladder.get("convergence_tolerance", _DEFAULTS.convergence_tolerance)
    drop = ladder.get("success_tolerance", _DEFAULTS.success_tolerance)
    # judged again from the records by today's rules, as `vlabench gate` judges: a result keeps the verdicts its
    # run printed under versus_reference, which older rules may have given
    block = TrainBlock(steps=1, convergence_tolerance=conv, success_tolerance=drop)
    versus = judge({r["name"]: r for r in ladder["rungs"]}, ladder["reference"], block)
    rows = [_row(r, ladder, versus) for r in ladder["rungs"]]
    tol = (
        f"convergence: smoothed final loss within {conv:.0%} of the reference's; success gate: FAIL when more "
        f"than {drop * 100:g} points below the reference's and significant (Fisher, 95%); inconclusive when the "
        f"trials cannot tell, or when the reference's rate is within {drop * 100:g} points of zero; each rung is "
        "one training run: the test counts the evaluation's trials, not how far training runs of other seeds spread "
        "(a repeat with --seed measures that)"
    )
    if ladder["reference"] not in {r["name"] for r in ladder["rungs"]}:
        tol += f"; the reference rung, {ladder['reference']}, is not in this file (trained without it): no verdicts"
    return "\n".join([title, tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True), tol])
