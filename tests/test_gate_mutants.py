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

from harness.judge.gates import (
    DEFAULT_PROCESS_SPREAD,
    FAIL,
    INCONCLUSIVE,
    PASS,
    UNFIT_SLOWDOWN,
    Limits,
    gate,
    success_check,
)
from harness.stats.repeats import combine
from harness.stats.spread import NOT_SLOWER, SLOWER, WITHIN_NOISE, Ratio, slowdown, whole_rate

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
    ],
)
def test_the_rule_at_its_boundaries(value, low, high, expected):
    assert slowdown(Ratio(value, low, high, "steps"), 0.05) == expected


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
