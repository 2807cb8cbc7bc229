"""The table `vlabench train-ladder` and `vlabench show` print for a train-ladder result: per rung, its speed (the
whole training's wall time and the median step's samples/s, each with its ratio to the reference rung's) beside its
success, and the verdicts against the reference rung over the training seeds (harness/judge/train_ladder.py)."""

from __future__ import annotations

import statistics

from ..judge.seeds import MIN_SEEDS, NOT_JUDGED, too_few
from ..judge.train_ladder import judge_runs, ladder_runs
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


def _rates(records: list[dict], suites: list[str]) -> str:
    """One seed: the rate with its Wilson interval and counts; several: each seed's rate and their mean."""
    if len(records) == 1:
        rates = records[0].get("success_rate") or {}
        return "; ".join(_rate(rates.get(s)) for s in suites) if rates else "-"
    cells = []
    for suite in suites:
        values = [(r.get("success_rate") or {}).get(suite) for r in records]
        values = [v["successes"] / v["trials"] for v in values if v]
        if values:
            cells.append(", ".join(f"{v:.0%}" for v in values) + f" (mean {statistics.fmean(values):.1%})")
    return "; ".join(cells) or "-"


def _times(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _convergence_cell(over: dict) -> str:
    conv = over.get("convergence") or {}
    rel = conv.get("mean_rel_diff")
    if rel is None:
        return "-"
    k = len(conv.get("rel_diffs") or [])
    if conv.get("verdict") == NOT_JUDGED:
        return f"{rel:+.1%} ({NOT_JUDGED}: {k} seed{'s' if k != 1 else ''})"
    return f"{rel:+.1%} {conv['verdict']}" + (f" (mean of {k})" if k > 1 else "")


def _gate_cell(versus: dict) -> str:
    """Each suite's success gate over the seeds; with one seed no verdict, the change and Fisher's test on the
    evaluations' trials beside "n/a"."""
    over = versus.get("over_seeds") or {}
    checks = over.get("success") or []
    if len(over.get("seeds") or []) == 1:
        fisher = [c for c in versus.get("success", []) if "/" not in c["subject"]]
        details = "; ".join(f"{c['change']}, {c['note'].split(':')[0]}" for c in fisher)
        return too_few(1) + (f"; {details}" if details else "")
    cells = [f"{c['verdict']} ({c['note']})" if c["verdict"] != NOT_JUDGED else c["note"] for c in checks]
    return "; ".join(cells) or "-"


def _mean(records: list[dict], key: str) -> float | None:
    values = [(r.get("train") or {}).get(key) for r in records]
    return statistics.fmean(values) if values and all(v is not None for v in values) else None


def _row(name: str, records: list[dict], ladder: dict, versus: dict) -> list[str]:
    """One rung over its seeds: the seeds it trained in, then its speed, loss and success (means over the ok
    seeds) and the verdicts against the reference."""
    ok = [r for r in records if r["status"] == "ok"]
    sabotaged = any((r.get("train") or {}).get("test_train_sabotage") for r in records)
    label = name + (" (SABOTAGED)" if sabotaged else "")
    if not ok:
        r = records[0]
        return [label, "-", f"{r['status']} in {r.get('stage')}: {r.get('error', '')[:60]}", *["-"] * 9]
    seeds = f"{len(ok)}" if len(ok) == len(records) else f"{len(ok)} of {len(records)}"
    done = sorted({f"{(r['train']).get('steps_done')}/{r['train'].get('steps_planned')}" for r in ok})
    sps, loss = _mean(ok, "samples_per_s"), _mean(ok, "final_loss")
    if name == ladder["reference"]:
        wall_x, speed, conv, gate = "reference", "reference", "reference", "reference"
    else:
        mine = versus.get(name) or {}
        over = mine.get("over_seeds") or {}
        wall_x, speed = _times(over.get("wall_speedup")), _times(over.get("speedup"))
        conv, gate = _convergence_cell(over), _gate_cell(mine)
    return [
        label,
        seeds,
        ", ".join(done),
        _duration(_mean(ok, "wall_s")),
        wall_x,
        "-" if sps is None else f"{sps:.0f}",
        speed,
        "-" if loss is None else f"{loss:.4f}",
        conv,
        _rates(ok, ladder.get("eval", {}).get("suites") or []),
        gate,
    ]


def _title(result: dict, seeds: list[int]) -> str:
    ladder = result["train_ladder"]
    w, ev, recipe = result.get("workload") or {}, ladder.get("eval") or {}, ladder.get("recipe") or {}
    which = f"seed {seeds[0]}" if len(seeds) == 1 else f"seeds {', '.join(map(str, seeds))}"
    return (
        f"{result['scenario']['name']} on {result['target']['name']}: {w.get('model_size')} model trained "
        f"{ladder['steps']} steps of batch {w.get('batch_size')} ({w.get('dtype')}, {which}, lr "
        f"{recipe.get('peak_lr')}, {recipe.get('warmup_steps')} warm-up steps, cosine to {recipe.get('decay_lr')}) "
        f"per rung; evaluated on {', '.join(ev.get('suites', []))}, {ev.get('trials')} trials per task; against "
        f"{ladder['reference']}"
    )


def _rule(conv: float, drop: float) -> str:
    return (
        f"train wall: the whole training's wall time, wall speedup the reference's over the rung's (the time to "
        f"train); samples/s: the median step's, speedup over the reference's; with several seeds each figure is "
        f"the mean over the seeds. convergence: smoothed final loss within {conv:.0%} of the reference's (the mean "
        f"difference over the seeds); success gate over seeds (as vlabench train-seeds): per seed the rung's rate "
        f"minus the reference's, FAIL when their mean is more than {drop * 100:g} points below zero and a one-sided "
        f"t-test over the seeds says so, inconclusive when the seeds cannot tell or the reference's rate is within "
        f"{drop * 100:g} points of zero. A verdict needs {MIN_SEEDS} seeds a rung: with fewer, n/a and the figures "
        f"(one seed, one training run per rung: Fisher's test on the evaluations' trials, which does not see how far "
        f"training runs of other seeds spread; train-ladder --seeds {MIN_SEEDS} trains them)"
    )


def train_ladder_table(result: dict, fmt: str = "simple") -> str:
    """One row per rung: the seeds, steps, training wall time and samples/s with their ratios to the reference's,
    the smoothed final loss and its convergence check, the success rate (Wilson interval, or per seed) and the
    success gate, all against the reference rung over the seeds."""
    from tabulate import tabulate

    ladder = result["train_ladder"]
    headers = ["rung", "seeds", "steps", "train wall", "wall speedup", "samples/s", "speedup", "final loss",
               "convergence", "success [95%]", "success gate"]  # fmt: skip
    conv = ladder.get("convergence_tolerance", _DEFAULTS.convergence_tolerance)
    drop = ladder.get("success_tolerance", _DEFAULTS.success_tolerance)
    # judged again from the records by today's rules, as `vlabench gate` judges: a result keeps the verdicts its
    # run printed under versus_reference, which older rules may have given
    block = TrainBlock(steps=1, convergence_tolerance=conv, success_tolerance=drop)
    runs = ladder_runs(result)
    versus = judge_runs(runs, ladder["reference"], block)
    names = list(dict.fromkeys(name for _, recs in runs for name in recs))
    rows = [_row(n, [recs[n] for _, recs in runs if n in recs], ladder, versus) for n in names]
    table = tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)
    rule = _rule(conv, drop)
    if ladder["reference"] not in names:
        rule += f"; the reference rung, {ladder['reference']}, is not in this file (trained without it): no verdicts"
    return "\n".join([_title(result, [seed for seed, _ in runs]), table, rule])


def time_to_train(result: dict) -> str | None:
    """One sentence: how many times faster each rung trained the ladder's steps than the reference, by the whole
    training's wall time (the mean over the seeds), with the median step's samples/s ratio beside it; None when no
    rung trained beside the reference."""
    ladder = result["train_ladder"]
    reference, runs = ladder["reference"], ladder_runs(result)
    versus = judge_runs(runs, reference, TrainBlock(steps=1))
    walls = {
        name: _mean([recs[name] for _, recs in runs if recs.get(name, {}).get("status") == "ok"], "wall_s")
        for name in [reference, *versus]
    }
    parts = [
        f"{name} {over['wall_speedup']:.2f}x faster to train than {reference} ({_duration(walls[name])} against "
        f"{_duration(walls[reference])} for {ladder['steps']} steps; {_times(over.get('speedup'))} by the median "
        "step's samples/s)"
        for name, over in ((n, v.get("over_seeds") or {}) for n, v in versus.items())
        if over.get("wall_speedup") and walls[name] and walls[reference]
    ]
    seeds = len(runs)
    return (
        ("Time to train" + (f" (mean over {seeds} seeds)" if seeds > 1 else "") + ": " + "; ".join(parts) + ".")
        if parts
        else None
    )
