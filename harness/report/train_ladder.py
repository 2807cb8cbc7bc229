"""The table `vlabench train-ladder` and `vlabench show` print for a train-ladder result: per rung, its speed (the
whole training's wall time and the median step's samples/s, each with its ratio to the reference rung's) beside its
success on each suite (a column each), and the verdicts against the reference rung over the training seeds
(harness/judge/train_ladder.py); under the rungs, the published success rates of the model family's policies on
those suites (results/published), a row per policy, as the source's own table sets them."""

from __future__ import annotations

import statistics
from pathlib import Path

from tabulate import tabulate

from ..judge.published import PUBLISHED_DIR, load_published, success_rates_by_policy
from ..judge.seeds import MIN_SEEDS, NOT_JUDGED, too_few
from ..judge.train_ladder import judge_runs, ladder_runs
from ..stats.rates import wilson_interval
from ..train.ladder import DEMONSTRATED, TrainBlock
from ..train.report import duration

_DEFAULTS = TrainBlock(steps=1)  # the tolerances a result without them was judged with


def _rate(entry: dict | None) -> str:
    if not entry:
        return "-"
    k, n = entry["successes"], entry["trials"]
    low, high = (
        (entry["wilson_low"], entry["wilson_high"])
        if entry.get("wilson_low") is not None and entry.get("wilson_high") is not None
        else wilson_interval(k, n)  # a file that states only the counts
    )
    return f"{k / n:.1%} [{low:.0%}-{high:.0%}] ({k}/{n})"


def _suite_cell(records: list[dict], suite: str) -> str:
    """One suite's success: with one seed the rate with its Wilson interval and counts, with several each seed's
    rate and their mean; a seed whose evaluation on the suite failed says so (its error, with one seed)."""
    entries = [(r.get("success_rate") or {}).get(suite) for r in records]
    errors = [(r.get("suite_errors") or {}).get(suite) for r in records]
    if not any(entries):
        return f"error: {errors[0][:60]}" if len(records) == 1 and errors[0] else "error" if any(errors) else "-"
    if len(records) == 1:
        return _rate(entries[0])
    rates = [e["successes"] / e["trials"] for e in entries if e]
    seeds = [
        f"{e['successes'] / e['trials']:.0%}" if e else "error" if error else "-" for e, error in zip(entries, errors)
    ]
    return ", ".join(seeds) + f" (mean {statistics.fmean(rates):.1%})"


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


def _gate_cell(versus: dict, several: bool) -> str:
    """Each suite's success gate over the seeds (named by its suite when the ladder has several); with one seed no
    verdict, the change and Fisher's test on the evaluations' trials beside "n/a"."""
    over = versus.get("over_seeds") or {}
    checks = over.get("success") or []
    if len(over.get("seeds") or []) == 1:
        fisher = [c for c in versus.get("success", []) if "/" not in c["subject"]]
        details = "; ".join(
            _named(
                c["subject"].removeprefix("suite "),
                f"{c['change'] or c['current']}, {c['note'].split(':')[0]}",
                several,
            )
            for c in fisher
        )
        return too_few(1) + (f"; {details}" if details else "")
    cells = [
        _named(c["suite"], f"{c['verdict']} ({c['note']})" if c["verdict"] != NOT_JUDGED else c["note"], several)
        for c in checks
    ]
    return "; ".join(cells) or "-"


def _named(suite: str, text: str, several: bool) -> str:
    return f"{suite}: {text}" if several else text


def _mean(records: list[dict], key: str) -> float | None:
    values = [(r.get("train") or {}).get(key) for r in records]
    return statistics.fmean(values) if values and all(v is not None for v in values) else None


def _row(name: str, records: list[dict], ladder: dict, versus: dict, suites: list[str]) -> list[str]:
    """One rung over its seeds: the seeds it trained in, then its speed, loss and success on each suite (means
    over the ok seeds) and the verdicts against the reference."""
    ok = [r for r in records if r["status"] == "ok"]
    sabotaged = any((r.get("train") or {}).get("test_train_sabotage") for r in records)
    label = name + (" (SABOTAGED)" if sabotaged else "")
    if not ok:
        r = records[0]
        return [label, "-", f"{r['status']} in {r.get('stage')}: {r.get('error', '')[:60]}", *["-"] * (7 + len(suites))]
    seeds = f"{len(ok)}" if len(ok) == len(records) else f"{len(ok)} of {len(records)}"
    done = sorted({f"{(r['train']).get('steps_done')}/{r['train'].get('steps_planned')}" for r in ok})
    sps, loss = _mean(ok, "samples_per_s"), _mean(ok, "final_loss")
    if name == ladder["reference"]:
        wall_x, speed, conv, gate = "reference", "reference", "reference", "reference"
    else:
        mine = versus.get(name) or {}
        over = mine.get("over_seeds") or {}
        wall_x, speed = _times(over.get("wall_speedup")), _times(over.get("speedup"))
        conv, gate = _convergence_cell(over), _gate_cell(mine, len(suites) > 1)
    return [
        label,
        seeds,
        ", ".join(done),
        duration(_mean(ok, "wall_s")),
        wall_x,
        "-" if sps is None else f"{sps:.0f}",
        speed,
        "-" if loss is None else f"{loss:.4f}",
        conv,
        *(_suite_cell(ok, suite) for suite in suites),
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
        f"per rung; evaluated on {', '.join(ev.get('suites', []))}, {ev.get('trials')} "
        f"trial{'' if ev.get('trials') == 1 else 's'} per task"
        f"{' (the tasks the training dataset demonstrates)' if ev.get('tasks') == DEMONSTRATED else ''}; against "
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


def _suites(ladder: dict, runs: list) -> list[str]:
    """The suites the ladder evaluated on (its eval block's; else those its records hold), one column each."""
    listed = (ladder.get("eval") or {}).get("suites")
    rates = (r.get("success_rate") or {} for _, recs in runs for r in recs.values())
    return list(listed or dict.fromkeys(key for entry in rates for key in entry if "/" not in key))


def _published(result: dict, suites: list[str]) -> tuple[list[list[str]], list[str]]:
    """The published success rates of the ladder's model family on its suites (results/published): a row per
    policy they are of, under the suites' columns, and a line naming their sources; none where none is published."""
    if not PUBLISHED_DIR.is_dir():  # a copy of vlabench without the repository's results/
        return [], []
    model = (result.get("workload") or {}).get("model")
    by_policy = success_rates_by_policy(load_published(), model, suites)
    if not by_policy:
        return [], []
    rows = [
        [f"{who} (published)", *[""] * 8, *(f[s].value_text() if s in f else "-" for s in suites), ""]
        for who, f in by_policy.items()
    ]
    figures = [f for by_suite in by_policy.values() for f in by_suite.values()]
    sources = dict.fromkeys(f"{f.source} (results/published/{Path(f.file).name})" for f in figures)
    return rows, [
        f"published: the LIBERO success rates of {model} policies ({', '.join(by_policy)}) from {'; '.join(sources)}, "
        "beside ours and not judged here: their policies trained as the source states, these rungs as the title says "
        "(`vlabench compare EVAL.json --published` judges an evaluation against them)"
    ]


def train_ladder_table(result: dict, fmt: str = "simple") -> str:
    """One row per rung: the seeds, steps, training wall time and samples/s with their ratios to the reference's,
    the smoothed final loss and its convergence check, the success rate on each suite (Wilson interval, or per
    seed) and the success gate, all against the reference rung over the seeds; then the published success rates
    of the ladder's suites, a row per policy they are of."""
    ladder = result["train_ladder"]
    runs = ladder_runs(result)
    suites = _suites(ladder, runs)
    headers = ["rung", "seeds", "steps", "train wall", "wall speedup", "samples/s", "speedup", "final loss",
               "convergence", *(f"{suite} success [95%]" for suite in suites), "success gate"]  # fmt: skip
    conv = ladder.get("convergence_tolerance", _DEFAULTS.convergence_tolerance)
    drop = ladder.get("success_tolerance", _DEFAULTS.success_tolerance)
    # judged again from the records by today's rules, as `vlabench gate` judges: a result keeps the verdicts its
    # run printed under versus_reference, which older rules may have given
    block = TrainBlock(steps=1, convergence_tolerance=conv, success_tolerance=drop)
    versus = judge_runs(runs, ladder["reference"], block)
    names = list(dict.fromkeys(name for _, recs in runs for name in recs))
    rows = [_row(n, [recs[n] for _, recs in runs if n in recs], ladder, versus, suites) for n in names]
    published, cited = _published(result, suites)
    table = tabulate(rows + published, headers=headers, tablefmt=fmt, disable_numparse=True)
    rule = _rule(conv, drop)
    if ladder["reference"] not in names:
        rule += f"; the reference rung, {ladder['reference']}, is not in this file (trained without it): no verdicts"
    curves = curve_table(runs, suites, fmt)
    return "\n".join([_title(result, [seed for seed, _ in runs]), table, *cited, rule, *([curves] if curves else [])])


def curve_table(runs: list, suites: list[str], fmt: str = "simple") -> str | None:
    """The success curves of the rungs trained with --curve-every (`runs`: ladder_runs of the result): a row per
    evaluated checkpoint (rung, its seed where the ladder has several, step, the training's wall time up to it, the
    success on each suite); None when no rung has one."""
    several = len(runs) > 1
    rows = [
        [
            name,
            *([str(seed)] if several else []),
            str(point["step"]),
            duration(point.get("wall_s")),
            *(_rate(point["success_rate"].get(suite)) for suite in suites),
        ]
        for seed, records in runs
        for name, record in records.items()
        for point in record.get("curve") or ()
    ]
    if not rows:
        return None
    headers = ["rung", *(["seed"] if several else []), "step", "train wall", *(f"{s} success [95%]" for s in suites)]
    title = "success against training time (--curve-every): each kept checkpoint evaluated as the last one is"
    return title + "\n" + tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)


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
        f"{name} {over['wall_speedup']:.2f}x faster to train than {reference} ({duration(walls[name])} against "
        f"{duration(walls[reference])} for {ladder['steps']} steps; {_times(over.get('speedup'))} by the median "
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
