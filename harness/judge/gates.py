"""Regression gates: a CURRENT result against a RECORDED baseline (docs/gates.md states the rules).

Per rung present in both:
- throughput: samples over the total time of all timed steps (a slowed tail counts), the ratio's interval
  over repeats where a side has them (the spread between processes), over steps of two single runs
  otherwise; FAIL when slower than the tolerance and outside the interval, inconclusive when only the first
  holds or when the machine probe measured a slower machine that explains the slowdown (harness/stats/spread.py);
- peak memory fails when larger than its tolerance; loss parity when it no longer passes;
- a rung ok in the baseline that is missing or failed now is a regression.
Per evaluation suite, success counts are compared with Fisher's exact test: FAIL when the rate dropped by more
than the tolerance and the drop is significant at the gate's confidence, inconclusive when it dropped that
far but the trials cannot tell. Differences in target, software, workload or rung options do not stop the
gate; they are reported as warnings.

The recorded baseline of a scenario on a target is results/<target>/<scenario>.json (`vlabench record`); the
baselines it replaced are kept, numbered, under results/<target>/history/<scenario>/.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tabulate import tabulate

from .. import kinds
from ..errors import InputError
from ..machine.probe import same_kernel, whole_probe_rate
from ..outputs import file_name, inside
from ..results import HISTORY, load_result, write_text_atomic
from ..scenario import recorded_workload, workload_keys
from ..stats.batch_sizes import BatchSizes
from ..stats.rates import fisher_lower_p, trials_to_detect
from ..stats.repeats import ok_repeats
from ..stats.spread import (
    SLOWER,
    UNRESOLVED,
    WITHIN_NOISE,
    Ratio,
    repeats_ratio,
    repeats_to_resolve,
    resolvable_change,
    slowdown,
    steps_ratio,
    whole_rate,
    with_process_spread,
)
from ..train.convergence import DEFAULT_TOLERANCE, check_convergence

PASS, FAIL, NOT_GATED, INCONCLUSIVE = "pass", "FAIL", "not gated", "inconclusive"
# 2 is unusable input (the CLI's); 3: no regression found, but none ruled out (a slowdown within the noise or that
# the machine itself may explain, a pass whose interval reaches beyond twice the tolerance)
EXIT_PASS, EXIT_REGRESSION, EXIT_INCONCLUSIVE = 0, 1, 3
SOFTWARE_KEYS = ("python", "torch", "cuda", "triton", "torch_npu")
# A machine whose probe ran more than this much slower in the current rung than in the baseline's cannot time
# anything: the rung's threads can suffer far more than the probe (an A/A on 2 CPU threads under a busy loop read
# the rung 98.7% slower), so no throughput verdict but inconclusive stands on it.
UNFIT_SLOWDOWN = 0.20
# A rung whose repeats spread more than this (sd of the log) between processes, on either side, ran on a machine
# too noisy to judge the tolerance: its runs minutes apart drift by as much as its processes differ, which no
# interval over one run's repeats holds (a same-code pair of 8 repeats a side whose repeats spread 16% and 11% read
# -18.7% [-29.8%, -6.0%] on a shared 2-core machine), so a slowdown there is inconclusive, never FAIL.
UNFIT_SPREAD = 0.10
# The spread between processes (sd of the log of a run's whole-run rate from one process to the next) assumed for
# two single runs of a rung that records none (a rung with repeats records its own `process_spread`), by backend:
# docs/gates.md says where each figure was measured.
DEFAULT_PROCESS_SPREAD = {"cpu": 0.05, "cuda": 0.03, "npu": 0.03}
# The least spread a rung's repeats are judged with, by backend: two runs made minutes apart also differ by the
# machine's drift between them, which repeats run back to back do not show. On a 2-core CPU machine, runs pinned to
# one thread spread 1-4% within a run yet drifted 2.7% (sd) between runs, and an A/A of two such runs read -5.2%
# [-9.0%, -1.3%] (docs/gates.md, "Twenty tries of the default path").
REPEATS_SPREAD_FLOOR = {"cpu": 0.03}
# The keys of a result's `workload` block that do not make two results measure different things, each with why;
# every other key, a field added to the workload included, is compared and a difference is a warning. The warm-up
# and timed steps stay compared: nothing else in the gate looks at them, and another warm-up moves compile and
# autotuning work into or out of the timed steps.
WORKLOAD_NOT_COMPARED = {
    "flops_per_sample": "derived from the other keys by the family's FLOP count: a new count changes MFU, not what is "
    "timed, and a changed shape shows as its own key",
}
WORKLOAD_KEYS = workload_keys(WORKLOAD_NOT_COMPARED)


@dataclass(frozen=True)
class Limits:
    tolerance: float = 0.05  # throughput: fraction slower that may pass
    memory_tolerance: float = 0.05  # peak memory: fraction larger that may pass
    success_tolerance: float = 0.05  # success rate: absolute drop (0.05 = 5 points)
    confidence: float = 0.95  # of the throughput interval and the one-sided Wilson bound

    def describe(self) -> str:
        return (
            f"throughput tolerance {self.tolerance:.0%}, memory {self.memory_tolerance:.0%}, success rate "
            f"{self.success_tolerance * 100:g} points, {self.confidence:.0%} confidence"
        )


@dataclass
class Check:
    subject: str  # a rung name, or "suite <name>"
    check: str  # status | throughput | peak memory | loss parity | success rate | convergence
    verdict: str  # pass | FAIL | inconclusive | not gated
    baseline: str = ""
    current: str = ""
    change: str = ""
    note: str = ""

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class GateReport:
    current: str
    baseline: str
    limits: Limits
    warnings: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    what: str | None = None  # what the checks measure, where it is not a ladder's throughput (the legend's text)

    @property
    def regressions(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == FAIL]

    @property
    def inconclusive(self) -> list[Check]:
        return [c for c in self.checks if c.verdict == INCONCLUSIVE]

    @property
    def exit_code(self) -> int:
        if self.regressions:
            return EXIT_REGRESSION
        return EXIT_INCONCLUSIVE if self.inconclusive else EXIT_PASS

    @property
    def verdict(self) -> str:
        return "regression" if self.regressions else "inconclusive" if self.inconclusive else "pass"

    def summary(self) -> str:
        gated = [c for c in self.checks if c.verdict != NOT_GATED]
        if self.regressions:
            failed = "; ".join(f"{c.subject} {c.check} ({c.change or c.current})" for c in self.regressions)
            return f"REGRESSION: {len(self.regressions)} of {len(gated)} checks failed: {failed}"
        if self.inconclusive:
            which = "; ".join(f"{c.subject} {c.check}: {c.note}" for c in self.inconclusive)
            return f"INCONCLUSIVE: {len(self.inconclusive)} of {len(gated)} checks could not decide: {which}"
        return f"PASS: {len(gated)} checks passed" + (f", {len(self.warnings)} warnings" if self.warnings else "")

    def to_dict(self) -> dict:
        return {
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "current": self.current,
            "baseline": self.baseline,
            "limits": dataclasses.asdict(self.limits),
            "warnings": self.warnings,
            "checks": [dataclasses.asdict(c) for c in self.checks],
        }

    def table(self, fmt: str = "simple") -> str:
        rows = [[c.subject, c.check, c.verdict, c.baseline, c.current, c.change, c.note] for c in self.checks]
        return tabulate(
            rows,
            headers=("rung", "check", "verdict", "baseline", "current", "change", "note"),
            tablefmt=fmt,
            disable_numparse=True,
        )

    def legend(self) -> str:
        if self.what:
            return self.what
        return (
            "throughput: samples over the total time of all timed steps, change with its "
            f"{self.limits.confidence:.0%} interval (t over repeats, or a bootstrap of the steps of single runs); "
            "the median's change in the note"
        )

    def text(self) -> str:
        lines = [f"gate: {self.current} against {self.baseline} ({self.limits.describe()})", self.legend()]
        lines += [f"WARNING: {w}" for w in self.warnings]
        return "\n".join([*lines, "", self.table(), "", self.summary()])

    def markdown(self) -> str:
        """For CI job summaries (e.g. appended to $GITHUB_STEP_SUMMARY)."""
        verdict = {"regression": "REGRESSION", "inconclusive": "INCONCLUSIVE"}.get(self.verdict, "pass")
        lines = [
            f"### vlabench gate: {verdict}",
            "",
            f"`{self.current}` against `{self.baseline}` ({self.limits.describe()})",
            "",
        ]
        lines += [f"> **Warning:** {w}  " for w in self.warnings]
        if self.warnings:
            lines.append("")
        return "\n".join([*lines, self.table("github"), "", self.legend(), "", f"**{self.summary()}**"]) + "\n"


def gate_files(current_path, baseline_path, limits: Limits = Limits(), rungs: list[str] | None = None) -> GateReport:
    """Load both result files (a one-line InputError if either is unusable) and gate them."""
    return gate(
        load_result(current_path), load_result(baseline_path), limits, rungs, str(current_path), str(baseline_path)
    )


def gate(
    current: dict,
    baseline: dict,
    limits: Limits = Limits(),
    rungs: list[str] | None = None,
    current_name: str = "CURRENT",
    baseline_name: str = "BASELINE",
) -> GateReport:
    if current["scenario"]["name"] != baseline["scenario"]["name"]:
        raise InputError(
            current_name,
            "scenario.name",
            f"a result of scenario {baseline['scenario']['name']!r} (the baseline's)",
            repr(current["scenario"]["name"]),
        )
    own = next((k.gate for k in (kinds.find(current), kinds.find(baseline)) if k is not None and k.gate), None)
    if own is not None:  # a kind with a gate of its own (harness/kinds: a train-ladder's)
        return own(current, baseline, limits, rungs, current_name, baseline_name)
    base_rungs = {r["name"]: r for r in baseline["rungs"]}
    cur_rungs = {r["name"]: r for r in current["rungs"]}
    base_rates = _success_rates(baseline)
    cur_rates = _success_rates(current)
    if rungs is not None:
        unknown = [r for r in rungs if r not in base_rungs and r not in cur_rungs]
        if unknown:
            raise InputError(
                baseline_name, "rungs", "rung names of the results (" + ", ".join(base_rungs) + ")", ", ".join(unknown)
            )
    names = [n for n in [*base_rungs, *(n for n in cur_rungs if n not in base_rungs)] if rungs is None or n in rungs]
    if not any(base_rungs[n]["status"] == "ok" for n in names if n in base_rungs) and not base_rates:
        raise InputError(baseline_name, "rungs", "an ok rung or a success rate to gate against", "none")

    report = GateReport(current_name, baseline_name, limits, warnings=_provenance_warnings(current, baseline))
    for name in names:
        report.checks += _rung_checks(
            name, base_rungs.get(name), cur_rungs.get(name), current, baseline, limits, report.warnings
        )
    for suite, base in base_rates.items():
        report.checks.append(success_check(suite, base, cur_rates.get(suite), limits))
    for suite in cur_rates:
        if suite not in base_rates:
            report.checks.append(
                Check(
                    f"suite {suite}",
                    "success rate",
                    NOT_GATED,
                    "",
                    _rate_text(cur_rates[suite]),
                    note="not in the baseline",
                )
            )
    return report


def gate_train_ladders(
    current: dict,
    baseline: dict,
    limits: Limits,
    rungs: list[str] | None,
    current_name: str,
    baseline_name: str,
) -> GateReport:
    """Two train-ladder results (`vlabench train-ladder`), rung by rung: the success gate per suite and the
    convergence check (the rung's smoothed final loss within the ladder's tolerance of the recorded run's)."""
    for name, result in ((current_name, current), (baseline_name, baseline)):
        kinds.require(result, "train-ladder", name, "a train-ladder result, as the other file is")
    base = {r["name"]: r for r in baseline["train_ladder"]["rungs"]}
    cur = {r["name"]: r for r in current["train_ladder"]["rungs"]}
    names = [n for n in base if rungs is None or n in rungs]
    if not any(base[n]["status"] == "ok" for n in names):
        raise InputError(baseline_name, "train_ladder.rungs", "an ok rung to gate against", "none")
    tolerance = (baseline.get("train_ladder") or {}).get("convergence_tolerance", DEFAULT_TOLERANCE)
    report = GateReport(current_name, baseline_name, limits, warnings=_provenance_warnings(current, baseline))
    report.what = (
        "success rate: Fisher's exact test of the current successes against the recorded ones, per suite and task; "
        "each side is one training run per rung, and the test counts the evaluations' trials, not how far training "
        "runs of other seeds spread (`vlabench train-seeds` judges over seeds); convergence: the smoothed final loss"
    )
    for name in names:
        b, c = base[name], cur.get(name)
        if b["status"] != "ok":
            continue
        if c is None or c["status"] != "ok":
            got = "missing" if c is None else f"{c['status']} ({c.get('stage')}: {c.get('error', '')[:80]})"
            report.checks.append(Check(name, "status", FAIL, "ok", got))
            continue
        report.checks += _rung_success_checks(name, b, c, limits)
        if c.get("train") and b.get("train"):
            conv = check_convergence(c, b, tolerance, names=(name, name)).as_dict()
            verdict = PASS if conv["passed"] else FAIL
            change = "-" if conv["rel_diff"] is None else f"{conv['rel_diff']:+.1%}"
            note = f"smoothed final loss over the last {conv['window']} steps, |diff| <= {tolerance:.0%}"
            report.checks.append(
                Check(name, "convergence", verdict, _loss(conv["reference_loss"]), _loss(conv["loss"]), change, note)
            )
    return report


def _changes(key: str, before, after) -> list[str]:
    """`key before -> after`, or one such line per differing key of two mappings (`data.dataset a -> b`)."""
    if isinstance(before, dict) and isinstance(after, dict):
        keys = dict.fromkeys([*before, *after])
        return [line for k in keys for line in _changes(f"{key}.{k}", before.get(k), after.get(k))]
    return [] if before == after else [f"{key} {_value_text(before)} -> {_value_text(after)}"]


def _value_text(value) -> str:
    if isinstance(value, dict) and "dataset" in value:  # a workload's `data`: the dataset it reads
        return f"dataset {value['dataset']}"
    return str(value)


def _rung_success_checks(name: str, base: dict, cur: dict, limits: Limits) -> list[Check]:
    """A trained rung's success gate: one check per suite (and task) the recorded rung was evaluated on. A suite
    the current rung lacks FAILs once, with its evaluation's error where the ladder recorded one (its tasks are
    not listed again)."""
    rates, errors, checks = cur.get("success_rate") or {}, cur.get("suite_errors") or {}, []
    for key, entry in (base.get("success_rate") or {}).items():
        suite = key.split("/")[0]
        if "/" in key and suite not in rates:
            continue
        check = success_check(key, entry, rates.get(key), limits)
        check.subject = f"{name} {key}"
        if key in errors:
            check.note = f"its evaluation failed: {errors[key][:100]}"
        checks.append(check)
    return checks


def _loss(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _provenance_warnings(current: dict, baseline: dict) -> list[str]:
    """Why the two results may not be like for like: hardware, software, workload, scenario file."""
    warnings = []
    ct, bt = current["target"], baseline["target"]
    where = (
        f"{bt['name']} ({bt.get('device_name')} x{bt.get('device_count')})",
        f"{ct['name']} ({ct.get('device_name')} x{ct.get('device_count')})",
    )
    if where[0] != where[1]:
        warnings.append(
            f"different hardware: the baseline ran on {where[0]}, the current result on {where[1]}; "
            "throughput and memory verdicts compare unlike machines"
        )
    cp, bp = current["provenance"], baseline["provenance"]
    software = [f"{k} {bp.get(k)} -> {cp.get(k)}" for k in SOFTWARE_KEYS if bp.get(k) != cp.get(k)]
    if software:
        warnings.append("different software: " + ", ".join(software))
    cw, bw = recorded_workload(current["workload"]), recorded_workload(baseline["workload"])
    workload = [change for k in WORKLOAD_KEYS for change in _changes(k, bw.get(k), cw.get(k))]
    if baseline.get("nproc", 1) != current.get("nproc", 1):
        workload.append(f"processes per rung {baseline.get('nproc', 1)} -> {current.get('nproc', 1)}")
    if workload:
        warnings.append("different workload: " + ", ".join(workload))
    if current["scenario"].get("sha256") != baseline["scenario"].get("sha256"):
        warnings.append("the scenario file changed since the baseline (its sha256 differs)")
    for label, result in (("baseline", baseline), ("current result", current)):
        if result["provenance"].get("dirty"):
            warnings.append(f"the {label} was measured with uncommitted changes")
        sabotaged = sabotaged_rungs(result)
        if sabotaged:
            warnings.append(
                f"the {label} was measured with the test-only VLABENCH_TEST_TRAIN_SABOTAGE ({', '.join(sabotaged)})"
            )
        slowed = [r["name"] for r in result["rungs"] if r.get("test_slowdown")]
        if slowed:
            warnings.append(f"the {label} was measured with the test-only VLABENCH_TEST_SLOWDOWN ({', '.join(slowed)})")
        if (result.get("policy") or {}).get("test_sabotage"):
            warnings.append(f"the {label} was measured with the test-only VLABENCH_TEST_EXPERT_SABOTAGE")
    return warnings


def sabotaged_rungs(result: dict) -> list[str]:
    """Rungs trained with the test-only VLABENCH_TEST_TRAIN_SABOTAGE: a ladder's, or a train-ladder's."""
    trained = (result.get("train_ladder") or {}).get("rungs", [])
    return [r["name"] for r in result["rungs"] if r.get("test_train_sabotage")] + [
        r["name"] for r in trained if (r.get("train") or {}).get("test_train_sabotage")
    ]


def _rung_checks(
    name: str, base: dict | None, cur: dict | None, current: dict, baseline: dict, limits: Limits, warnings: list[str]
) -> list[Check]:
    if base is None:
        return [Check(name, "status", NOT_GATED, "-", cur["status"], note="not in the baseline")]
    if base["status"] != "ok":
        return [
            Check(
                name,
                "status",
                NOT_GATED,
                base["status"],
                cur["status"] if cur else "missing",
                note=f"nothing to gate against: the baseline rung is {base['status']}",
            )
        ]
    if cur is None or cur["status"] != "ok":
        status = cur["status"] if cur else "missing"
        reason = (cur or {}).get("reason") or "the rung was not run"
        return [Check(name, "status", FAIL, "ok", status, note=reason)]
    if cur.get("options") != base.get("options"):
        changed = sorted(
            k
            for k in {**(base.get("options") or {}), **(cur.get("options") or {})}
            if (base.get("options") or {}).get(k) != (cur.get("options") or {}).get(k)
        )
        warnings.append(f"rung {name}: options differ from the baseline's ({', '.join(changed)})")
    base_batch, cur_batch = BatchSizes.of_result(baseline).global_, BatchSizes.of_result(current).global_
    floor = REPEATS_SPREAD_FLOOR.get((baseline.get("target") or {}).get("backend") or "cpu", 0.0)
    return [
        _throughput_check(name, base, cur, base_batch, cur_batch, limits, process_spread(base, cur, baseline), floor),
        _memory_check(name, base, cur, limits),
        _parity_check(name, base, cur),
    ]


def _throughput_check(
    name: str,
    base: dict,
    cur: dict,
    base_batch: int,
    cur_batch: int,
    limits: Limits,
    spread: tuple[float, str],
    floor: float = 0.0,
) -> Check:
    """The rule of docs/gates.md: the whole step-time distribution (samples over the total time of all timed
    steps), an interval over repeats where either side has them (over the steps of two single runs otherwise,
    widened by the spread between processes `spread`), FAIL when slower than the tolerance and outside that
    interval; the machine probe may turn a FAIL into inconclusive only when it measured the machine slower and
    only by as much as it slowed, and a machine more than UNFIT_SLOWDOWN slower is unfit to decide a slowdown."""
    ratio = throughput_ratio(base, cur, base_batch, cur_batch, limits.confidence, spread[0], floor)
    median_change = cur["samples_per_s"] / cur_batch / (base["samples_per_s"] / base_batch) - 1
    check = Check(
        name,
        "throughput",
        PASS,
        f"{_whole_rate(base, base_batch):.2f}/s",
        f"{_whole_rate(cur, cur_batch):.2f}/s",
        ratio.text(),
        f"{_evidence(base, cur, ratio, spread)}; median {median_change:+.1%}",
    )
    machine = machine_ratio(base, cur, limits.confidence)
    slower_machine = machine is not None and machine.high < 1
    if machine is not None and (slower_machine or machine.low > 1):
        check.note += f"; machine {machine.text()} (probe)"
    verdict, tol = slowdown(ratio, limits.tolerance), limits.tolerance
    if verdict in (SLOWER, WITHIN_NOISE) and machine is not None and machine.value < 1 - UNFIT_SLOWDOWN:
        check.verdict = INCONCLUSIVE
        check.note += (
            f"; machine unfit: its probe ran {1 - machine.value:.0%} slower than in the baseline (beyond the "
            f"{UNFIT_SLOWDOWN:.0%} bound), so it cannot time the rung: run both again on a quiet machine"
        )
    elif verdict in (SLOWER, WITHIN_NOISE) and (recorded_spread(base, cur) or 0.0) > UNFIT_SPREAD:
        check.verdict = INCONCLUSIVE
        check.note += (
            f"; machine unfit: the rung's repeats spread {recorded_spread(base, cur):.0%} between processes (beyond "
            f"the {UNFIT_SPREAD:.0%} bound), so runs minutes apart can differ as much: run both again on a quiet "
            "machine, or `vlabench ab`"
        )
    elif verdict == SLOWER and slower_machine and _machine_explains(ratio, machine, tol):
        check.verdict = INCONCLUSIVE
        check.note += (
            f"; slower by more than {tol:.0%}, but the machine itself was {1 - machine.value:.0%} slower "
            f"and the rung is within {tol:.0%} beyond that: run both again on a quiet machine, or `vlabench ab`"
        )
    elif verdict == SLOWER:
        check.verdict = FAIL
        check.note += f"; slower by more than {tol:.0%} and outside the interval"
        if slower_machine:
            check.note += f" (beyond the machine's own {1 - machine.value:.0%} slowdown)"
    elif verdict == WITHIN_NOISE:
        check.verdict = INCONCLUSIVE
        check.note += (
            f"; slower by more than {tol:.0%}, but within the interval: "
            f"{_repeats_advice(ratio, limits.confidence, spread[0])} "
            "or `vlabench ab`"
        )
    elif machine is not None and machine.low > 1 and _machine_hides(ratio, machine, tol):
        check.verdict = INCONCLUSIVE
        check.note += (
            f"; but the machine itself ran {machine.value - 1:.0%} faster, and beyond that the rung is "
            f"{1 - ratio.value / machine.value:.0%} slower: a pass here could hide a regression; run both again on "
            "a quiet machine, or `vlabench ab`"
        )
    elif verdict == UNRESOLVED:
        check.verdict = INCONCLUSIVE
        check.note += (
            f"; within {tol:.0%} by the point estimate, but the interval reaches {1 - ratio.low:.0%} slower, beyond "
            f"twice the tolerance, so a pass could hide a regression: "
            f"{_repeats_advice(ratio, limits.confidence, spread[0], 2 * tol)} or `vlabench ab`"
        )
    elif ratio.low > 1:
        check.note += "; faster, outside the interval"
    return check


def _machine_hides(ratio: Ratio, machine: Ratio, tolerance: float) -> bool:
    """Whether a machine measured faster than in the baseline may hide a regression behind a pass: the rung's own
    change (the ratio over the machine's) is more than twice the tolerance slower, the mirror of the bound past
    which a slower machine never excuses a FAIL."""
    return ratio.value / machine.value < 1 - 2 * tolerance


def _repeats_advice(ratio: Ratio, confidence: float, single_run_spread: float, change: float | None = None) -> str:
    """How many repeats a side would resolve a slowdown of `change` (default: the size seen): the spread between
    processes is the one the interval was made with (from the repeats, or the single runs' assumed spread)."""
    spread = ratio.spread if ratio.spread is not None else single_run_spread
    change = 1 - ratio.value if change is None else change
    n = repeats_to_resolve(spread, change, confidence) if spread > 0 else None
    if n is None:
        return "more repeats (--repeats)"
    return (
        f"at a {spread:.1%} spread between processes, about {n} repeats a side resolve a {change:.0%} slowdown "
        f"(80% power; `vlabench run --repeats {n}` for both)"
    )


def _machine_explains(ratio: Ratio, machine: Ratio, tolerance: float) -> bool:
    """Whether the machine's measured slowdown leaves the rung within the tolerance: the rung's own change is
    the ratio over the machine's; a regression of more than twice the tolerance beyond it always fails."""
    own = ratio.value / machine.value
    return own >= 1 - 2 * tolerance and ratio.high / machine.value >= 1 - tolerance


def resolution_note(result: dict, limits: Limits = Limits()) -> str | None:
    """What a gate of this run against another like it can resolve: the widest spread between processes its
    rungs' repeats show (at least the backend's floor), the slowdown that spread lets the same number of repeats
    a side find (80% power), and the repeats a side that find twice the tolerance. None without repeats."""
    measured = [
        (r["name"], r["process_spread"], len(ok_repeats(r)))
        for r in result["rungs"]
        if r.get("process_spread") is not None
    ]
    if not measured:
        return None
    name, widest, n = max(measured, key=lambda m: m[1])
    floor = REPEATS_SPREAD_FLOOR.get((result.get("target") or {}).get("backend") or "cpu", 0.0)
    spread = max(widest, floor)
    target = 2 * limits.tolerance
    need = repeats_to_resolve(spread, target, limits.confidence)
    floored = f" (taken as the backend's floor of {floor:.0%})" if widest < floor else ""
    if widest > UNFIT_SPREAD:
        return (
            f"gate resolution: the widest spread between processes is {widest:.1%} ({name}, {n} repeats), beyond the "
            f"gate's {UNFIT_SPREAD:.0%} bound: this machine is too noisy to judge a slowdown, and a gate of this run "
            "calls it unfit (inconclusive); a quieter machine, or `vlabench ab`"
        )
    return (
        f"gate resolution: the widest spread between processes is {widest:.1%} ({name}, {n} repeats){floored}; a gate "
        f"of this run against one like it finds a slowdown of about "
        f"{resolvable_change(spread, n, n, limits.confidence):.0%} (80% power); a {target:.0%} slowdown needs "
        + (
            f"about {need} repeats a side (--repeats {need})"
            if need
            else "more than 100 repeats a side: use `vlabench ab`"
        )
    )


def recorded_spread(base: dict, cur: dict) -> float | None:
    """The larger spread between processes that either rung's repeats recorded (`process_spread`); None where
    neither has repeats."""
    return max((r["process_spread"] for r in (base, cur) if r.get("process_spread") is not None), default=None)


def process_spread(base: dict, cur: dict, baseline: dict) -> tuple[float, str]:
    """The spread between processes that two single runs of a rung are judged with, and where it comes from: the
    larger `process_spread` either rung records (measured from its repeats), else the default of the target's
    backend (DEFAULT_PROCESS_SPREAD)."""
    recorded = recorded_spread(base, cur)
    if recorded is not None:
        return recorded, "measured from repeats"
    backend = (baseline.get("target") or {}).get("backend") or "cpu"
    return DEFAULT_PROCESS_SPREAD.get(backend, max(DEFAULT_PROCESS_SPREAD.values())), f"the {backend} default"


def _whole_rate(rec: dict, batch: int) -> float:
    return statistics.median(whole_rate(r["step_times_s"], batch) for r in ok_repeats(rec))


def _evidence(base: dict, cur: dict, ratio: Ratio, spread: tuple[float, str]) -> str:
    n_base, n_cur = len(ok_repeats(base)), len(ok_repeats(cur))
    if ratio.method == "repeats":
        return f"repeats {n_base} vs {n_cur} (t, {ratio.df} df)"
    return f"single runs: steps, widened by a {spread[0]:.1%} spread between processes ({spread[1]})"


def throughput_ratio(
    base: dict, cur: dict, base_batch: int, cur_batch: int, confidence: float, spread: float = 0.0, floor: float = 0.0
) -> Ratio:
    """Current over baseline whole-run samples/s: over repeats where either side has two or more (their spread
    taken as at least `floor`, REPEATS_SPREAD_FLOOR), else over the steps of the two single runs, the interval
    widened by the spread between processes `spread`."""
    b, c = ok_repeats(base), ok_repeats(cur)
    by_repeats = repeats_ratio(
        [whole_rate(r["step_times_s"], cur_batch) for r in c],
        [whole_rate(r["step_times_s"], base_batch) for r in b],
        confidence,
        floor,
    )
    if by_repeats is not None:
        return by_repeats
    steps = steps_ratio(c[0]["step_times_s"], b[0]["step_times_s"], cur_batch, base_batch, confidence)
    return with_process_spread(steps, spread, confidence) if spread > 0 else steps


def machine_ratio(base: dict, cur: dict, confidence: float = 0.95) -> Ratio | None:
    """How fast the machine ran during the current rung relative to the baseline's (the probe's matmuls over
    its total time, per repeat), with its interval; None unless both rungs carry the same probe kernel."""
    b = [r.get("machine_probe") for r in ok_repeats(base)]
    c = [r.get("machine_probe") for r in ok_repeats(cur)]
    if not b or not c or not all(same_kernel(b[0], p) for p in b + c):
        return None
    by_repeats = repeats_ratio([whole_probe_rate(p) for p in c], [whole_probe_rate(p) for p in b], confidence)
    if by_repeats is not None:
        return by_repeats
    return steps_ratio(c[0]["times_s"], b[0]["times_s"], c[0].get("repeats", 1), b[0].get("repeats", 1), confidence)


def _memory_check(name: str, base: dict, cur: dict, limits: Limits) -> Check:
    b, c = base.get("peak_memory_gib"), cur.get("peak_memory_gib")
    if b is None or c is None or not b:
        return Check(name, "peak memory", NOT_GATED, _gib(b), _gib(c), note="no peak memory recorded")
    if base.get("peak_memory_kind") != cur.get("peak_memory_kind"):
        return Check(
            name,
            "peak memory",
            NOT_GATED,
            _gib(b),
            _gib(c),
            note=f"measured differently: {base.get('peak_memory_kind')} vs {cur.get('peak_memory_kind')}",
        )
    over = c > b * (1 + limits.memory_tolerance)
    return Check(
        name,
        "peak memory",
        FAIL if over else PASS,
        _gib(b),
        _gib(c),
        f"{c / b - 1:+.1%}",
        f"larger by more than {limits.memory_tolerance:.0%}" if over else "",
    )


def _gib(value) -> str:
    return "-" if value is None else f"{value:.2f} GiB"


def _parity_check(name: str, base: dict, cur: dict) -> Check:
    def text(p):
        if not p:
            return "-"
        diff = "no comparable steps" if p.get("max_rel_diff") is None else f"{p['max_rel_diff']:.1e}"
        return f"{'pass' if p.get('pass') else 'FAIL'} {diff}"

    bp, cp = base.get("loss_parity"), cur.get("loss_parity")
    if not cp:
        return Check(name, "loss parity", NOT_GATED, text(bp), "-", note="no parity recorded (baseline rung not ok)")
    if cp.get("pass"):
        return Check(name, "loss parity", PASS, text(bp), text(cp), note=f"tolerance {cp.get('tolerance'):.0e}")
    note = f"exceeds tolerance {cp.get('tolerance'):.0e}" + (
        " (failed in the baseline too)" if bp and not bp.get("pass") else ""
    )
    return Check(name, "loss parity", FAIL, text(bp), text(cp), note=note)


def _success_rates(result: dict) -> dict[str, dict]:
    """The result's `success_rate` entries (checked by load_result): {suite: {"successes": k, "trials": n, ...}}."""
    return result.get("success_rate") or {}


def _rate_text(entry: dict) -> str:
    return f"{entry['successes'] / entry['trials']:.1%} ({entry['successes']}/{entry['trials']})"


def success_check(suite: str, base: dict, cur: dict | None, limits: Limits) -> Check:
    """Fisher's exact test of the current successes against the recorded ones (both are samples): FAIL when the
    rate dropped by more than the tolerance and the drop is significant at the gate's confidence; inconclusive
    when it dropped that far but the trials cannot tell, with the trials that could, and when the recorded rate is
    within the tolerance of zero (nothing could fail it)."""
    subject = f"suite {suite}"
    if cur is None:
        return Check(subject, "success rate", FAIL, _rate_text(base), "missing", note="the suite was not evaluated")
    recorded = base["successes"] / base["trials"]
    rate = cur["successes"] / cur["trials"]
    p = fisher_lower_p(cur["successes"], cur["trials"], base["successes"], base["trials"])
    check = Check(
        subject,
        "success rate",
        PASS,
        _rate_text(base),
        _rate_text(cur),
        f"{(rate - recorded) * 100:+.1f} points",
        f"Fisher one-sided p={p:.2g}",
    )
    tol = limits.success_tolerance
    if recorded <= tol:  # no rate is more than the tolerance below it: "pass" would say nothing
        check.verdict = INCONCLUSIVE
        check.note += (
            f": the recorded {recorded:.1%} leaves no room for a drop of more than {tol * 100:g} points, so this "
            "check cannot fail; record a policy that succeeds"
        )
        return check
    if recorded - rate <= tol:
        return check
    if p < 1 - limits.confidence:
        check.verdict = FAIL
        check.note += f" < {1 - limits.confidence:.2g}: dropped by more than {tol * 100:g} points"
    else:
        need = trials_to_detect(recorded, tol, limits.confidence)
        check.verdict = INCONCLUSIVE
        check.note += (
            f": dropped by more than {tol * 100:g} points, but {cur['trials']} and {base['trials']} trials cannot "
            f"tell; about {need} trials on each side would detect a {tol * 100:g}-point drop from "
            f"{recorded:.0%} (80% power)"
        )
    return check


def recorded_baseline_path(result: dict, results_dir: str | Path = "results", source: str = "result") -> Path:
    """Where the recorded baseline of the result's scenario on its target lives: results_dir/<target>/<scenario>.json,
    both names plain names of the result file `source` (its contents never choose a place outside results_dir)."""
    target = file_name(result["target"]["name"], source, "target.name")
    scenario = file_name(result["scenario"]["name"], source, "scenario.name")
    return inside(results_dir, Path(results_dir, target, f"{scenario}.json"), source, "target.name")


def record_baseline(path, results_dir: str | Path = "results", force: bool = False) -> Path:
    """Copy a result to the recorded baseline of its scenario and target (see `record`); returns its path."""
    return record(path, results_dir, force)[0]


def record(path, results_dir: str | Path = "results", force: bool = False) -> tuple[Path, Path | None]:
    """Copy a result to the recorded baseline of its scenario and target, the baseline it replaces kept byte for
    byte as numbered history (`keep_history`); refuses a result with failed rungs (or broken loss parity) unless
    forced, since every later gate would measure against it. Returns the baseline's path and the history file
    (None when nothing was replaced). A write that fails leaves the old baseline in place and no history."""
    result = load_result(path)
    _refuse_unless_forced(path, result, force)
    dest = recorded_baseline_path(result, results_dir, str(path))
    if dest.resolve() == Path(path).resolve():
        return dest, None
    new = Path(path).read_bytes()
    if dest.is_file() and dest.read_bytes() == new:  # already the baseline: nothing is replaced
        return dest, None
    dest.parent.mkdir(parents=True, exist_ok=True)
    kept = keep_history(dest, results_dir, str(path)) if dest.is_file() else None
    try:
        write_text_atomic(dest, new.decode("utf-8"))  # the old baseline or the new one, never half
    except BaseException:
        if kept is not None:
            kept.unlink()  # the old baseline is still the baseline: it is not history yet
        raise
    return dest, kept


def _refuse_unless_forced(path, result: dict, force: bool) -> None:
    if not force:
        bad = [
            r["name"]
            for r in result["rungs"]
            if r["status"] in ("error", "oom") or (r.get("loss_parity") or {}).get("pass") is False
        ]
        if bad:
            raise InputError(
                str(path),
                "rungs",
                "a result whose rungs all ran with loss parity (or --force)",
                f"failed rungs {', '.join(bad)}",
            )
        if sabotaged_rungs(result) or result.get("test_train_sabotage"):
            raise InputError(
                str(path),
                "rungs",
                "a real measurement (or --force)",
                "training sabotaged by the test-only VLABENCH_TEST_TRAIN_SABOTAGE",
            )
        if any(r.get("test_slowdown") for r in result["rungs"]):
            raise InputError(
                str(path),
                "rungs",
                "a real measurement (or --force)",
                "rungs slowed by the test-only VLABENCH_TEST_SLOWDOWN",
            )
        if (result.get("policy") or {}).get("test_sabotage"):
            raise InputError(
                str(path),
                "policy.test_sabotage",
                "a real measurement (or --force)",
                "an expert sabotaged by the test-only VLABENCH_TEST_EXPERT_SABOTAGE",
            )


HISTORY_FILE = re.compile(r"(\d{4,})-[A-Za-z0-9]+\.json")  # 0001-3f2c1a9.json: number, then the commit


def history_folder(baseline: Path, results_dir: str | Path, source: str) -> Path:
    """results/<target>/history/<scenario>/ of the baseline results/<target>/<scenario>.json, refused unless it
    resolves (links followed) inside results_dir."""
    return inside(results_dir, baseline.parent / HISTORY / baseline.stem, source, "target.name")


def _short_sha(data: bytes) -> str:
    """The replaced result's commit, 7 hex digits, for its history file's name ('unknown' without one)."""
    try:
        sha = json.loads(data)["provenance"]["git_sha"]
    except (ValueError, TypeError, KeyError):
        return "unknown"
    return sha[:7].lower() if isinstance(sha, str) and re.fullmatch(r"[0-9a-fA-F]{7,64}", sha) else "unknown"


def keep_history(baseline: Path, results_dir: str | Path, source: str) -> Path:
    """Copy the baseline, byte for byte, to the next number of its history (pytest-benchmark's numbered saves):
    history/<scenario>/0001-<commit>.json, then 0002-..., never over an existing file. Returns the copy's path."""
    folder = history_folder(baseline, results_dir, source)
    folder.mkdir(parents=True, exist_ok=True)
    inside(results_dir, folder, source, "target.name")  # what was made is still inside
    data = baseline.read_bytes()
    numbers = [int(m.group(1)) for p in folder.iterdir() if (m := HISTORY_FILE.fullmatch(p.name))]
    number, sha = max(numbers, default=0) + 1, _short_sha(data)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".record-", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, baseline.stat().st_mode & 0o777)
        while True:  # claimed whole or not at all: two records never share a number, none is overwritten
            kept = folder / f"{number:04d}-{sha}.json"
            try:
                _claim(tmp, kept, data)
                return kept
            except FileExistsError:
                number += 1
    finally:
        os.unlink(tmp)


def _claim(tmp: str, kept: Path, data: bytes) -> None:
    """Give the written copy `tmp` the new name `kept`, failing with FileExistsError where that name is taken: a
    hard link, else (a file system without them) an exclusive create, removed again if its write fails."""
    try:
        os.link(tmp, kept)
        return
    except FileExistsError:
        raise
    except OSError:
        pass
    with open(kept, "xb") as f:
        try:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        except BaseException:
            kept.unlink()
            raise
