"""`vlabench train-seeds`: trained rungs judged over training seeds.

A train-ladder judges each rung's policy against the reference rung's with Fisher's test on the evaluation's trials
(harness/judge/gates.py): it sees how much two evaluations of fixed policies spread, not how much training runs of
other seeds do. Given the same ladder trained with several seeds (`vlabench train-ladder --seed N`), each seed is
one paired observation per rung: the rung's success rate minus the reference's, both trained from that seed. The
success gate over seeds is a one-sided t-test on those differences (k seeds, k - 1 degrees of freedom), their
standard error never below what the evaluations' trials alone give: it counts every source of spread, training's
and the evaluation's. FAIL when the mean drop is beyond the tolerance and significant; inconclusive when it is
beyond the tolerance but the seeds cannot tell (the note says about how many seeds would), or when the reference's
rate leaves no room for a drop beyond the tolerance; pass otherwise. With fewer than MIN_SEEDS seeds it gives no
verdict word at all ("n/a"): the figures, and that verdicts need MIN_SEEDS seeds.

The one rule over seeds: `vlabench train-seeds` (several train-ladder results) and `vlabench train-ladder --seeds N`
(one result holding every seed's runs, harness/judge/train_ladder.py) both judge with `judge_seed_runs`.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from statistics import NormalDist

from tabulate import tabulate

from .. import kinds
from ..data.fingerprint import fingerprint_difference
from ..errors import InputError
from ..stats.spread import t_cdf
from .gates import FAIL, INCONCLUSIVE, PASS

POWER = 0.8  # of the seeds-needed estimate
MIN_SEEDS = 3  # a verdict word (pass, FAIL, inconclusive) needs this many seeds a rung; fewer: NOT_JUDGED
NOT_JUDGED = "n/a"
SAME = (  # what the ladders must share to be repeats of one another (key path, what it is)
    (("scenario", "name"), "scenario"),
    (("target", "name"), "target"),
    (("train_ladder", "steps"), "steps"),
    (("train_ladder", "reference"), "reference rung"),
    (("train_ladder", "recipe"), "recipe"),
    # the evaluation's protocol (its env workers change how fast, not what)
    (("train_ladder", "eval", "suites"), "evaluated suites"),
    (("train_ladder", "eval", "tasks"), "evaluated tasks"),
    (("train_ladder", "eval", "trials"), "trials per task"),
    (("train_ladder", "eval", "seed"), "evaluation's seed"),
)


@dataclass(frozen=True)
class SeedsCheck:
    """One rung's success on one suite against the reference's, over the seeds both were trained with."""

    rung: str
    suite: str
    seeds: list[int]
    rates: list[float]  # the rung's success rate per seed
    reference_rates: list[float]
    mean_change: float  # the mean of (rate - reference rate) over the seeds, a fraction
    spread: float | None  # the standard deviation of those differences (None with one seed)
    p: float | None  # one-sided p of the t-test that the rung succeeds less
    verdict: str
    note: str


def paired_drop(
    rung: list[tuple[int, int]], reference: list[tuple[int, int]], tolerance: float, confidence: float
) -> tuple[str, float, float | None, float | None, str]:
    """The success gate over seeds from (successes, trials) per seed of the rung and of the reference, seed by
    seed: (verdict, mean change, spread of the changes, p, note)."""
    k = len(rung)
    rates = [s / n for s, n in rung]
    ref_rates = [s / n for s, n in reference]
    changes = [a - b for a, b in zip(rates, ref_rates, strict=True)]
    mean = statistics.fmean(changes)
    recorded = statistics.fmean(ref_rates)
    if k < 2:
        return NOT_JUDGED, mean, None, None, f"{too_few(k)}: how far training runs spread is unknown"
    spread = statistics.stdev(changes)
    # the evaluations' trials alone spread each difference this much: the standard error never goes below it
    trials_var = sum(p * (1 - p) / n for p, (_, n) in zip(rates + ref_rates, rung + reference, strict=True))
    se = max(spread / math.sqrt(k), math.sqrt(trials_var) / k)
    p = (0.0 if mean < 0 else 1.0) if se == 0 else t_cdf(mean / se, k - 1)
    detail = f"mean {mean * 100:+.1f} points over {k} seeds, spread {spread * 100:.1f} points, t-test p={p:.2g}"
    drop = f"{tolerance * 100:g} points"
    if k < MIN_SEEDS:
        verdict, why = NOT_JUDGED, ""
        detail = f"{too_few(k)}; {detail}"
    elif recorded <= tolerance:
        verdict, why = INCONCLUSIVE, f": the reference's {recorded:.1%} leaves no room for a drop of more than {drop}"
    elif -mean <= tolerance:
        verdict, why = PASS, ""
    elif p < 1 - confidence:
        verdict, why = FAIL, f" < {1 - confidence:.2g}: dropped by more than {drop}"
    else:
        z = NormalDist().inv_cdf(confidence) + NormalDist().inv_cdf(POWER)
        needed = max(k + 1, math.ceil((z * se * math.sqrt(k) / tolerance) ** 2) + 1)
        verdict, why = (
            INCONCLUSIVE,
            (
                f": dropped by more than {drop}, but {k} seeds cannot tell; about {needed} seeds would detect a "
                f"{tolerance * 100:g}-point drop with the spread seen, the evaluations' own at least ({POWER:.0%} power)"
            ),
        )
    return verdict, mean, spread, p, detail + why


def too_few(k: int) -> str:
    """The note of a rung judged over fewer seeds than a verdict needs."""
    return f"{NOT_JUDGED}: {k} seed{'s' if k != 1 else ''}, verdicts need {MIN_SEEDS}"


def _get(result: dict, path: tuple[str, ...]):
    for key in path:
        result = (result or {}).get(key)
    return result


def seed_runs(result: dict) -> list[tuple[int, dict[str, dict]]]:
    """A train-ladder result's runs, one per training seed, each its ok rungs by name: every seed of a
    `train-ladder --seeds N` result (train_ladder.seed_runs), else the one seed it trained with."""
    ladder = result["train_ladder"]
    if ladder.get("seed_runs"):
        return [(run["seed"], _ok(run["rungs"])) for run in ladder["seed_runs"]]
    return [(result["workload"].get("seed", 0), _ok(ladder["rungs"]))]


def check_repeats(ladders: list[tuple[str, dict]]) -> list[str]:
    """Refuse (one line) results that are not the same train-ladder trained with distinct seeds (one result per
    seed, or results of `train-ladder --seeds N` holding several); returns the warnings for what may differ
    (the scenario file's bytes, the dataset's path)."""
    for name, result in ladders:
        kinds.require(result, "train-ladder", name, "a train-ladder result (vlabench train-ladder)")
    if sum(len(seed_runs(r)) for _, r in ladders) < 2:
        raise InputError(
            "RESULT", None, "train-ladder results of two seeds or more (one per seed, or train-ladder --seeds N)",
            f"{len(ladders)} result of one seed",
        )  # fmt: skip
    first_name, first = ladders[0]
    for name, result in ladders[1:]:
        for path, what in SAME:
            if _get(result, path) != _get(first, path):
                raise InputError(
                    name, ".".join(path), f"the {what} of {first_name} ({_get(first, path)})", str(_get(result, path))
                )
    seen: dict[int, str] = {}
    for name, result in ladders:
        for seed, _ in seed_runs(result):
            if seed in seen:
                raise InputError(name, "workload.seed", f"a seed other than {seen[seed]}'s", str(seed))
            seen[seed] = name
    warnings = []
    if len({r["scenario"].get("sha256") for _, r in ladders}) > 1:
        warnings.append("the scenario file differs between the results (its sha256)")
    if len({r["train_ladder"].get("dataset") for _, r in ladders}) > 1:
        warnings.append("the results trained on datasets at different paths")
    return warnings + check_same_data(ladders)


def _trained_data(ladders: list[tuple[str, dict]]) -> list[tuple[str, str, dict]]:
    """(result, key path, the dataset its training read: train.data.data) of every ok rung of every seed."""
    out = []
    for name, result in ladders:
        for seed, rungs in seed_runs(result):
            for rung, record in rungs.items():
                data = _get(record, ("train", "data", "data"))
                if isinstance(data, dict):
                    out.append((name, f"seed {seed}, rung {rung}: train.data.data", data))
    return out


def check_same_data(ladders: list[tuple[str, dict]]) -> list[str]:
    """Refuse (one line) seeds whose rungs trained on other data: other episode or frame counts, or another
    dataset fingerprint (harness/data/fingerprint.py) where both record one; returns a warning for runs that
    record none (trained before vlabench recorded it), which then agree by their counts alone."""
    runs = _trained_data(ladders)
    if not runs:
        return []
    first_name, first_key, first = runs[0]
    counts = lambda d: (d.get("episodes"), d.get("frames"))  # noqa: E731
    for name, key, data in runs[1:]:
        if counts(data) != counts(first):
            raise InputError(
                name, key, f"the data of {first_name} ({first_key}: {first.get('episodes')} episodes, "
                f"{first.get('frames')} frames)", f"{data.get('episodes')} episodes, {data.get('frames')} frames",
            )  # fmt: skip
    fingerprinted = [(name, key, data["content"]) for name, key, data in runs if data.get("content")]
    for name, key, content in fingerprinted[1:]:
        differ = fingerprint_difference(fingerprinted[0][2], content)
        if differ:
            raise InputError(
                name, f"{key}.content", f"the dataset of {fingerprinted[0][0]} ({fingerprinted[0][1]}, sha256 "
                f"{fingerprinted[0][2]['sha256'][:12]})", f"sha256 {content['sha256'][:12]}: it differs in {differ}",
            )  # fmt: skip
    unrecorded = sorted({name for name, _, data in runs if not data.get("content")})
    if not unrecorded:
        return []
    return [
        f"{', '.join(unrecorded)} record{'s' if len(unrecorded) == 1 else ''} no fingerprint of the dataset (trained "
        f"before vlabench recorded one): the seeds' data agree in {first.get('episodes')} episodes and "
        f"{first.get('frames')} frames only"
    ]


def _ok(records: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in records if r.get("status") == "ok"}


def _suite_check(
    runs: list[tuple[int, dict[str, dict]]], rung: str, reference: str, suite: str, tolerance: float, confidence: float
) -> SeedsCheck | None:
    """One rung on one suite over the seeds where both it and the reference were evaluated on it."""
    pairs = [
        (seed, recs[rung]["success_rate"][suite], recs[reference]["success_rate"][suite])
        for seed, recs in runs
        if suite in (recs.get(rung, {}).get("success_rate") or {})
        and suite in (recs.get(reference, {}).get("success_rate") or {})
    ]
    if not pairs:
        return None
    counts = [(c["successes"], c["trials"]) for _, c, _ in pairs]
    ref_counts = [(b["successes"], b["trials"]) for _, _, b in pairs]
    verdict, mean, spread, p, note = paired_drop(counts, ref_counts, tolerance, confidence)
    rates, ref_rates = [s / n for s, n in counts], [s / n for s, n in ref_counts]
    return SeedsCheck(rung, suite, [seed for seed, _, _ in pairs], rates, ref_rates, mean, spread, p, verdict, note)


def judge_seed_runs(
    runs: list[tuple[int, dict[str, dict]]], reference: str, tolerance: float, confidence: float = 0.95
) -> list[SeedsCheck]:
    """The success gate over seeds (paired_drop) of every rung other than the reference, per suite the reference
    was evaluated on, over the seeds where both trained and were evaluated. `runs`: (seed, ok rungs by name)."""
    rungs = list(dict.fromkeys(name for _, recs in runs for name in recs if name != reference))
    suites = list(dict.fromkeys(s for _, recs in runs for s in (recs.get(reference, {}).get("success_rate") or {})))
    checks = []
    for rung in rungs:
        for suite in (s for s in suites if "/" not in s):  # suites; their tasks have too few trials a seed
            check = _suite_check(runs, rung, reference, suite, tolerance, confidence)
            if check:
                checks.append(check)
    return checks


def all_runs(ladders: list[tuple[str, dict]]) -> list[tuple[int, dict[str, dict]]]:
    return [run for _, result in ladders for run in seed_runs(result)]


def judge_seeds(ladders: list[tuple[str, dict]], tolerance: float, confidence: float) -> list[SeedsCheck]:
    """Every seed of the results (checked by check_repeats), judged by judge_seed_runs."""
    return judge_seed_runs(all_runs(ladders), ladders[0][1]["train_ladder"]["reference"], tolerance, confidence)


def _percents(rates: list[float]) -> str:
    return ", ".join(f"{r:.0%}" for r in rates)


def seeds_table(ladders: list[tuple[str, dict]], checks: list[SeedsCheck], tolerance: float) -> str:
    """Per rung: its speedup and success per seed, and the success gate over the seeds (one row per suite)."""
    first = ladders[0][1]
    reference, ev = first["train_ladder"]["reference"], first["train_ladder"].get("eval") or {}
    runs = all_runs(ladders)
    title = (
        f"{first['scenario']['name']} on {first['target']['name']}: {first['train_ladder']['steps']} steps per rung, "
        f"seeds {', '.join(str(seed) for seed, _ in runs)}; {', '.join(ev.get('suites', []))}, {ev.get('trials')} "
        f"trials per task and seed; against {reference}"
    )
    records, suites = [recs for _, recs in runs], ev.get("suites", [])
    rows = []
    for suite in suites if len(suites) > 1 else suites[:1] or [None]:  # the reference's rates, a row per suite
        reference_rates = [
            recs[reference]["success_rate"][suite]["rate"]
            for recs in records
            if suite in (recs.get(reference, {}).get("success_rate") or {})
        ]
        rows.append([reference if len(suites) < 2 else f"{reference} {suite}", sum(reference in recs for recs in records),
                     "reference", _percents(reference_rates), "-", "reference"])  # fmt: skip
    for check in checks:
        speedups = [
            recs[check.rung]["train"]["samples_per_s"] / recs[reference]["train"]["samples_per_s"]
            for recs in records
            if check.rung in recs and reference in recs
        ]
        changes = ", ".join(f"{(a - b) * 100:+.0f}" for a, b in zip(check.rates, check.reference_rates, strict=True))
        rows.append([
            check.rung if len(suites) < 2 else f"{check.rung} {check.suite}",
            len(check.seeds),
            ", ".join(f"{x:.2f}x" for x in speedups),
            _percents(check.rates),
            changes,
            f"{check.verdict} ({check.note})",
        ])  # fmt: skip
    headers = ["rung", "seeds", "speedup per seed", "success per seed", "change per seed (points)",
               "success gate over seeds"]  # fmt: skip
    rule = (
        f"success gate over seeds: per seed the rung's rate minus the reference's; FAIL when their mean is more than "
        f"{tolerance * 100:g} points below zero and a one-sided t-test over the seeds says so (its standard error "
        f"never below the evaluations' own); inconclusive when the seeds cannot tell; no verdict (n/a) with fewer "
        f"than {MIN_SEEDS} seeds"
    )
    return "\n".join([title, tabulate(rows, headers=headers, disable_numparse=True), rule])
