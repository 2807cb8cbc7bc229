"""Every clause of the speed gate's rule has a fast, deterministic test that fails when the clause changes: hand-made
results with exact step times and probes, no timing. scripts/gate_mutants.py changes each clause in a copy of the
tree (MUTANTS) and runs these tests with tests/test_gates.py and tests/test_compare.py; docs/gates.md holds its table.
"""

import importlib.util
import math
import sys
from pathlib import Path

import pytest
from test_gates import STEPS, by_check, probe, result, rung, scaled

from harness.judge import ab
from harness.judge.gates import (
    DEFAULT_PROCESS_SPREAD,
    FAIL,
    INCONCLUSIVE,
    PASS,
    UNFIT_SLOWDOWN,
    UNFIT_SPREAD,
    Limits,
    gate,
    machine_ratio,
    success_check,
)
from harness.stats.repeats import combine
from harness.stats.spread import NOT_SLOWER, SLOWER, UNRESOLVED, WITHIN_NOISE, Ratio, slowdown, whole_rate

ROOT = Path(__file__).resolve().parent.parent


def throughput(cur_rung: dict, base_rung: dict):
    report = gate(result([cur_rung]), result([base_rung]))
    return by_check(report)[("a", "throughput")]


# ---- the one slowdown rule -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, low, high, expected",
    [
        (0.90, 0.85, 0.97, SLOWER),  # slower than the tolerance, the interval below 1
        (0.90, 0.85, 1.05, WITHIN_NOISE),  # the interval reaches 1 (a rule on its low end would say SLOWER)
        (0.90, 0.85, 1.0, WITHIN_NOISE),  # an upper end at exactly no change is not below it
        (0.95, 0.90, 0.99, NOT_SLOWER),  # exactly the tolerance: passes
        (0.97, 0.93, 0.99, NOT_SLOWER),  # 3% slower, outside the noise, but within the tolerance
        (1.00, 0.92, 1.08, NOT_SLOWER),  # the interval reaches beyond the tolerance, within twice it: passes
        (1.00, 0.90, 1.10, NOT_SLOWER),  # exactly twice the tolerance below 1: ruled out
        (1.00, 0.899, 1.10, UNRESOLVED),  # beyond twice the tolerance: a pass could hide a regression
        (0.96, 0.86, 1.05, UNRESOLVED),  # within three times it, beyond twice
    ],
)
def test_the_rule_at_its_boundaries(value, low, high, expected):
    assert slowdown(Ratio(value, low, high, "steps"), 0.05) == expected


@pytest.mark.parametrize(
    "low, rule, expected",
    [
        (0.90, 2, ab.PASS),  # exactly twice the tolerance below 1: ruled out, a pass
        (0.93, 2, ab.PASS),  # beyond the tolerance, within twice it: a pass that says what it cannot rule out
        (0.899, 2, ab.INCONCLUSIVE),  # beyond twice the tolerance: not a pass
        (0.87, 2, ab.INCONCLUSIVE),
        (0.899, 1, ab.PASS),  # a file decided by rule 1 keeps its pass
    ],
)
def test_an_ab_pass_needs_its_interval_within_twice_the_tolerance(low, rule, expected):
    """`vlabench ab`'s rate rule (harness/judge/ab.py rate_verdict) around a point estimate within the 5% tolerance."""
    ratios = [0.95, 0.98, 1.01]
    verdict = ab.Verdict("r", "", "", 3, [1.0] * 3, ratios, Ratio(0.98, low, 1.03, "pairs", 2))
    assert ab.rate_verdict(verdict, ratios, 0.05, 0.95, rule).verdict == expected


# ---- the default path: the spread between processes -------------------------------------------------------------


def test_two_single_runs_are_judged_with_the_targets_default_spread():
    """An A/A pair of single runs whose levels differ by 8% (what the spread between processes does to one run), its
    steps steady: judged on the steps alone it FAILs; with the cpu default spread it cannot, and says which spread."""
    cur, base = rung("a", scaled(1 / 0.92), process_spread=None), rung("a", process_spread=None)
    check = throughput(cur, base)
    spread = DEFAULT_PROCESS_SPREAD["cpu"]
    assert check.verdict == INCONCLUSIVE, check
    assert f"single runs: steps, widened by a {spread:.1%} spread between processes (the cpu default)" in check.note
    low, high = (float(x.strip("%")) / 100 for x in check.change.split("[")[1].rstrip("]").split(", "))
    assert high > 0 and low < -0.08 - 2 * spread  # the interval carries z x sqrt(2) x the spread
    # the same pair judged with no spread between processes FAILs: the steps alone cannot see it
    assert throughput(rung("a", scaled(1 / 0.92), process_spread=0.0), rung("a")).verdict == FAIL
    # a large slowdown still FAILs on the default path
    assert throughput(rung("a", scaled(1.6), process_spread=None), base).verdict == FAIL


def test_a_pass_whose_interval_reaches_beyond_twice_the_tolerance_is_inconclusive():
    """Two single CPU runs of the same speed: the cpu default spread widens the interval past -10% (twice the 5%
    tolerance), so a pass could hide a regression of that size: inconclusive, naming the repeats a side that would
    rule it out. The same pair judged with a 2% measured spread passes; exit 3, never 1."""
    same, base = rung("a", process_spread=None), rung("a", process_spread=None)
    report = gate(result([same]), result([base]))
    check = by_check(report)[("a", "throughput")]
    assert check.verdict == INCONCLUSIVE and report.exit_code == 3, check
    assert check.change == "+0.0% [-12.9%, +14.9%]", check
    assert "but the interval reaches 13% slower, beyond twice the tolerance, so a pass could hide" in check.note
    assert "about 5 repeats a side resolve a 10% slowdown" in check.note and "`vlabench ab`" in check.note
    check = throughput(rung("a", process_spread=0.02), rung("a", process_spread=0.02))
    assert check.verdict == PASS and "beyond twice" not in check.note, check
    # a run 3% faster whose interval still reaches beyond -10%: no pass either
    assert throughput(rung("a", scaled(0.97), process_spread=None), base).verdict == INCONCLUSIVE


def test_the_larger_recorded_spread_of_the_two_rungs_is_used():
    check = throughput(rung("a", scaled(1 / 0.92), process_spread=0.10), rung("a", process_spread=0.0))
    assert check.verdict == INCONCLUSIVE and "10.0% spread between processes (measured from repeats)" in check.note


def test_repeats_record_their_spread_between_processes():
    levels = (1.0, 1.1, 0.95)
    reps = [{"status": "ok", **rung("a", scaled(level), process_spread=None)} for level in levels]
    rates = [whole_rate(scaled(level), 2) for level in levels]
    logs = [math.log(r) for r in rates]
    mean = sum(logs) / 3
    expected = math.sqrt(sum((x - mean) ** 2 for x in logs) / 2)
    assert combine(reps, 2)["process_spread"] == pytest.approx(expected)
    assert combine(reps[:1], 2).get("process_spread") is None  # one process says nothing about the spread


# ---- the unfit machine -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "steps, machine, verdict",
    [
        (1.5, 1 / 0.75, INCONCLUSIVE),  # the probe 25% slower: unfit, although 1.5 is more than the machine explains
        (1.4, 1.0, FAIL),  # a steady machine is fit: the rung FAILs
        (1.4, 1.15, FAIL),  # the probe 13% slower: fit (within the bound), the rung 17% slower beyond it FAILs
    ],
)
def test_a_machine_slowed_beyond_the_bound_is_unfit(steps, machine, verdict):
    check = throughput(rung("a", scaled(steps), machine_probe=probe(machine)), rung("a", machine_probe=probe()))
    assert check.verdict == verdict, check
    assert ("machine unfit" in check.note) == (verdict == INCONCLUSIVE)
    if verdict == INCONCLUSIVE:
        assert (
            f"its probe ran {1 - 1 / machine:.0%} slower" in check.note and f"{UNFIT_SLOWDOWN:.0%} bound" in check.note
        )


@pytest.mark.parametrize(
    "spread, verdict",
    [(0.07, FAIL), (0.095, FAIL), (0.105, INCONCLUSIVE), (0.16, INCONCLUSIVE)],
)
def test_repeats_spread_beyond_the_bound_make_the_machine_unfit(spread, verdict):
    """A rung half as fast, steadily: FAIL while the repeats of either side spread at most UNFIT_SPREAD between
    processes, inconclusive (machine unfit, naming the spread) beyond it."""
    check = throughput(rung("a", scaled(2.0), process_spread=spread), rung("a", process_spread=0.02))
    assert check.verdict == verdict, check
    assert ("machine unfit: the rung's repeats spread" in check.note) == (verdict == INCONCLUSIVE)
    if verdict == INCONCLUSIVE:
        assert f"spread {spread:.0%} between processes (beyond the {UNFIT_SPREAD:.0%} bound)" in check.note


def test_the_same_code_pair_that_failed_on_a_noisy_machine_is_inconclusive():
    """A try of `scripts/gate_aa_tries.py --condition quiet --repeats 8` on a shared 2-core machine: the same code,
    run A's repeats falling from 19 to 12 samples/s as the machine slowed, run B's all near 12: -18.7% [-29.8%,
    -6.0%], a FAIL before the spread bound; both runs' repeats spread beyond it (16% and 11%), so it is
    inconclusive."""
    a = (19.28, 16.91, 17.84, 16.17, 12.65, 16.12, 12.19, 14.57)
    b = (12.44, 12.09, 11.43, 13.29, 12.85, 10.67, 14.23, 14.54)

    def measured(rates):
        reps = [{"status": "ok", **rung("a", scaled(20.0 / r), process_spread=None)} for r in rates]
        return {**rung("a"), **combine(reps, 2)}

    check = throughput(measured(b), measured(a))
    assert check.verdict == INCONCLUSIVE and check.change.startswith("-18.7%"), check
    assert "repeats spread 16% between processes" in check.note


# ---- the probe's excuse ------------------------------------------------------------------------------------------


def test_a_machine_not_measured_slower_excuses_nothing():
    # the probe's interval reaches below 1 but also above it: not measurably slower, so no excuse for 7%
    cur = rung("a", scaled(1.07), machine_probe=probe(1.0, noise=0.2, shift=2))
    check = throughput(cur, rung("a", machine_probe=probe(1.0, noise=0.2)))
    assert check.verdict == FAIL and "(probe)" not in check.note


def test_a_faster_machine_excuses_nothing_and_is_not_called_a_slowdown():
    check = throughput(rung("a", scaled(1.08), machine_probe=probe(1 / 1.06)), rung("a", machine_probe=probe()))
    assert check.verdict == FAIL
    assert "machine +6.0% [" in check.note and "machine's own" not in check.note


@pytest.mark.parametrize(
    "speed, machine, verdict",
    [
        (1.186, 1.341, INCONCLUSIVE),  # a real try: B 10% slower in its steps read +18.6% on a machine 34% faster
        (1.0, 1.06, PASS),  # no change on a machine 6% faster: 5.7% beyond it, within twice the tolerance
        (1.25, 1.341, PASS),  # faster on a faster machine: 6.8% beyond it, within twice the tolerance
        (0.895 * 1.2, 1.2, INCONCLUSIVE),  # 10.5% slower beyond the machine: past twice the tolerance
        (0.905 * 1.2, 1.2, PASS),  # 9.5% slower beyond it: within
    ],
)
def test_a_pass_on_a_faster_machine_that_may_hide_a_regression_is_inconclusive(speed, machine, verdict):
    """The mirror of the bound that a slower machine never excuses past: a machine measured faster (the probe's
    interval above 1) may make a regressed rung look unchanged, so a pass whose own change (over the machine's) is
    more than twice the tolerance slower is inconclusive."""
    check = throughput(rung("a", scaled(1 / speed), machine_probe=probe(1 / machine)), rung("a", machine_probe=probe()))
    assert check.verdict == verdict, check
    assert ("could hide a regression" in check.note) == (verdict == INCONCLUSIVE)


def test_a_machine_not_measured_faster_hides_nothing():
    """The probe 15% faster in the mean, but 4 of its 26 probes twice as slow, so its interval reaches below 1:
    not measurably faster, and the rung's pass stands although its change over the probe's would be 13% slower."""
    uneven = {**probe(), "times_s": [0.025 / 1.5] * 22 + [0.025 * 2.0] * 4}
    machine = machine_ratio(rung("a", machine_probe=probe()), rung("a", machine_probe=uneven))
    assert machine.value > 1.14 and machine.low < 1
    check = throughput(rung("a", machine_probe=uneven), rung("a", machine_probe=probe()))
    assert check.verdict == PASS and "could hide" not in check.note, check


def test_a_regression_twice_the_tolerance_beyond_the_machine_always_fails():
    """Noisy steps (a wide interval): the rung 24.6% slower on a machine 13.8% slower is 12.6% slower beyond it,
    more than twice the tolerance, so it FAILs although the interval's end, over the machine, is within 5%."""
    noisy = [t * (0.6 if i % 4 == 0 else 1.25) for i, t in enumerate(STEPS)]
    check = throughput(rung("a", scaled(1.22, noisy), machine_probe=probe(1.16)), rung("a", machine_probe=probe()))
    assert check.verdict == FAIL, check
    assert "(beyond the machine's own 14% slowdown)" in check.note


# ---- the rest of a rung's checks ---------------------------------------------------------------------------------


def test_memory_at_exactly_the_tolerance_passes_and_beyond_fails():
    def memory(peak):
        return by_check(gate(result([rung("a", peak=peak)]), result([rung("a", peak=1.0)])))[("a", "peak memory")]

    assert memory(1.05).verdict == PASS and memory(1.03).verdict == PASS and memory(1.06).verdict == FAIL


def test_a_success_drop_of_exactly_the_tolerance_passes():
    limits = Limits(success_tolerance=0.25)
    check = success_check("s", {"successes": 4, "trials": 4}, {"successes": 3, "trials": 4}, limits)
    assert check.verdict == PASS


# ---- the mutation script -----------------------------------------------------------------------------------------


def test_every_mutant_applies_to_the_current_code_once():
    spec = importlib.util.spec_from_file_location("gate_mutants", ROOT / "scripts" / "gate_mutants.py")
    mutants = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mutants  # its dataclass looks its module up
    try:
        spec.loader.exec_module(mutants)
    finally:
        del sys.modules[spec.name]
    assert len(mutants.MUTANTS) >= 25
    assert len({m.name for m in mutants.MUTANTS}) == len(mutants.MUTANTS)
    for m in mutants.MUTANTS:
        text = (ROOT / m.file).read_text()
        assert text.count(m.old) == 1, m.name
        assert m.old != m.new, m.name
