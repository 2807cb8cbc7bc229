#!/usr/bin/env python3
"""Mutation test of the speed gate's rule: does every clause have a fast test that notices it changed?

Each mutant below negates, drops or shifts one `if`/comparison of the verdict logic (harness/judge/gates.py, the
one slowdown rule in harness/stats/spread.py, `vlabench ab`'s rate rule, compare.py's parity checks, the parity
recomputed on load). For each, the repository's harness/, models/ and tests/ are copied to a temporary folder, the
one change is made there (the original text must occur exactly once), and the fast gate tests run against the copy:

    python scripts/gate_mutants.py [--only NAME,...] [--keep-going]

It prints a table mutant -> killed (a test failed) / SURVIVED (every test passed) / broken (pytest could not run,
exit 2-5), and exits 1 if any mutant survived or broke. The unchanged copy must pass first (exit 2 if not).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ["tests/test_gate_mutants.py", "tests/test_gates.py", "tests/test_compare.py"]
GATES, SPREAD, COMPARE = "harness/judge/gates.py", "harness/stats/spread.py", "harness/judge/compare.py"
CHECKS, AB = "harness/stats/result_checks.py", "harness/judge/ab.py"


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str
    old: str
    new: str


MUTANTS = (
    # the one slowdown rule (spread.py): FAIL needs slower than the tolerance AND the interval below 1
    Mutant("rule: FAIL impossible", SPREAD, "return SLOWER if ratio.high < 1 else WITHIN_NOISE", "return WITHIN_NOISE"),
    Mutant("rule: interval ignored", SPREAD, "return SLOWER if ratio.high < 1 else", "return SLOWER if True else"),
    Mutant("rule: low end instead of high", SPREAD, "SLOWER if ratio.high < 1 else", "SLOWER if ratio.low < 1 else"),
    Mutant("rule: high < 1 -> <= 1", SPREAD, "SLOWER if ratio.high < 1 else", "SLOWER if ratio.high <= 1 else"),
    Mutant("rule: value < 1-tol -> <=", SPREAD, "if ratio.value < 1 - tolerance:", "if ratio.value <= 1 - tolerance:"),
    Mutant("rule: tolerance ignored", SPREAD, "if ratio.value < 1 - tolerance:", "if ratio.value < 1:"),
    # the spread between processes of two single runs
    Mutant("spread: single runs not widened", GATES, "if spread > 0 else steps", "if False else steps"),
    Mutant(
        "spread: smaller recorded spread wins",
        GATES,
        'return max((r["process_spread"] for r in (base, cur) if r.get("process_spread") is not None), default=None)',
        'return min((r["process_spread"] for r in (base, cur) if r.get("process_spread") is not None), default=None)',
    ),
    Mutant(
        "spread: no default for a target",
        GATES,
        'return DEFAULT_PROCESS_SPREAD.get(backend, max(DEFAULT_PROCESS_SPREAD.values())), f"the {backend} default"',
        'return 0.0, f"the {backend} default"',
    ),
    Mutant("spread: repeats not recorded", "harness/stats/repeats.py", "if spread is not None:", "if False:"),
    Mutant(
        "spread: no floor on repeats", SPREAD, "sd = max(math.sqrt(ss / df), min_spread)", "sd = math.sqrt(ss / df)"
    ),
    Mutant(
        "spread: floor on every backend",
        GATES,
        'REPEATS_SPREAD_FLOOR.get((baseline.get("target") or {}).get("backend") or "cpu", 0.0)',
        "0.03",
    ),
    # the unfit machine
    Mutant(
        "unfit: clause dropped",
        GATES,
        "and machine is not None and machine.value < 1 - UNFIT_SLOWDOWN:",
        "and machine is not None and False:",
    ),
    Mutant(
        "unfit: any machine is unfit",
        GATES,
        "and machine is not None and machine.value < 1 - UNFIT_SLOWDOWN:",
        "and machine is not None:",
    ),
    Mutant(
        "unfit: bound doubled (40%)",
        GATES,
        "machine.value < 1 - UNFIT_SLOWDOWN:",
        "machine.value < 1 - 2 * UNFIT_SLOWDOWN:",
    ),
    Mutant(
        "unfit: bound halved (10%)",
        GATES,
        "machine.value < 1 - UNFIT_SLOWDOWN:",
        "machine.value < 1 - UNFIT_SLOWDOWN / 2:",
    ),
    Mutant(
        "unfit spread: clause dropped",
        GATES,
        "elif verdict in (SLOWER, WITHIN_NOISE) and (recorded_spread(base, cur) or 0.0) > UNFIT_SPREAD:",
        "elif False:",
    ),
    Mutant("unfit spread: bound doubled (20%)", GATES, "UNFIT_SPREAD = 0.10", "UNFIT_SPREAD = 0.20"),
    Mutant("unfit spread: bound halved (5%)", GATES, "UNFIT_SPREAD = 0.10", "UNFIT_SPREAD = 0.05"),
    # a faster machine that may hide a regression behind a pass
    Mutant(
        "faster machine: clause dropped",
        GATES,
        "elif machine is not None and machine.low > 1 and _machine_hides(ratio, machine, tol):",
        "elif False:",
    ),
    Mutant(
        "faster machine: not measured faster may hide (mean above 1)",
        GATES,
        "and machine.low > 1 and _machine_hides(",
        "and machine.value > 1 and _machine_hides(",
    ),
    Mutant(
        "faster machine: twice the tolerance -> once",
        GATES,
        "return ratio.value / machine.value < 1 - 2 * tolerance",
        "return ratio.value / machine.value < 1 - tolerance",
    ),
    Mutant(
        "faster machine: twice the tolerance -> three times",
        GATES,
        "return ratio.value / machine.value < 1 - 2 * tolerance",
        "return ratio.value / machine.value < 1 - 3 * tolerance",
    ),
    # the machine probe's excuse
    Mutant(
        "excuse: a machine not measured slower may excuse",
        GATES,
        "slower_machine = machine is not None and machine.high < 1",
        "slower_machine = machine is not None",
    ),
    Mutant(
        "excuse: a faster or unchanged machine excuses (interval reaching below 1)",
        GATES,
        "slower_machine = machine is not None and machine.high < 1",
        "slower_machine = machine is not None and machine.low < 1",
    ),
    Mutant(
        "excuse: clause dropped (the probe never excuses)",
        GATES,
        "elif verdict == SLOWER and slower_machine and _machine_explains(ratio, machine, tol):",
        "elif False:",
    ),
    Mutant(
        "excuse: twice-the-tolerance clause dropped",
        GATES,
        "return own >= 1 - 2 * tolerance and ratio.high",
        "return ratio.high",
    ),
    Mutant(
        "excuse: twice -> three times the tolerance",
        GATES,
        "return own >= 1 - 2 * tolerance and",
        "return own >= 1 - 3 * tolerance and",
    ),
    Mutant(
        "excuse: interval's high end clause dropped",
        GATES,
        "and ratio.high / machine.value >= 1 - tolerance",
        "",
    ),
    Mutant(
        "excuse: high end within the tolerance -> twice",
        GATES,
        "ratio.high / machine.value >= 1 - tolerance",
        "ratio.high / machine.value >= 1 - 2 * tolerance",
    ),
    # the other verdict branches
    Mutant(
        "verdict: within noise passes",
        GATES,
        "    elif verdict == WITHIN_NOISE:\n        check.verdict = INCONCLUSIVE",
        "    elif verdict == WITHIN_NOISE:\n        check.verdict = PASS",
    ),
    Mutant(
        "status: a failed current rung passes", GATES, 'if cur is None or cur["status"] != "ok":', "if cur is None:"
    ),
    Mutant(
        "memory: > -> >=",
        GATES,
        "over = c > b * (1 + limits.memory_tolerance)",
        "over = c >= b * (1 + limits.memory_tolerance)",
    ),
    Mutant("memory: tolerance ignored", GATES, "over = c > b * (1 + limits.memory_tolerance)", "over = c > b"),
    Mutant("parity: gate trusts no parity", GATES, '    if cp.get("pass"):\n', "    if True:\n"),
    Mutant(
        "success: significance ignored",
        GATES,
        "if p < 1 - limits.confidence:",
        "if True:",
    ),
    Mutant("success: drop <= tol -> <", GATES, "if recorded - rate <= tol:", "if recorded - rate < tol:"),
    # the twice-the-tolerance clause of the one rule (UNRESOLVED), read by the gate and by `vlabench ab` (its rule 2)
    Mutant(
        "rule: twice-the-tolerance clause dropped",
        SPREAD,
        "return UNRESOLVED if ratio.low < 1 - 2 * tolerance else NOT_SLOWER",
        "return NOT_SLOWER",
    ),
    Mutant("rule: twice the tolerance -> once", SPREAD, "ratio.low < 1 - 2 * tolerance", "ratio.low < 1 - tolerance"),
    Mutant(
        "rule: twice the tolerance -> three times",
        SPREAD,
        "ratio.low < 1 - 2 * tolerance",
        "ratio.low < 1 - 3 * tolerance",
    ),
    Mutant("rule: low < 1-2tol -> <=", SPREAD, "ratio.low < 1 - 2 * tolerance", "ratio.low <= 1 - 2 * tolerance"),
    Mutant(
        "gate: unresolved passes",
        GATES,
        "    elif verdict == UNRESOLVED:\n        check.verdict = INCONCLUSIVE",
        "    elif verdict == UNRESOLVED:\n        check.verdict = PASS",
    ),
    Mutant("ab: pass beyond twice the tolerance", AB, "elif rule >= 2 and outcome == UNRESOLVED:", "elif False:"),
    Mutant(
        "ab: the file's rule ignored", AB, "elif rule >= 2 and outcome == UNRESOLVED:", "elif outcome == UNRESOLVED:"
    ),
    # published figures: parity on every rung of the span (compare.py)
    Mutant(
        "compare: parity on the to-rung only",
        COMPARE,
        'broken = [r["name"] for r in spanned if',
        'broken = [r["name"] for r in records[:1] if',
    ),
    Mutant(
        "compare: parity on the two end rungs only",
        COMPARE,
        'broken = [r["name"] for r in spanned if',
        'broken = [r["name"] for r in records if',
    ),
    Mutant(
        "compare: parity not checked",
        COMPARE,
        "    if broken:\n        first, last",
        "    if False:\n        first, last",
    ),
    Mutant(
        "compare: unstated parity counts as broken",
        COMPARE,
        'if (r.get("loss_parity") or {}).get("pass") is False]\n    if broken:\n        first',
        'if not (r.get("loss_parity") or {}).get("pass")]\n    if broken:\n        first',
    ),
    # parity recomputed on load
    Mutant(
        "load: stated parity trusted",
        CHECKS,
        'if bool(stated.get("pass")) != expected["pass"]:',
        "if False:",
    ),
)


def copy_tree(dest: Path) -> None:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for part in ("harness", "models", "tests"):
        shutil.copytree(ROOT / part, dest / part, ignore=ignore)
    for name in ("pyproject.toml",):
        shutil.copy(ROOT / name, dest / name)
    # committed results some tests read (published figures, the same-code runs; fixtures live under tests/)
    shutil.copytree(ROOT / "results", dest / "results", ignore=ignore)
    shutil.copytree(ROOT / "scenarios", dest / "scenarios", ignore=ignore)


def run_tests(where: Path) -> tuple[int, float, str]:
    started = time.perf_counter()
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", "-p", "no:cacheprovider", *TESTS]
    # the check that every mutant's text is in the code would fail on any mutant: it tests the list, not the rule
    cmd += ["--deselect", "tests/test_gate_mutants.py::test_every_mutant_applies_to_the_current_code_once"]
    done = subprocess.run(cmd, cwd=where, capture_output=True, text=True)
    tail = [line for line in done.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return done.returncode, time.perf_counter() - started, (tail[0] if tail else done.stdout.strip().splitlines()[-1])


def apply(where: Path, mutant: Mutant) -> None:
    path = where / mutant.file
    text = path.read_text()
    if text.count(mutant.old) != 1:
        raise SystemExit(
            f"mutant {mutant.name!r}: {mutant.file} holds its text {text.count(mutant.old)} times, not once"
        )
    path.write_text(text.replace(mutant.old, mutant.new))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated mutant names (substrings) to run")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.only or any(s in m.name for s in args.only.split(","))]
    with tempfile.TemporaryDirectory(prefix="vlabench-mutants-") as tmp:
        clean = Path(tmp) / "clean"
        copy_tree(clean)
        code, seconds, last = run_tests(clean)
        if code != 0:
            print(f"the unchanged copy does not pass the fast gate tests ({last}): no mutant can be judged")
            return 2
        print(f"unchanged copy: pass ({seconds:.0f}s); tests: {' '.join(TESTS)} -m 'not slow'")
        rows = []
        for i, mutant in enumerate(chosen):
            where = Path(tmp) / f"m{i}"
            copy_tree(where)
            apply(where, mutant)
            code, seconds, last = run_tests(where)
            state = "killed" if code == 1 else "SURVIVED" if code == 0 else f"broken (pytest exit {code})"
            rows.append((mutant.name, mutant.file, state, last if code == 1 else ""))
            print(f"  {mutant.name}: {state} ({seconds:.0f}s)", file=sys.stderr, flush=True)
            shutil.rmtree(where)
    width = max(len(r[0]) for r in rows)
    print(f"| {'mutant'.ljust(width)} | file | result | first failing test |")
    print(f"|{'-' * (width + 2)}|------|--------|--------------------|")
    for name, file, state, first in rows:
        print(f"| {name.ljust(width)} | {file} | {state} | {first.removeprefix('FAILED ').split(' - ')[0]} |")
    survived = [r for r in rows if r[2] != "killed"]
    print(f"\n{len(rows) - len(survived)} of {len(rows)} mutants killed")
    return 1 if survived else 0


if __name__ == "__main__":
    sys.exit(main())
