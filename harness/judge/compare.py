"""Per-hardware comparison tables and verdicts against published figures (`vlabench compare`).

Rungs are rows and each result (a target) gives two columns: samples/s and the speedup over that
result's own baseline rung (with its interval over repeats where there are repeats; marked where the two
rungs were measured in different runs). Published figures that map onto a rung stand beside it, and each
published figure gets a verdict, two-sided, from the interval over at least MIN_REPEATS repeats: reproduced
(the interval inside theirs +- the tolerance), exceeded (above it), not reproduced (below it), inconclusive
(the interval straddles a boundary). Without a verdict word: parity failed (a rung broke loss parity),
single run / too few repeats (the figure is shown), different runs (the two rungs come from different runs),
not comparable (with the reason).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from tabulate import tabulate

from models import get_family

from .. import kinds
from ..ladder.floor import floor_share
from ..results import host_summary
from ..stats.rates import wilson_interval
from ..stats.repeats import ok_repeats, per_repeat, same_run
from ..stats.spread import geometric_interval, repeats_ratio
from .published import LOWER_IS_BETTER, NOT_STATED, Figure

REPRODUCED, EXCEEDED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "exceeded", "not reproduced", "inconclusive"
NOT_COMPARABLE, PARITY_FAILED, SINGLE_RUN = "not comparable", "parity failed", "single run"
TOO_FEW_REPEATS, DIFFERENT_RUNS = "too few repeats", "different runs"
MIN_REPEATS = 3  # a published figure gets a verdict word only from this many repeats on the target
CONFIDENCE = 0.95


def devices(result: dict) -> int:
    """Devices each rung trained on: one per process (`vlabench run --nproc`)."""
    return result.get("nproc", 1)


@dataclass(frozen=True)
class Column:
    label: str  # the target's name, with the file name when a scenario has two results on one target
    path: str
    result: dict


@dataclass(frozen=True)
class Verdict:
    figure: Figure
    column: str  # which result the figure was set beside ("-" when none)
    ours: str
    verdict: str
    why: str


def is_ladder(result: dict) -> bool:
    """Ladder runs carry no `kind`; a recompute sweep's rungs are alternatives, not cumulative steps, and an
    evaluation ("eval") has success rates instead of rungs."""
    return kinds.kind_of(result).in_compare_columns


def columns(results: list[tuple[str, dict]]) -> dict[str, list[Column]]:
    """Ladder results grouped by scenario, one column each."""
    by_scenario: dict[str, list[tuple[str, dict]]] = {}
    for path, result in results:
        if is_ladder(result):
            by_scenario.setdefault(result["scenario"]["name"], []).append((path, result))
    grouped = {}
    for scenario, items in by_scenario.items():
        labels = [r["target"]["name"] + (f" x{devices(r)}" if devices(r) > 1 else "") for _, r in items]
        grouped[scenario] = [
            Column(label if labels.count(label) == 1 else f"{label} ({path.rsplit('/', 1)[-1]})", path, r)
            for label, (path, r) in zip(labels, items)
        ]
    return grouped


def _ok(result: dict, rung: str) -> dict | None:
    return next((r for r in result["rungs"] if r["name"] == rung and r["status"] == "ok"), None)


def _baseline_rung(result: dict) -> dict | None:
    first = result["rungs"][0] if result["rungs"] else None
    return first if first and first["status"] == "ok" else None


def speedup(result: dict, rung: str, over: str | None = None) -> float | None:
    """samples/s of `rung` over `over` (default: the result's baseline rung), None if either is not ok."""
    r = _ok(result, rung)
    base = _ok(result, over) if over else _baseline_rung(result)
    return r["samples_per_s"] / base["samples_per_s"] if r and base else None


def _published_cell(figures: list[Figure], scenario: str, rung: str, first_rung: str | None) -> str:
    cells = []
    for f in figures:
        ours = f.ours or {}
        if ours.get("scenario") != scenario:
            continue
        if f.metric == "speedup" and ours["to_rung"] == rung:
            over = "" if ours["from_rung"] == first_rung else f" over {ours['from_rung']}"
            cells.append(f"{f.value_text()}{over} ({f.label})")
        elif f.metric in ("throughput", "step_time") and ours["rung"] == rung:
            cells.append(f"{f.value_text()} ({f.label})")
    return "; ".join(cells)


# What each result (card) shows per rung: the pair by default, the whole group with `per_card` (docs/hardware.md)
PAIR = ("samples/s", "speedup")
CARD_GROUP = (*PAIR, "% of floor", "MFU", "peak GiB", "data wait")


def mfu_text(rec: dict) -> str:
    return "-" if rec.get("mfu") is None else f"{100 * rec['mfu']:.1f}%"


def peak_text(rec: dict) -> str:
    return "-" if rec.get("peak_memory_gib") is None else f"{rec['peak_memory_gib']:.1f}"


def floor_text(result: dict, rec: dict, knobs=None) -> str | None:
    """The rung's share of the kernel floor (result["floor"]) of the precision it trains in, e.g. "64%"; `knobs`:
    the model family's reading of the rung's options (read here when not given). None without a floor."""
    floor = result.get("floor")
    if not floor or "totals" not in floor or rec.get("status") != "ok":
        return None
    if knobs is None:
        knobs = get_family(result["workload"]["model"]).knobs(rec["options"])
    share = floor_share(rec, floor, knobs.fp8_linears)
    return None if share is None else f"{share:.0%}"


def data_wait_text(rec: dict) -> str:
    """The share of the step spent waiting for the input pipeline ("-" for batches made up front on the device)."""
    if rec.get("data_wait_share") is None:
        return "-"
    return f"{rec['data_wait_share']:.1%} ({rec['data_wait_ms']:.0f} ms)"


def host_text(result: dict) -> str:
    """The host that fed the card: a rung reading a dataset is as fast as its CPU cores let the loader be."""
    host = host_summary(result, " visible")
    if not host:
        return "host not recorded (the result predates host facts)"
    if not result["provenance"].get("host"):
        host += " (CPU model not recorded: the result predates host facts)"
    return f"host {host}"


def commit_text(result: dict) -> str:
    """The commit a result's run measured, and the day: cards compare only where the code is the same."""
    p = result["provenance"]
    dirty = " (uncommitted changes)" if p.get("dirty") else ""
    return f"commit {str(p.get('git_sha'))[:12]}{dirty}, {str(p.get('created_at', ''))[:10]}"


def _card_cells(result: dict, rec: dict | None, width: int) -> list[str]:
    """One rung's cells in a result's column group (`width` of CARD_GROUP); its status where it is not ok."""
    if rec is None or rec["status"] != "ok":
        return [rec["status"] if rec else "-"] + [""] * (width - 1)
    cells = [rate_text(rec), speedup_text(result, rec["name"]), floor_text(result, rec) or "-"]
    return (cells + [mfu_text(rec), peak_text(rec), data_wait_text(rec)])[:width]


def comparison_table(
    scenario: str, cols: list[Column], figures: list[Figure] | None = None, per_card: bool = False
) -> tuple[list, list]:
    """(headers, rows) of one scenario: rungs as rows, samples/s and speedup per result (with `per_card` also the
    share of the card's kernel floor, MFU and peak GiB), published beside."""
    rungs: list[str] = []
    for col in cols:
        rungs += [r["name"] for r in col.result["rungs"] if r["name"] not in rungs]
    group = CARD_GROUP if per_card else PAIR
    headers = ["rung"] + [f"{col.label} {what}" for col in cols for what in group]
    if figures is not None:
        headers.append("published")
    rows = []
    for rung in rungs:
        row = [rung]
        for col in cols:
            rec = next((r for r in col.result["rungs"] if r["name"] == rung), None)
            row += _card_cells(col.result, rec, len(group))
        if figures is not None:
            first = cols[0].result["rungs"][0]["name"] if cols[0].result["rungs"] else None
            row.append(_published_cell(figures, scenario, rung, first))
        rows.append(row)
    return headers, rows


def _stated(value) -> bool:
    return value is not None and not str(value).startswith(NOT_STATED)


def _where_theirs(f: Figure) -> str:
    hw, n = f.covers.get("hardware"), f.covers.get("device_count")
    return f"{hw if _stated(hw) else 'hardware not stated'}" + (f" x{n}" if _stated(n) else "")


def _where_ours(col: Column) -> str:
    return f"{col.result['target'].get('device_name') or col.result['target']['name']} x{devices(col.result)}"


def rate_text(rec: dict) -> str:
    """samples/s, with the interval over repeats and their count where the rung has repeats."""
    interval = rec.get("samples_per_s_interval")
    if not interval:
        return f"{rec['samples_per_s']:.2f}"
    return f"{rec['samples_per_s']:.2f} [{interval[0]:.2f}-{interval[1]:.2f}] x{len(ok_repeats(rec))}"


def speedup_interval(result: dict, rung: str, over: str | None = None) -> tuple[float, float] | None:
    """The 95% interval of a speedup over the rungs' repeats (None without repeats on either side)."""
    r = _ok(result, rung)
    base = _ok(result, over) if over else _baseline_rung(result)
    if not r or not base or r is base:
        return None
    ratio = repeats_ratio(per_repeat(r), per_repeat(base), CONFIDENCE)
    return None if ratio is None else (ratio.low, ratio.high)


def speedup_text(result: dict, rung: str, over: str | None = None) -> str:
    """The speedup with its interval over repeats, marked (different runs) where the two rungs were measured in
    different runs."""
    s = speedup(result, rung, over)
    if s is None:
        return "-"
    base = _ok(result, over) if over else _baseline_rung(result)
    if base is _ok(result, rung):
        return f"{s:.2f}x"
    interval = speedup_interval(result, rung, over)
    text = f"{s:.2f}x" + (f" [{interval[0]:.2f}-{interval[1]:.2f}]" if interval else "")
    return text if same_run(_ok(result, rung), base) else f"{text} (different runs)"


def repeats_of(*records: dict) -> int:
    return min(len(ok_repeats(r)) for r in records)


def _two_sided(f: Figure, low: float, high: float) -> tuple[str, str]:
    """The verdict of an interval of ours against theirs +- the tolerance (relative, or points)."""
    tol = f.tolerance.value if f.tolerance.points else f.point * f.tolerance.value
    lo_band, hi_band = f.point - tol, f.point + tol
    if f.metric in LOWER_IS_BETTER:  # a lower step time is the better one: above the band is short of theirs
        low, high, lo_band, hi_band = -high, -low, -hi_band, -lo_band
    if lo_band <= low and high <= hi_band:
        return REPRODUCED, "the interval lies inside theirs +- the tolerance"
    if low > hi_band:
        return EXCEEDED, "the interval lies above theirs + the tolerance (faster than published: another claim)"
    if high < lo_band:
        return NOT_REPRODUCED, "the interval lies below theirs - the tolerance"
    return INCONCLUSIVE, "the interval straddles a boundary of theirs +- the tolerance: more repeats may decide"


def _one_process_stand_in(result: dict, rung: str) -> str | None:
    """For a rung recorded unsupported because it needs several processes (gradient communication: over one
    process it is the identity), the ok rung just above it, which the next rung's gain is then measured over."""
    names = [r["name"] for r in result["rungs"]]
    rec = next((r for r in result["rungs"] if r["name"] == rung), None)
    if rec is None or rec["status"] != "unsupported" or "multi-process" not in (rec.get("reason") or ""):
        return None
    return next((n for n in reversed(names[: names.index(rung)]) if _ok(result, n)), None)


def judge(f: Figure, col: Column) -> Verdict:
    """The verdict of one figure against one of our results of its scenario."""
    result, ours_map = col.result, f.ours
    label = col.label

    def verdict(ours_text, v, why):
        return Verdict(f, label, ours_text, v, why)

    ours_value, ours_text, over = None, "-", ""
    if f.metric == "speedup":
        from_rung = ours_map["from_rung"]
        stand_in = _one_process_stand_in(result, from_rung)
        if stand_in:  # a gain over a multi-process rung, on one process: over the rung it would have added to
            from_rung, over = stand_in, f"over {stand_in}, since {ours_map['from_rung']} needs several processes; "
        ours_value = speedup(result, ours_map["to_rung"], from_rung)
        ours_text = "-" if ours_value is None else f"{ours_value:.2f}x"
        bad = [r for r in (from_rung, ours_map["to_rung"]) if _ok(result, r) is None]
        records = [_ok(result, ours_map["to_rung"]), _ok(result, from_rung)]
        spanned = span(result, from_rung, ours_map["to_rung"])
    else:
        rec = _ok(result, ours_map["rung"])
        if rec is not None:
            ours_value = rec["step_time_s"] if f.metric == "step_time" else rec["samples_per_s"]
            ours_text = f"{ours_value:.2f} {f.unit}"
        bad = [] if rec else [ours_map["rung"]]
        records = [rec]
        spanned = span(result, result["rungs"][0]["name"] if result["rungs"] else ours_map["rung"], ours_map["rung"])
    if bad:
        statuses = {r["name"]: r["status"] for r in result["rungs"]}
        missing = ", ".join(f"{r} {statuses.get(r, 'not measured')}" for r in bad)
        return verdict(ours_text, NOT_COMPARABLE, f"on {label}: {missing}")
    size = result["workload"].get("model_size")
    if size != "full":
        return verdict(ours_text, NOT_COMPARABLE, f"the {label} result uses the {size} model (a functional check)")
    need = ours_map.get("min_device_count")
    if need and devices(result) < need:
        return verdict(
            ours_text, NOT_COMPARABLE, f"the gain needs at least {need} devices; ours ran on {_where_ours(col)}"
        )
    if f.metric != "speedup":  # an absolute figure: only on the same hardware, device count and batch
        hw, n, batch = f.covers["hardware"], f.covers["device_count"], f.covers["batch"]
        if not _stated(hw):
            return verdict(ours_text, NOT_COMPARABLE, "an absolute figure on hardware not stated")
        if f.covers.get("target") != result["target"]["name"]:
            return verdict(ours_text, NOT_COMPARABLE, f"theirs on {_where_theirs(f)}, ours on {_where_ours(col)}")
        if _stated(n) and n != devices(result):
            return verdict(ours_text, NOT_COMPARABLE, f"theirs on {n} devices, ours on {devices(result)}")
        if _stated(batch) and batch != result["workload"]["batch_size"]:
            return verdict(
                ours_text, NOT_COMPARABLE, f"theirs at batch {batch}, ours at batch {result['workload']['batch_size']}"
            )
    return _speed_verdict(f, col, ours_text, over, records, spanned)


def span(result: dict, first: str, last: str) -> list[dict]:
    """The rung records of the ladder from `first` to `last`, both included, in the result's order: a speedup
    figure's span (every rung whose option the gain adds), or an absolute figure's (every rung whose option its
    rung carries: the ladder is cumulative)."""
    names = [r["name"] for r in result["rungs"]]
    if first not in names or last not in names:
        return [r for r in result["rungs"] if r["name"] in (first, last)]
    i, j = sorted((names.index(first), names.index(last)))
    return result["rungs"][i : j + 1]


def _speed_verdict(
    f: Figure, col: Column, text: str, over: str, records: list[dict], spanned: list[dict] | None = None
) -> Verdict:
    """What our rungs' records say about a comparable speed figure: parity on every rung of its span, runs,
    repeats, then the interval."""
    where = f"(theirs: {_where_theirs(f)}; ours: {_where_ours(col)})"
    spanned = records if spanned is None else spanned
    broken = [r["name"] for r in spanned if (r.get("loss_parity") or {}).get("pass") is False]
    if broken:
        first, last = spanned[0]["name"], spanned[-1]["name"]
        why = (
            f"not reproduced: {', '.join(broken)} broke loss parity, in the span {first} to {last} this figure "
            "rests on: no speed verdict"
        )
        return Verdict(f, col.label, text, PARITY_FAILED, why)
    if len(records) == 2 and not same_run(*records):
        why = f"{records[1]['name']} and {records[0]['name']} were measured in different runs: no verdict"
        return Verdict(f, col.label, text, DIFFERENT_RUNS, why)
    n = repeats_of(*records)
    base = f"{over}ours {text} vs theirs {f.value_text()}, tolerance {f.tolerance} {where}"
    if n < MIN_REPEATS:
        word = SINGLE_RUN if n == 1 else TOO_FEW_REPEATS
        return Verdict(f, col.label, text, word, f"{base}; {n} of the {MIN_REPEATS} repeats a verdict needs")
    if len(records) == 2:
        ratio = repeats_ratio(per_repeat(records[0]), per_repeat(records[1]), CONFIDENCE)
        low, high = ratio.low, ratio.high
    else:
        key = "step_time_s" if f.metric == "step_time" else "samples_per_s"
        _, low, high = geometric_interval(per_repeat(records[0], key), CONFIDENCE)
    verdict, why = _two_sided(f, low, high)
    return Verdict(f, col.label, f"{text} [{low:.2f}-{high:.2f}] x{n}", verdict, f"{base}; {why}")


def _untrained_policy(result: dict, model: str | None) -> str | None:
    """Why an evaluation says nothing about a published policy's success: another policy than the figure's
    `model`, random weights or the tiny model (the `policy` that `vlabench eval` records)."""
    policy = result.get("policy")
    if not policy:
        return None
    if (
        (model is not None and policy.get("name") != model)
        or policy.get("checkpoint") in (None, "random")
        or policy.get("model_size") == "tiny"
    ):
        return (
            f"the evaluated policy is {policy.get('name')} ({policy.get('checkpoint') or 'no'} weights, "
            f"{policy.get('model_size', '-')} model), not a trained {model or 'model'}"
        )
    return None


def judge_success(f: Figure, results: list[tuple[str, dict]]) -> list[Verdict]:
    """Success-rate figures against evaluation results holding that suite."""
    suite, scenario = f.ours["suite"], f.ours.get("scenario")
    verdicts = []
    for path, result in results:
        entry = (result.get("success_rate") or {}).get(suite)
        if not entry or (scenario and result["scenario"]["name"] != scenario):
            continue
        k, n = entry["successes"], entry["trials"]
        low, high = wilson_interval(k, n)
        ours = f"{100 * k / n:.1f}% ({k}/{n}, 95% {100 * low:.1f}-{100 * high:.1f})"
        label = f"{result['target']['name']} ({path.rsplit('/', 1)[-1]})"
        untrained = _untrained_policy(result, f.ours.get("policy"))
        if untrained:
            verdicts.append(Verdict(f, label, ours, NOT_COMPARABLE, untrained))
        else:
            verdict, why = _two_sided(f, 100 * low, 100 * high)
            verdicts.append(Verdict(f, label, ours, verdict, f"95% Wilson interval against {f.value_text()}: {why}"))
    if not verdicts:
        verdicts.append(Verdict(f, "-", "-", NOT_COMPARABLE, f"no result with a {suite} success rate given"))
    return verdicts


def verdicts(results: list[tuple[str, dict]], figures: list[Figure]) -> list[Verdict]:
    """One verdict per published figure and result of its scenario (one 'not comparable' when none)."""
    grouped = columns(results)
    out = []
    for f in figures:
        if f.not_comparable:
            out.append(Verdict(f, "-", "-", NOT_COMPARABLE, f.not_comparable))
        elif f.metric == "success_rate":
            out += judge_success(f, results)
        elif f.ours["scenario"] not in grouped:
            out.append(Verdict(f, "-", "-", NOT_COMPARABLE, f"no result of scenario {f.ours['scenario']} given"))
        else:
            out += [judge(f, col) for col in grouped[f.ours["scenario"]]]
    return out


VERDICT_HEADERS = ("published figure", "theirs", "covers", "ours on", "ours", "verdict", "why")


def verdict_rows(items: list[Verdict]) -> list[list[str]]:
    def covers(f):
        batch = f.covers["batch"]
        return f"{f.covers['what']}; {_where_theirs(f)}" + (f", batch {batch}" if _stated(batch) else "")

    return [
        [v.figure.label, v.figure.value_text(), covers(v.figure), v.column, v.ours, v.verdict, v.why] for v in items
    ]


def card_verdicts(scenario: str, cols: list[Column], figures: list[Figure]) -> tuple[list, list]:
    """(headers, rows) of the published figures of one scenario: a row per figure, per result (card) our figure
    and its verdict (`judge`, as in the verdict table)."""
    mine = [f for f in figures if (f.ours or {}).get("scenario") == scenario and not f.not_comparable]
    headers = ["published figure", "theirs"] + [f"{col.label}: verdict (ours)" for col in cols]
    rows = []
    for f in mine:
        cells = [judge(f, col) for col in cols]
        rows.append([f.label, f.value_text()] + [f"{v.verdict} ({v.ours})" for v in cells])
    return headers, rows


PER_CARD_TITLE = (
    "per card: samples/s [95% interval] xN repeats, speedup over the card's first rung, % of the card's kernel "
    "floor, MFU, peak GiB, the share of the step spent waiting for data"
)


def _per_card_part(scenario: str, cols: list[Column], figures: list[Figure] | None, fmt: str) -> str:
    heading = "### " if fmt == "github" else ""
    headers, rows = comparison_table(scenario, cols, per_card=True)
    text = f"{heading}{scenario}: {PER_CARD_TITLE}\n\n" + tabulate(
        rows, headers=headers, tablefmt=fmt, disable_numparse=True
    )
    text += "\n\n" + "\n".join(
        f"- {col.label}: {_where_ours(col)}, {commit_text(col.result)}, {host_text(col.result)}" for col in cols
    )
    if len({col.result["provenance"].get("git_sha") for col in cols}) > 1:
        text += "\n\nThe columns are runs of different commits: set side by side, they compare the code as well as the cards."
    headers, rows = card_verdicts(scenario, cols, figures or [])
    if rows:
        text += f"\n\nPublished figures of {scenario}, per card:\n\n"
        text += tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)
    return text


def render(
    results: list[tuple[str, dict]], figures: list[Figure] | None, fmt: str = "simple", per_card: bool = False
) -> str:
    """All comparison tables, then (with figures) the verdicts; tabulate format `fmt`. With `per_card`, each
    scenario's table has a column group per card (CARD_GROUP) and its published figures' verdicts per card."""
    parts = []
    heading = "### " if fmt == "github" else ""
    for scenario, cols in columns(results).items():
        if per_card:
            parts.append(_per_card_part(scenario, cols, figures, fmt))
            continue
        headers, rows = comparison_table(scenario, cols, figures)
        parts.append(
            f"{heading}{scenario}: samples/s and speedup over each target's own baseline rung\n\n"
            + tabulate(rows, headers=headers, tablefmt=fmt, disable_numparse=True)
        )
    if figures is not None and not per_card:
        # Verdicts first, then what could not be compared
        items = sorted(verdicts(results, figures), key=lambda v: v.verdict == NOT_COMPARABLE)
        parts.append(
            f"{heading}Published figures\n\n"
            + tabulate(verdict_rows(items), headers=VERDICT_HEADERS, tablefmt=fmt, disable_numparse=True)
        )
    return "\n\n".join(parts)


def comparison_csv(results: list[tuple[str, dict]], figures: list[Figure] | None) -> str:
    """Long format: one row per scenario, rung and result, with the intervals over repeats where there are any."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        ["scenario", "rung", "target", "result", "status", "samples_per_s", "samples_per_s_low", "samples_per_s_high",
         "repeats", "speedup_vs_own_baseline", "speedup_low", "speedup_high", "same_run_as_baseline", "published"]
    )  # fmt: skip
    for scenario, cols in columns(results).items():
        first = cols[0].result["rungs"][0]["name"] if cols[0].result["rungs"] else None
        for col in cols:
            for rec in col.result["rungs"]:
                ok = rec["status"] == "ok"
                s = speedup(col.result, rec["name"])
                rate_interval = rec.get("samples_per_s_interval") or ["", ""]
                s_interval = speedup_interval(col.result, rec["name"]) or ("", "")
                base = _baseline_rung(col.result)
                w.writerow(
                    [
                        scenario,
                        rec["name"],
                        col.label,
                        col.path,
                        rec["status"],
                        f"{rec['samples_per_s']:.4f}" if ok else "",
                        *(f"{v:.4f}" if v != "" else "" for v in rate_interval),
                        len(ok_repeats(rec)) if ok else "",
                        "" if s is None else f"{s:.4f}",
                        *(f"{v:.4f}" if v != "" else "" for v in s_interval),
                        "" if s is None else str(same_run(rec, base)).lower(),
                        _published_cell(figures or [], scenario, rec["name"], first),
                    ]
                )
    return buf.getvalue()


def verdicts_csv(results: list[tuple[str, dict]], figures: list[Figure]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(
        [
            "figure",
            "label",
            "source",
            "metric",
            "unit",
            "published",
            "tolerance",
            "covers",
            "result",
            "ours",
            "verdict",
            "why",
        ]
    )
    for v in verdicts(results, figures):
        f = v.figure
        w.writerow(
            [
                f.id,
                f.label,
                f.source,
                f.metric,
                f.unit,
                f.value_text(),
                str(f.tolerance),
                f.covers["what"],
                v.column,
                v.ours,
                v.verdict,
                v.why,
            ]
        )
    return buf.getvalue()
