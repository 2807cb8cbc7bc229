"""Regression gates: the rules on hand-made results, the CLI contract, and A/A and slowed-down real CPU runs."""
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cli import main
from harness.gates import FAIL, NOT_GATED, PASS, Limits, gate, record_baseline
from harness.hardware import get_target
from harness.runner import run_scenario
from harness.scenario import load_scenario
from harness.timing import percentile, ratio_interval

ROOT = Path(__file__).resolve().parent.parent
# Fixed, mildly noisy step times (seconds) around 0.1 s: +-3% in a repeating pattern.
STEPS = [0.1 * (1 + 0.03 * ((i * 7) % 5 - 2) / 2) for i in range(20)]


def rung(name, steps=STEPS, peak=1.0, parity=True, status="ok", **extra):
    if status != "ok":
        return {"name": name, "status": status, "reason": f"{name} {status}", "options": {"x": 1}}
    return {"name": name, "status": "ok", "reason": None, "options": {"x": 1}, "step_times_s": list(steps),
            "samples_per_s": 2 / sorted(steps)[len(steps) // 2], "losses": [1.0] * len(steps),
            "peak_memory_gib": peak, "peak_memory_kind": "peak allocated by torch",
            "loss_parity": {"max_rel_diff": 0.0 if parity else 0.5, "tolerance": 0.01, "pass": parity}, **extra}


def result(rungs, target="cpu", torch_version="2.13.0", scenario="gate-demo", **extra):
    return {"schema": "vlabench.result/1",
            "scenario": {"name": scenario, "path": "s.yaml", "sha256": "ab"},
            "target": {"name": target, "backend": "cpu", "device_name": f"{target} device", "device_count": 1},
            "provenance": {"git_sha": "abc", "dirty": False, "python": "3.11", "torch": torch_version,
                           "created_at": "2026-11-29T00:00:00Z", "command": "test"},
            "workload": {"model": "pi05", "model_size": "tiny", "batch_size": 2, "dtype": "fp32"},
            "rungs": rungs, **extra}


def by_check(report):
    return {(c.subject, c.check): c for c in report.checks}


def scaled(factor, steps=STEPS):
    return [t * factor for t in steps]


def test_ratio_interval():
    assert ratio_interval([2.0] * 10, [2.0] * 10) == (1.0, 1.0, 1.0)
    ratio, low, high = ratio_interval([1.0, 1.1, 0.9, 1.0, 1.05], [2.0, 2.2, 1.8, 2.0, 2.1])
    assert ratio == pytest.approx(0.5) and low < 0.5 < high
    assert ratio_interval([1, 2, 3, 4, 5], [1, 1, 1, 1, 1], q=75) == (4.0, 2.0, 5.0)
    assert ratio_interval([1.0, 1.2, 0.8], [1.0, 1.1, 0.9]) == ratio_interval([1.0, 1.2, 0.8], [1.0, 1.1, 0.9])


@pytest.mark.parametrize("factor, verdict", [(1.0, PASS), (1.02, PASS), (1.3, FAIL), (0.7, PASS)])
def test_throughput_fails_only_beyond_tolerance_and_noise(factor, verdict):
    report = gate(result([rung("a", scaled(factor))]), result([rung("a")]))
    check = by_check(report)[("a", "throughput")]
    assert check.verdict == verdict
    assert report.exit_code == (1 if verdict == FAIL else 0)
    if factor == 1.3:
        assert check.change.startswith("-23.") and "outside run-to-run noise" in check.note


def test_slower_than_tolerance_but_within_noise_passes():
    # Most steps 12% slower, but 4 of 20 faster than the baseline's: the fastest quarter's ratio is uncertain.
    noisy = [t * (0.85 if i % 5 == 0 else 1.12) for i, t in enumerate(STEPS)]
    check = by_check(gate(result([rung("a", noisy)]), result([rung("a")])))[("a", "throughput")]
    assert check.verdict == PASS and check.note == "median -10.7%; slower by more than 5%, but within run-to-run noise"
    assert check.change == "-10.7% [-13.1%, +20.8%]"


def test_interference_on_some_steps_is_not_a_slower_rung():
    # Half the steps slowed by 40% (other work on the machine), the rest as fast as the baseline's.
    disturbed = [t * (1.4 if i % 10 < 5 else 1.0) for i, t in enumerate(STEPS)]
    check = by_check(gate(result([rung("a", disturbed)]), result([rung("a")])))[("a", "throughput")]
    assert check.verdict == PASS and check.note.startswith("median -14.6%; the fastest steps are not slower")
    # and the same interference in the baseline does not hide a slower rung
    check = by_check(gate(result([rung("a", scaled(1.3))]), result([rung("a", disturbed)])))[("a", "throughput")]
    assert check.verdict == FAIL and check.change.startswith("-21.9%")


def test_tolerance_is_a_parameter():
    cur, base = result([rung("a", scaled(1.08))]), result([rung("a")])
    assert gate(cur, base).exit_code == 1
    assert gate(cur, base, Limits(tolerance=0.10)).exit_code == 0


def test_missing_failed_and_new_rungs():
    base = result([rung("a"), rung("b"), rung("c"), rung("d", status="oom")])
    cur = result([rung("a"), rung("c", status="error"), rung("d"), rung("e")])
    checks = by_check(gate(cur, base))
    assert checks[("b", "status")].verdict == FAIL and checks[("b", "status")].current == "missing"
    assert checks[("c", "status")].verdict == FAIL and checks[("c", "status")].note == "c error"
    assert checks[("d", "status")].verdict == NOT_GATED  # nothing recorded to gate against
    assert checks[("e", "status")].verdict == NOT_GATED
    assert checks[("a", "throughput")].verdict == PASS


def test_rungs_option_limits_the_gate():
    base = result([rung("a"), rung("b")])
    report = gate(result([rung("a")]), base, rungs=["a"])
    assert report.exit_code == 0 and {c.subject for c in report.checks} == {"a"}


def test_peak_memory_and_loss_parity():
    base = result([rung("a", peak=10.0), rung("b", peak=10.0)])
    checks = by_check(gate(result([rung("a", peak=10.4), rung("b", peak=11.0, parity=False)]), base))
    assert checks[("a", "peak memory")].verdict == PASS and checks[("a", "peak memory")].change == "+4.0%"
    assert checks[("b", "peak memory")].verdict == FAIL
    assert checks[("b", "loss parity")].verdict == FAIL and checks[("a", "loss parity")].verdict == PASS


def test_warnings_for_different_hardware_software_and_options():
    base = result([rung("a")], target="h200", torch_version="2.11.0")
    cur = result([rung("a")])
    cur["rungs"][0]["options"] = {"x": 2}
    cur["workload"]["batch_size"] = 4
    report = gate(cur, base)
    text = " | ".join(report.warnings)
    assert "different hardware: the baseline ran on h200" in text
    assert "torch 2.11.0 -> 2.13.0" in text and "batch_size 2 -> 4" in text
    assert "rung a: options differ from the baseline's (x)" in text
    assert report.text().count("WARNING:") == len(report.warnings) == 4


def rates(**suites):
    return {s: {"successes": k, "trials": n, "rate": k / n} for s, (k, n) in suites.items()}


@pytest.mark.parametrize("current, verdict", [
    ((480, 500), PASS),  # 96% against 98%: within 5 points
    ((440, 500), FAIL),  # 88%: even its one-sided upper bound (~90.2%) is below 93%
    ((9, 10), PASS),     # 90% from 10 trials: too few to say it is below 93%
])
def test_success_rate_one_sided_wilson(current, verdict):
    base = result([], success_rate=rates(libero_spatial=(490, 500)))
    cur = result([], success_rate=rates(libero_spatial=current))
    check = by_check(gate(cur, base))[("suite libero_spatial", "success rate")]
    assert check.verdict == verdict
    if current == (440, 500):
        assert check.change == "-10.0 points" and "upper bound 90.2%" in check.note


def test_evaluation_results_gate_every_suite_and_task():
    # the shape `vlabench eval` writes: kind "eval", no rungs, suites and "suite/task" entries
    base = result([], kind="eval", success_rate=rates(libero_goal=(480, 500), **{"libero_goal/3": (50, 50)}))
    cur = result([], kind="eval", success_rate=rates(libero_goal=(478, 500), **{"libero_goal/3": (30, 50)}))
    report = gate(cur, base)
    assert [(c.subject, c.verdict) for c in report.checks] == [("suite libero_goal", PASS),
                                                               ("suite libero_goal/3", FAIL)]
    assert report.exit_code == 1


def test_missing_suite_fails_and_malformed_rates_are_unusable(tmp_path):
    base = result([], success_rate=rates(libero_spatial=(45, 50), libero_goal=(40, 50)))
    report = gate(result([], success_rate=rates(libero_spatial=(45, 50))), base)
    assert by_check(report)[("suite libero_goal", "success rate")].verdict == FAIL
    bad = result([], success_rate={"libero_spatial": {"successes": 51, "trials": 50}})
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    (tmp_path / "base.json").write_text(json.dumps(base))
    assert main(["gate", str(tmp_path / "bad.json"), "--baseline", str(tmp_path / "base.json")]) == 2


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return str(path)


def test_cli_exit_codes_and_formats(tmp_path, capsys):
    base = write(tmp_path, "base.json", result([rung("a")]))
    same = write(tmp_path, "same.json", result([rung("a", scaled(1.01))]))
    slow = write(tmp_path, "slow.json", result([rung("a", scaled(1.3))]))
    assert main(["gate", same, "--baseline", base]) == 0
    assert "PASS: 3 checks passed" in capsys.readouterr().out
    assert main(["gate", slow, "--baseline", base, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "regression" and data["exit_code"] == 1
    assert [c["check"] for c in data["checks"] if c["verdict"] == "FAIL"] == ["throughput"]
    assert main(["gate", slow, "--baseline", base, "--markdown", "--tolerance", "40%"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("### vlabench gate: pass") and "| rung " in out and "|---" in out


@pytest.mark.parametrize("args, message", [
    (["--tolerance", "5"], "--tolerance: expected a percentage like 5% or a fraction like 0.05"),
    (["--baseline", "missing.json"], "missing.json: expected an existing result file"),
    (["--baseline", "OTHER"], "scenario.name: expected a result of scenario 'other'"),
    (["--baseline", "FAILED"], "rungs: expected an ok rung or a success rate to gate against"),
])
def test_cli_unusable_input_exits_2(args, message, tmp_path, capsys):
    cur = write(tmp_path, "cur.json", result([rung("a")]))
    other = write(tmp_path, "other.json", result([rung("a")], scenario="other"))
    failed = write(tmp_path, "failed.json", result([rung("a", status="error")]))
    args = [{"OTHER": other, "FAILED": failed}.get(a, a) for a in args]
    assert main(["gate", cur, *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_record_promotes_a_result_and_gate_finds_it(tmp_path, capsys):
    results_dir = tmp_path / "results"
    run = write(tmp_path, "run.json", result([rung("a")]))
    assert main(["record", run, "--results-dir", str(results_dir)]) == 0
    recorded = results_dir / "cpu" / "gate-demo.json"
    assert json.loads(recorded.read_text()) == json.loads(Path(run).read_text())
    slow = write(tmp_path, "slow.json", result([rung("a", scaled(1.3))]))
    assert main(["gate", slow, "--results-dir", str(results_dir)]) == 1  # default baseline: the recorded one
    assert str(recorded) in capsys.readouterr().out
    broken = write(tmp_path, "broken.json", result([rung("a", parity=False)]))
    assert main(["record", broken, "--results-dir", str(results_dir)]) == 2
    assert json.loads(recorded.read_text())["rungs"][0]["loss_parity"]["pass"]  # the baseline is kept
    assert record_baseline(broken, results_dir, force=True) == recorded


# Real runs: a tiny one-rung CPU scenario, each run in its own rung process as `vlabench run` does it.
AA_SCENARIO = """
name: gate-aa
model: pi05
workload: {batch_size: 2, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 2, timed_steps: 40,
           seed: 0, dtype: fp32}
ladder:
  - {name: community, options: {camera_slots: 3, recompute: nested-full}}
targets:
  cpu: {model_size: tiny}
"""


# A tiny model's ~45 ms CPU steps moved by up to ~12% between two neighbouring processes on the shared
# 2-vCPU VM, even pinned to one CPU, so these runs are gated at 15% (still far from the 30% slowdown and from
# the 2% one); the rules at the default 5% are tested above on exact step times.
CPU_TOLERANCE = ["--tolerance", "15%"]


def cpu_used_by_others(fn, cpu: int):
    """Call fn(); return its value and the share of CPU `cpu`'s time that other processes used meanwhile (its
    busy time in /proc/stat, steal included, less this process's and its children's, all pinned there)."""
    def machine():
        with open("/proc/stat") as f:
            line = next(line for line in f if line.startswith(f"cpu{cpu} "))
        t = [int(x) for x in line.split()[1:9]]
        return sum(t) - t[3] - t[4], sum(t)  # busy and total clock ticks (idle and iowait are not busy)

    def ours():
        me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return (me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime) * os.sysconf("SC_CLK_TCK")

    (busy0, total0), ours0 = machine(), ours()
    value = fn()
    (busy1, total1), ours1 = machine(), ours()
    return value, max(0.0, (busy1 - busy0) - (ours1 - ours0)) / max(total1 - total0, 1)


def machine_speed(path: str) -> float:
    """How fast the machine computed during a run: the fastest quarter's samples/s with the test-only sleep
    taken out (it is that fraction of each step's compute time, so compute = step / (1 + fraction))."""
    r = json.loads(Path(path).read_text())
    rung_ = r["rungs"][0]
    batch = r["workload"]["batch_size"]
    return percentile([batch / t for t in rung_["step_times_s"]], 75) * (1 + (rung_.get("test_slowdown") or 0))


# Two runs are like for like when the machine computed within 10% as fast in both: then an A/A pair cannot
# move past the 15% tolerance, a 30% slowdown still reads >= 20% slower and a 2% one <= 12% slower.
LIKE_FOR_LIKE = 1.10


def unlike(runs: dict, noisy: dict, cur: str, base: str) -> str | None:
    """Why the pair (cur, base) is not like for like, or None when it is."""
    if cur in noisy or base in noisy:
        return "; ".join(f"{n}: {noisy[n]}" for n in (cur, base) if n in noisy)
    fast = {n: machine_speed(runs[n]) for n in (cur, base)}
    if max(fast.values()) > LIKE_FOR_LIKE * min(fast.values()):
        return ("the machine's speed moved between them: " + ", ".join(f"{n} {v:.1f}" for n, v in fast.items())
                + " samples/s (fastest quarter, test sleep taken out)")
    return None


@pytest.fixture(scope="module")
def cpu_runs(tmp_path_factory):
    """A warm-up run, six plain runs (five A/A pairs of neighbours in time), then a plain run followed by one
    slowed by 30%, and a plain run followed by one slowed by 2%; a slowed pair that is not like for like is
    run again (twice at most).

    On the 2-vCPU VM these tests were written on, the two CPUs ran the same steps up to 40% apart, and the
    host's other work (invisible inside the VM) slowed a CPU to ~57% for seconds to minutes at a time: in one
    full-suite run five plain runs read 23-26 samples/s and the sixth 40. So every run is one thread pinned to
    one CPU (the last, away from CPU 0's kernel work) and times 40 steps; a run during which another process
    used that CPU is measured again (a few times in all); and a pair is gated only when like for like (see
    unlike()), else skipped with the measured speeds: the machine changed, not the code."""
    tmp = tmp_path_factory.mktemp("gate-runs")
    (tmp / "s.yaml").write_text(AA_SCENARIO)
    scenario = load_scenario(tmp / "s.yaml")
    allowed, cpu = os.sched_getaffinity(0), max(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})  # inherited by the rung processes
    noisy, retries = {}, [2]

    def run(name, slowdown=None):
        env = {"OMP_NUM_THREADS": "1", **({"VLABENCH_TEST_SLOWDOWN": str(slowdown)} if slowdown else {})}
        out = tmp / f"{name}.json"
        noisy.pop(name, None)
        while True:
            _, others = cpu_used_by_others(
                lambda: run_scenario(scenario, get_target("cpu"), out, ["test"], progress=lambda _: None, env=env),
                cpu)
            if others <= 0.15 or retries[0] == 0:
                break
            retries[0] -= 1
        if others > 0.15:
            noisy[name] = f"other processes used {others:.0%} of its CPU"
        return str(out)

    try:
        # Thrown away: in the full suite the first run after the tests before it came out ~30% slower than the
        # rest (cold caches, a CPU returning to speed).
        run_scenario(scenario, get_target("cpu"), tmp / "warm-up.json", ["test"], progress=lambda _: None,
                     env={"OMP_NUM_THREADS": "1"})
        runs = {f"a{i}": run(f"a{i}") for i in range(6)}
        for slowed, base, fraction in (("slow30", "b30", 0.30), ("slow2", "b2", 0.02)):
            for _ in range(3):
                runs[base], runs[slowed] = run(base), run(slowed, fraction)
                if unlike(runs, noisy, slowed, base) is None:
                    break
    finally:
        os.sched_setaffinity(0, allowed)
    return runs, noisy


@pytest.mark.slow
def test_aa_runs_pass_five_times(cpu_runs, capsys):
    runs, noisy = cpu_runs
    pairs = [(f"a{i + 1}", f"a{i}") for i in range(5)]
    why = {pair: unlike(runs, noisy, *pair) for pair in pairs}
    alike = [pair for pair in pairs if why[pair] is None]
    codes = [main(["gate", runs[cur], "--baseline", runs[base], *CPU_TOLERANCE]) for cur, base in alike]
    assert codes == [0] * len(alike), capsys.readouterr().out
    if len(alike) < len(pairs):
        pytest.skip(f"{len(alike)} of 5 A/A pairs were like for like (and passed); not like for like: "
                    + "; ".join(f"{c} vs {b}: {why[(c, b)]}" for c, b in pairs if why[(c, b)]))


@pytest.mark.slow
def test_real_30_percent_slowdown_fails_and_2_percent_passes(cpu_runs, capsys):
    runs, noisy = cpu_runs
    slowed = json.loads(Path(runs["slow30"]).read_text())["rungs"][0]
    assert slowed["test_slowdown"] == 0.3
    why = {pair: unlike(runs, noisy, *pair) for pair in (("slow30", "b30"), ("slow2", "b2"))}
    if why[("slow30", "b30")] is None:
        assert main(["gate", runs["slow30"], "--baseline", runs["b30"], *CPU_TOLERANCE]) == 1
        out = capsys.readouterr().out
        assert "community  throughput   FAIL" in out and "test-only VLABENCH_TEST_SLOWDOWN" in out
    if why[("slow2", "b2")] is None:
        assert main(["gate", runs["slow2"], "--baseline", runs["b2"], *CPU_TOLERANCE]) == 0, \
            capsys.readouterr().out
    if any(why.values()):
        pytest.skip("not like for like after three tries: "
                    + "; ".join(f"{c} vs {b}: {w}" for (c, b), w in why.items() if w))


@pytest.mark.slow
def test_pytest_benchmark_compare_fail_catches_the_slowdown(tmp_path):
    """The pytest-native path: autosave a benchmark run, then a 30% slower one fails
    `--benchmark-compare-fail` (median:5% as in the README; min:5% too, which a CPU switching speed mid-run,
    as the cpu_runs fixture describes, does not blur)."""
    (tmp_path / "s.yaml").write_text(AA_SCENARIO)
    cmd = [sys.executable, "-m", "pytest", str(ROOT / "benchmarks"), "-q", "-p", "no:cacheprovider",
           "--vlabench-scenario", str(tmp_path / "s.yaml"), "--vlabench-target", "cpu",
           f"--benchmark-storage={tmp_path / 'store'}"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {max(allowed)})  # one CPU for both runs, as in cpu_runs
    try:
        first = subprocess.run([*cmd, "--benchmark-autosave"], env=env, capture_output=True, text=True, cwd=ROOT,
                               check=False)
        assert first.returncode == 0, first.stdout[-2000:]
        second = subprocess.run([*cmd, "--benchmark-compare", "--benchmark-compare-fail=median:5%",
                                 "--benchmark-compare-fail=min:5%"], env={**env, "VLABENCH_TEST_SLOWDOWN": "0.3"},
                                capture_output=True, text=True, cwd=ROOT, check=False)
    finally:
        os.sched_setaffinity(0, allowed)
    assert second.returncode != 0 and "Performance has regressed" in second.stdout + second.stderr, \
        second.stdout[-2000:]
