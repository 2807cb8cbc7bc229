"""`vlabench ab`: the decision on hand-made runs, the CLI contract, real CPU A/B runs and a `git bisect run`."""

import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest
from machine_load import cpu_hog

from harness.cli import main
from harness.judge import ab
from harness.judge.ab import (
    FAIL,
    FASTER,
    INCONCLUSIVE,
    NOT_GATED,
    PASS,
    Run,
    checked_out,
    decide,
    exit_code,
    resolve_side,
)

ROOT = Path(__file__).resolve().parent.parent
# Fixed, mildly noisy step times (seconds) around 0.1 s: +-3% in a repeating pattern.
STEPS = [0.1 * (1 + 0.03 * ((i * 7) % 5 - 2) / 2) for i in range(20)]
# Per-pair machine speed: each pair ran at its own speed (both sides alike), as on a shared machine.
PAIR_SPEED = [1.0, 1.3, 0.9, 1.1, 1.2]
JITTER = [0, 1, -1, 1, -1]  # +-1% between B and A across pairs, symmetric


def result(rungs: dict, batch_size: int = 2, nproc: int = 1) -> dict:
    """A result file's content: {rung name: step times, or a status string for a failed rung}."""
    records = []
    for name, steps in rungs.items():
        if isinstance(steps, str):
            records.append({"name": name, "status": steps, "reason": f"{name} {steps}"})
        else:
            records.append({"name": name, "status": "ok", "reason": None, "step_times_s": list(steps)})
    return {"workload": {"batch_size": batch_size}, "nproc": nproc, "rungs": records}


def pairs(a_rungs, b_rungs, n=5):
    """n pairs of runs; a_rungs/b_rungs map pair index -> {rung: steps or status} (a function of the pair)."""
    runs = []
    for i in range(n):
        for side, rungs in (("A", a_rungs(i)), ("B", b_rungs(i))):
            runs.append(Run(i + 1, side, Path(f"{side.lower()}-{i + 1}.json"), 0, 1.0, result(rungs)))
    return ab.pairs_of(runs)


def scaled(factor, steps=STEPS):
    return [t * factor for t in steps]


def verdict_of(b_factor_per_pair, n=5):
    """The verdict on rung r when B's steps take b_factor_per_pair(i) x A's, in pairs of varying machine speed."""
    made = pairs(
        lambda i: {"r": scaled(PAIR_SPEED[i % 5])}, lambda i: {"r": scaled(PAIR_SPEED[i % 5] * b_factor_per_pair(i))}, n
    )
    return decide("r", made, 0.05, 0.95)


def test_ten_percent_slower_b_fails():
    # every B step 1/0.9 as long: B's rate 0.9 x A's in every pair, whatever the pair's machine speed
    v = verdict_of(lambda i: 1 / 0.9 * (1 + 0.01 * JITTER[i]))
    assert v.verdict == FAIL and exit_code([v]) == 1
    assert v.ratio.value == pytest.approx(0.9, abs=0.005) and v.ratio.high < 1
    assert v.note.startswith("10.0% slower: beyond the 5% tolerance")
    assert v.a_rates[1] < v.a_rates[0]  # the machine's speed moved between pairs; the ratios did not


def test_equal_passes_and_faster_says_so():
    v = verdict_of(lambda i: 1.0)
    assert (v.verdict, v.ratio.value, v.ratio.low, v.ratio.high) == (PASS, 1.0, 1.0, 1.0)
    assert exit_code([v]) == 0 and v.note == "+0.0%: within the 5% tolerance"
    faster = verdict_of(lambda i: 0.8 * (1 + 0.01 * JITTER[i]))
    assert faster.verdict == FASTER and faster.ratio.low > 1 and exit_code([faster]) == 0
    assert faster.note == "25.0% faster: the whole interval is above 1"


def test_noisy_within_tolerance_passes():
    # B/A of 0.96 to 1.05 across pairs: the geometric mean 0.99 is within 5% however wide the interval
    noise = [1 / 0.96, 1 / 1.05, 1 / 0.98, 1 / 1.02, 1.0]
    v = verdict_of(lambda i: noise[i])
    assert v.verdict == PASS and exit_code([v]) == 0
    assert [round(r, 3) for r in v.as_dict()["ratios"]] == [0.96, 1.05, 0.98, 1.02, 1.0]
    # a pass whose interval reaches past the tolerance, but not past twice the tolerance, says so
    wider = [1 / 0.92, 1 / 1.08, 1 / 0.96, 1 / 1.04, 1.0]
    v = verdict_of(lambda i: wider[i])
    assert v.verdict == PASS and 0.90 < v.ratio.low < 0.95 and "cannot rule out 8% slower" in v.note


def test_a_pass_whose_interval_reaches_beyond_twice_the_tolerance_is_inconclusive():
    """Rule 2: within the 5% tolerance by the point estimate (0.99) while the interval reaches 14% slower is not
    a pass (an H200's 5 pairs of a real 10% slowdown read 0.956 (0.898-1.018)); the pairs that would rule out 10%
    slower are named, and that many more pairs of the same ratios pass. Rule 1 (files written before) passed it."""
    wide = [1 / 0.8, 1 / 1.2, 1 / 0.9, 1 / 1.1, 1.0]
    v = verdict_of(lambda i: wide[i])
    assert v.verdict == INCONCLUSIVE and exit_code([v]) == 3 and v.ratio.low < 0.90 < 0.95 < v.ratio.value
    assert v.more_pairs and f"beyond twice the tolerance: about {v.more_pairs} more pairs might decide" in v.note
    assert verdict_of(lambda i: wide[i % 5], n=5 + 5 * -(-v.more_pairs // 5)).verdict == PASS
    ratios = v.as_dict()["ratios"]
    old = ab.rate_verdict(ab.Verdict("r", "", "", 5, v.a_rates, v.b_rates, v.ratio), ratios, 0.05, 0.95, rule=1)
    assert old.verdict == PASS and "cannot rule out" in old.note


def test_slower_beyond_tolerance_within_noise_is_inconclusive():
    noisy = [1 / r for r in (0.80, 1.02, 0.85, 0.98, 0.90)]
    v = verdict_of(lambda i: noisy[i])
    assert v.verdict == INCONCLUSIVE and exit_code([v]) == 3
    assert v.ratio.value < 0.95 < 1 < v.ratio.high
    assert v.more_pairs and f"about {v.more_pairs} more pairs might decide" in v.note
    # the same ratios repeated for that many more pairs (rounded up to whole repeats) decide
    assert verdict_of(lambda i: noisy[i % 5], n=5 + 5 * -(-v.more_pairs // 5)).verdict == FAIL


def test_one_pair_gives_no_interval():
    v = verdict_of(lambda i: 1.2, n=1)
    assert v.verdict == INCONCLUSIVE and v.ratio is None and "run 2 or more" in v.note


def test_a_b_rung_that_errors_fails():
    made = pairs(lambda i: {"r": STEPS, "s": STEPS}, lambda i: {"r": "error" if i == 2 else STEPS, "s": STEPS})
    v = decide("r", made, 0.05, 0.95)
    assert v.verdict == FAIL and v.note == "B error in pair 3 where A was ok: r error"
    assert exit_code([v, decide("s", made, 0.05, 0.95)]) == 1
    # a B process that left no result file: every rung of it fails
    runs = [Run(1, "A", Path("a-1.json"), 0, 1.0, result({"r": STEPS})), Run(1, "B", Path("b-1.json"), 1, 1.0, None)]
    runs[1].error = "the run exited 1 without a result file: ImportError: boom"
    v = decide("r", ab.pairs_of(runs), 0.05, 0.95)
    assert v.verdict == FAIL and "ImportError: boom" in v.note
    # but a B that refused its input (exit 2: an older B that lacks what the scenario needs) says nothing on speed
    runs[1].returncode, runs[1].error = 2, "the run exited 2 without a result file: vlabench: error: s.yaml: ..."
    v = decide("r", ab.pairs_of(runs), 0.05, 0.95)
    assert v.verdict == NOT_GATED and v.note.startswith("B error in pair 1: the run exited 2")
    # a rung missing from B's file fails too
    v = decide("r", pairs(lambda i: {"r": STEPS}, lambda i: {"s": STEPS}), 0.05, 0.95)
    assert v.verdict == FAIL and "missing" in v.note


def test_a_rung_that_fails_in_a_is_not_gated():
    made = pairs(lambda i: {"r": "oom" if i == 1 else STEPS, "s": STEPS}, lambda i: {"r": STEPS, "s": STEPS})
    r, s = decide("r", made, 0.05, 0.95), decide("s", made, 0.05, 0.95)
    assert r.verdict == NOT_GATED and r.note == "A oom in pair 2: r oom"
    assert exit_code([r, s]) == 0  # something was gated
    assert exit_code([r]) == 2  # nothing could be gated
    assert ab.summary([r, s], 0.05) == "PASS: 1 within the 5% tolerance: s; 1 not gated: r"


def test_samples_per_step_counts_every_process():
    run = Run(1, "A", Path("a-1.json"), 0, 1.0, result({"r": [0.5] * 4}, batch_size=3, nproc=2))
    assert run.rate("r") == pytest.approx(3 * 2 / 0.5)


def test_bisect_exit_codes():
    assert [ab.bisect_exit(c) for c in (0, 1, 2, 3)] == [0, 1, 125, 125]


def test_table_and_json_document():
    v = verdict_of(lambda i: 1 / 0.9)
    text = ab.table([v], 0.95)
    assert text.splitlines()[0].split()[:6] == ["rung", "pairs", "A", "samples/s", "B", "samples/s"]
    assert "0.900 (0.900-0.900)" in text and "FAIL" in text
    doc = v.as_dict()
    assert doc["ratio"]["value"] == pytest.approx(0.9) and len(doc["ratios"]) == 5


# ---- the CLI contract and the git sides ------------------------------------------------------------------------

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo, *args) -> str:
    env = {**os.environ, **GIT_ENV}
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True)
    return done.stdout.strip()


def commit_all(repo, message) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def stub_repo(tmp_path):
    """A git repository whose one commit holds a (stub) vlabench tree."""
    repo = tmp_path / "repo"
    for d in ("harness", "models"):
        (repo / d).mkdir(parents=True)
        (repo / d / "__init__.py").write_text("")
    git(repo, "init", "-q")
    return repo, commit_all(repo, "stub tree")


SCENARIO = """
name: ab-test
model: pi05
workload: {batch_size: 2, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 1, timed_steps: 10,
           seed: 0, dtype: fp32}
ladder:
  - {name: community, options: {camera_slots: 3, recompute: nested-full}}
targets:
  cpu: {model_size: tiny}
"""


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return str(path)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def test_refs_resolve_to_commits_and_directories_to_paths(stub_repo):
    repo, sha = stub_repo
    side = resolve_side("A", "HEAD", str(repo), {})
    assert (side.commit, side.repo, side.tree) == (sha, repo.resolve(), None)
    assert resolve_side("B", str(repo), None, {}).as_dict() == {"spec": str(repo), "path": str(repo), "env": {}}


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["nosuchref", "HEAD"],
            "BASE: expected a git ref of {repo} or a directory holding a vlabench tree, got 'nosuchref'",
        ),
        (["HEAD", "HEAD~5"], "HEAD: expected a git ref of {repo} or a directory holding a vlabench tree, got 'HEAD~5'"),
        (
            ["HEAD", "{tmp}"],
            "HEAD: expected a git ref or a directory holding a vlabench tree (harness/ and models/), got",
        ),
        (["HEAD", "HEAD", "--pairs", "1"], "--pairs: expected at least 2 pairs (one pair gives no interval), got 1"),
        (["HEAD", "HEAD", "--env-b", "NOEQUALS"], "--env-b: expected KEY=VALUE, got 'NOEQUALS'"),
        (["HEAD", "HEAD", "--rungs", "nope"], "--rungs: expected rung names of ab-test (community), got nope"),
        (["HEAD", "HEAD", "--tolerance", "lots"], "--tolerance: expected a percentage like 5%"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(stub_repo, scenario, tmp_path, capsys, argv, message):
    repo, _ = stub_repo
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    code = main(["ab", *argv[:2], scenario, *argv[2:], "--repo", str(repo), "--target", "cpu"])
    assert code == 2
    err = one_line_error(capsys)
    assert err.startswith("vlabench: error: " + message.format(repo=repo)), err
    # for git bisect, unusable input is "skip this commit" (125), never "bad"
    assert main(["ab", *argv[:2], scenario, *argv[2:], "--repo", str(repo), "--target", "cpu", "--bisect"]) == 125
    one_line_error(capsys)


def test_not_a_repository_is_one_line(tmp_path, scenario, capsys):
    assert main(["ab", "HEAD", "HEAD", scenario, "--repo", str(tmp_path), "--target", "cpu"]) == 2
    assert one_line_error(capsys).startswith("vlabench: error: --repo: expected a git repository")


def test_worktrees_are_removed_on_interrupt(stub_repo):
    repo, sha = stub_repo
    sides = [resolve_side("A", "HEAD", str(repo), {}), resolve_side("B", sha, str(repo), {})]
    with pytest.raises(KeyboardInterrupt), checked_out(sides):
        trees = [s.tree for s in sides]
        assert all((t / "harness").is_dir() for t in trees)
        assert len(git(repo, "worktree", "list").splitlines()) == 3
        raise KeyboardInterrupt
    assert not any(t.exists() for t in trees) and not trees[0].parent.exists()
    assert len(git(repo, "worktree", "list").splitlines()) == 1


def test_a_commit_without_a_tree_is_refused_and_cleaned_up(stub_repo, scenario, capsys, tmp_path, monkeypatch):
    repo, _ = stub_repo
    shutil.rmtree(repo / "models")
    commit_all(repo, "no models")
    monkeypatch.chdir(tmp_path)  # where the default output folder, runs/ab-<time>/, would go
    assert main(["ab", "HEAD~1", "HEAD", scenario, "--repo", str(repo), "--target", "cpu"]) == 2
    assert "HEAD: expected a commit holding a vlabench tree (harness/ and models/)" in one_line_error(capsys)
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # a refusal writes nothing


# A stub tree whose `harness.cli run` writes a result at once: every rung's 4 steps take STEP_S seconds (the
# environment's FAKE_STEP_S wins), and each run appends which tree ran it to FAKE_LOG.
FAKE_CLI = """
import json, os, sys
args = sys.argv[1:]
out, rungs = args[args.index("--out") + 1], args[args.index("--rungs") + 1].split(",")
STEP_S = 0.1
step = float(os.environ.get("FAKE_STEP_S") or STEP_S)
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(os.path.basename(os.getcwd()) + "\\n")
if step < 0:
    sys.exit("vlabench: error: s.yaml: expected something this version lacks")  # exit 1 with a message
def rung(name):
    return {"name": name, "status": "ok", "reason": None, "samples_per_s": 2 / step, "step_times_s": [step] * 4,
            "losses": [1.0] * 4}
result = {"schema": "vlabench.result/1", "scenario": {"name": "ab-test"}, "target": {"name": "cpu"},
          "provenance": {}, "workload": {"batch_size": 2}, "rungs": [rung(r) for r in rungs]}
with open(out, "w") as f:
    json.dump(result, f)
"""


def test_each_side_runs_its_own_commit_in_turn(stub_repo, scenario, tmp_path, capsys, monkeypatch):
    repo, _ = stub_repo
    (repo / "harness" / "cli.py").write_text(FAKE_CLI)
    good = commit_all(repo, "fake runs")
    (repo / "harness" / "cli.py").write_text(FAKE_CLI.replace("STEP_S = 0.1", "STEP_S = 0.125"))
    slower = commit_all(repo, "20% slower")
    log = tmp_path / "log.txt"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.chdir(repo)  # the default repository: the one holding the current directory
    argv = ["ab", good, "HEAD", scenario, "--target", "cpu", "--pairs", "3", "--out", "../out"]
    assert main(argv) == 1
    out = capsys.readouterr().out
    assert log.read_text().split() == ["a", "b", "b", "a", "a", "b"]  # A B, B A, A B: each from its own worktree
    assert "[pair 3/3] B: community 16.00 samples/s" in out and "[pair 1/3] A: community 20.00 samples/s" in out
    assert re.search(r"community +3 +20\.00 +16\.00 +0\.800 \(0\.800-0\.800\) +FAIL +20\.0% slower", out), out
    assert "FAIL: 1 regressed in B: community" in out
    doc = json.loads((tmp_path / "out" / "ab.json").read_text())  # --out relative to the current directory
    assert (doc["a"]["commit"], doc["b"]["commit"], doc["b"]["spec"]) == (good, slower, "HEAD")
    assert [(r["pair"], r["side"], r["file"]) for r in doc["runs"][:2]] == [(1, "A", "a-1.json"), (1, "B", "b-1.json")]
    assert doc["exit_code"] == 1 and doc["verdicts"][0]["ratios"] == pytest.approx([0.8] * 3)
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    # `vlabench show` prints the A/B again from its file: the sides, the verdict table and the summary
    assert main(["show", str(tmp_path / "out" / "ab.json")]) == 0
    shown = capsys.readouterr().out
    assert f"A: {good} at {good[:12]}" in shown and f"B: HEAD at {slower[:12]}" in shown
    assert re.search(r"community +3 +20\.00 +16\.00 +0\.800 \(0\.800-0\.800\) +FAIL +20\.0% slower", shown), shown
    assert "FAIL: 1 regressed in B: community" in shown
    # the environment of one side; --json; --bisect (each A/B replaces the last in ../out: --force)
    argv.append("--force")
    aa = ["ab", good, good, *argv[3:]]
    assert main([*aa, "--env-a", "FAKE_STEP_S=0.125", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdicts"][0]["verdict"] == FASTER and doc["a"]["env"] == {"FAKE_STEP_S": "0.125"}
    assert main([*argv, "--bisect"]) == 1 and main([*aa, "--bisect"]) == 0
    # a B that crashes fails every rung, after one pair
    assert main([*aa, "--env-b", "FAKE_STEP_S=-1"]) == 1
    out = capsys.readouterr().out
    assert "B error in pair 1 where A was ok: the run exited 1 without a result file" in out
    assert "stopped after 1 pair: every rung is decided by its status alone" in out


PIN_CLI = FAKE_CLI.replace(
    'with open(os.environ["FAKE_LOG"], "a") as f:\n    f.write(os.path.basename(os.getcwd()) + "\\n")',
    'with open(os.environ["FAKE_LOG"], "a") as f:\n'
    '    f.write(json.dumps([sorted(os.sched_getaffinity(0)), os.environ.get("OMP_NUM_THREADS"), args]) + "\\n")',
)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="needs CPU affinity")
@pytest.mark.parametrize("pin", [True, False])
def test_a_cpu_ab_pins_both_sides_to_one_thread_on_one_cpu(tmp_path, scenario, capsys, monkeypatch, pin):
    """Every run of both sides on the same one CPU with one thread by default (stated in the output and ab.json);
    --no-pin leaves the threads and CPUs alone. Each run is a single run (--repeats 1: the pairs are the repeats)
    where the side's code knows --repeats."""
    assert PIN_CLI != FAKE_CLI
    sides = []
    for name in ("a", "b"):
        tree = tmp_path / name
        for d in ("harness", "models", "harness/ladder"):
            (tree / d).mkdir(parents=True, exist_ok=True)
        (tree / "harness" / "cli.py").write_text(PIN_CLI)
        (tree / "harness" / "ladder" / "run_cli.py").write_text('add_argument("--repeats")' if name == "a" else "")
        sides.append(str(tree))
    log = tmp_path / "log.txt"
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    argv = ["ab", *sides, scenario, "--target", "cpu", "--pairs", "2", "--out", str(tmp_path / "out")]
    assert main(argv + ([] if pin else ["--no-pin"])) == 0
    out = capsys.readouterr().out
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    doc = json.loads((tmp_path / "out" / "ab.json").read_text())
    cpu = max(os.sched_getaffinity(0))
    if pin:
        assert all(r[0] == [cpu] and r[1] == "1" for r in runs), runs
        assert f"pinned: every run of both sides on CPU {cpu} with one thread (OMP_NUM_THREADS=1)" in out
        assert doc["pinned"]["cpu"] == cpu and doc["pinned"]["env"]["OMP_NUM_THREADS"] == "1"
    else:
        assert all(r[0] == sorted(os.sched_getaffinity(0)) and r[1] is None for r in runs), runs
        assert "not pinned: each run uses its default threads and CPUs" in out and doc["pinned"] is None
    a_args, b_args = runs[0][2], runs[1][2]  # A knows --repeats, B (an older tree) does not
    assert a_args[a_args.index("--repeats") + 1] == "1" and "--repeats" not in b_args


def test_the_rule_can_fail_a_clear_slowdown():
    """What the real A/B tests rest on before they may skip: the rule FAILs a clear, steady 20% slowdown (with
    FAIL made impossible, the real tests would only ever skip, "the machine moved too much")."""
    rule_fails_a_clear_slowdown()


def rule_fails_a_clear_slowdown() -> None:
    v = verdict_of(lambda i: 1 / 0.8 * (1 + 0.005 * JITTER[i]), n=3)
    if v.verdict != FAIL:
        pytest.fail(f"the rule did not FAIL three steady pairs 20% slower ({v.verdict}: {v.note}): it cannot FAIL")


# ---- real CPU runs ---------------------------------------------------------------------------------------------


def idlest_cpu(cpus: set[int], seconds: float = 1.0) -> int:
    """The allowed CPU that was idlest over `seconds` (another job pinned to one CPU, as the gate tests pin
    theirs to the last, would otherwise share ours all along)."""

    def busy() -> dict[int, int]:
        out = {}
        for line in Path("/proc/stat").read_text().splitlines():
            name, *ticks = line.split()
            if name.startswith("cpu") and name[3:].isdigit() and int(name[3:]) in cpus:
                t = list(map(int, ticks))
                out[int(name[3:])] = sum(t) - t[3] - t[4]  # all but idle and iowait
        return out

    try:
        before = busy()
        time.sleep(seconds)
        after = busy()
        return min(cpus, key=lambda c: (after[c] - before[c], -c))
    except (OSError, KeyError, ValueError):
        return max(cpus)


@pytest.fixture(scope="module")
def one_cpu():
    """This process (and so every run it starts) pinned to one CPU, one thread: both sides share it."""
    allowed, threads = os.sched_getaffinity(0), os.environ.get("OMP_NUM_THREADS")
    cpu = idlest_cpu(allowed)
    os.sched_setaffinity(0, {cpu})
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        yield cpu
    finally:
        os.sched_setaffinity(0, allowed)
        if threads is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = threads


def ab_run(tmp_path, name, scenario, *extra) -> tuple[int, dict]:
    out = tmp_path / name
    code = main(["ab", str(ROOT), str(ROOT), scenario, "--target", "cpu", "--out", str(out), *extra])
    return code, json.loads((out / "ab.json").read_text())


# The spread of the pairs, measured with this test's scenario (one thread pinned to one CPU, 20 timed steps of
# ~55 ms, a process every ~7 s on a quiet machine) on the 2-vCPU VM these tests were written on, which up to
# seven other jobs shared (load average 2 to 10): an A/A pair's ratio B/A stayed within 0.96-1.09 while the
# other jobs held still (sd of the log ratio ~0.05), and jumped to 0.5-2.0 in one pair in four to ten whenever
# a job started or stopped between the A and the B of a pair (sd of the log ratio over 6 to 20 pairs: 0.16 to
# 0.36; a busy loop of our own beside the runs did not steady it: 0.18). Under that, the 10% slowdown (measured
# 7-17% slower) failed in 1 of 16 windows of 5 consecutive pairs, 5 of 15 of 6 pairs, 7 of 13 of 8 pairs; the
# rest were inconclusive or a pass whose interval reached past the tolerance (the rule passing on the point
# estimate of noisy pairs). Such an undecided A/B skips the test, saying so; a wrong decision fails at once: a
# pass whose interval excludes a 5% slowdown, or a FAIL of an A/A.
# Later, on a 2-vCPU VM whose host moved the one CPU's speed by up to 2x in phases of 1 to 30 s with nothing
# else running on the VM (a fixed matmul loop read 64-100% of its best speed, second by second), this A/B gave
# a spread (sd of the log ratio, within runs) of 0.18 over 30 pairs at 10 timed steps and 0.22 over 24 pairs at
# 20: the noise is the host's phases, which a 1 or 2 s timed window does not average away (windows of 10 to 320
# steps slid over one 2500-step run: 0.15 to 0.19), so 10 steps: a process took 7.3 s instead of 8.4 s.
# Resampled in 6s from those 54 pairs, the 10% A/B FAILs 14% of the time and passes wrongly (interval above
# 0.95) 1.1%; with a Gaussian spread of 0.05 (the quiet VM's), 95% and 0.007%. Hence one try of 6 pairs
# (~90 s): the second try this test once made cost another 90 s to decide 25% of such runs instead of 14%, and
# doubled the chance of a wrong pass, to 2%. What holds whatever the machine does (each pair's rates, B's
# environment, the order) is checked before the skip.
SLOW_PAIRS = 6


def undecided(doc: dict) -> bool:
    v = doc["verdicts"][0]
    return v["verdict"] == INCONCLUSIVE or (v["verdict"] == PASS and v["ratio"]["low"] < 1 - doc["tolerance"])


def spread(doc: dict) -> str:
    v = doc["verdicts"][0]
    logs = [math.log(r) for r in v["ratios"]]
    return f"{v['verdict']}, ratios {', '.join(f'{r:.2f}' for r in v['ratios'])} (sd of the log {statistics.stdev(logs):.2f})"


@pytest.mark.slow
def test_real_ten_percent_slowdown_fails(one_cpu, tmp_path, scenario, capsys):
    started = time.monotonic()
    slow = ["--pairs", str(SLOW_PAIRS), "--env-b", "VLABENCH_TEST_SLOWDOWN=0.1"]
    code, doc = ab_run(tmp_path, "slow", scenario, *slow)
    out = capsys.readouterr().out
    # every pair ran both sides to the end, each with a rate: nothing failed, nothing stopped early
    assert re.search(rf"\[pair {SLOW_PAIRS}/{SLOW_PAIRS}\] B: community \d+\.\d\d samples/s", out), out
    assert len(doc["verdicts"][0]["ratios"]) == SLOW_PAIRS, out
    assert doc["b"]["env"] == {"VLABENCH_TEST_SLOWDOWN": "0.1"} and doc["a"]["path"] == str(ROOT)
    a1, b1 = (json.loads((tmp_path / "slow" / f"{s}-1.json").read_text())["rungs"][0] for s in "ab")
    assert b1["test_slowdown"] == 0.1 and "test_slowdown" not in a1  # the environment of side B only
    # the order turns every pair: A B, B A, A B ...
    assert [r["side"] for r in doc["runs"]] == [s for i in range(SLOW_PAIRS) for s in ("AB" if i % 2 == 0 else "BA")]
    if undecided(doc):
        rule_fails_a_clear_slowdown()  # a rule that cannot FAIL fails here, instead of skipping forever
        pytest.skip(f"the machine moved too much to decide in {time.monotonic() - started:.0f}s: {spread(doc)}")
    assert code == 1, f"{spread(doc)}: {out}"
    assert "FAIL: 1 regressed in B: community" in out


@pytest.mark.slow
def test_real_aa_on_a_busy_cpu_does_not_fail(one_cpu, tmp_path, scenario, capsys):
    # the busy loop takes half the CPU from both sides alike, all along: a pair's ratio stays near 1. Where the
    # spread is far beyond the 5% tolerance, three pairs still FAIL an A/A as often as the 95% interval misses
    # on the low side: 2.2% in the 54 pairs above re-centred on 1, which is the rule's designed false-alarm rate,
    # not a fault. So one FAIL is tried again, once: an unbiased gate FAILs two independent A/As about 0.05% of
    # the time, and a gate biased against B (what this test is for) FAILs both.
    for attempt in ("aa", "aa-again"):
        with cpu_hog(one_cpu):
            code, doc = ab_run(tmp_path, attempt, scenario, "--pairs", "3", "--json")
        captured = capsys.readouterr()
        if code != 1:
            break
    assert code in (0, 3), captured.err
    assert json.loads(captured.out) == doc  # --json: stdout holds ab.json alone, the progress went to stderr
    assert "[pair 3/3] B: community" in captured.err


def bisect_repo(tmp_path) -> tuple[Path, str, str, str]:
    """A git repository of the code: commit 1 good, commit 2 slows every timed step down in the code (no
    environment variable: harness/ladder/rung.py's test slowdown defaults to 300%, each step four times as
    long), commit 3 changes the README only. Five timed steps: at four times as long, their spread is no matter."""
    repo = tmp_path / "repo"
    for part in ("harness", "models"):
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", repo)
    (repo / "s.yaml").write_text(SCENARIO.replace("timed_steps: 10,", "timed_steps: 5,"))
    (repo / "README.md").write_text("# a copy of vlabench\n")
    git(repo, "init", "-q")
    good = commit_all(repo, "good")
    rung_py = repo / "harness" / "ladder" / "rung.py"
    code = rung_py.read_text()
    slower = code.replace("os.environ.get(TEST_SLOWDOWN_ENV) or 0)", "os.environ.get(TEST_SLOWDOWN_ENV) or 3.0)")
    assert slower != code
    rung_py.write_text(slower)
    bad = commit_all(repo, "slower step")
    (repo / "README.md").write_text("# a copy of vlabench\n\nAn unrelated line.\n")
    return repo, good, bad, commit_all(repo, "unrelated")


@pytest.mark.slow
def test_git_bisect_run_names_the_commit_that_slowed_the_step(one_cpu, tmp_path):
    # Every timed step four times as long, so that three pairs decide even when the machine moves (see
    # SLOW_PAIRS: at 50% longer, B/A measured 0.58-0.84 under load 7 and three pairs could not always decide; at
    # twice as long, three pairs decide when the sample sd of their log ratios is under 0.28, which a spread of
    # 0.19 to 0.25 misses in 12% to 29% of tries; at four times, under 0.56: 0.02% to 0.7% of tries miss it).
    # When the A/B of commit 2 cannot decide, bisect skips it and leaves two candidates: bisected again, once.
    repo, good, bad, head = bisect_repo(tmp_path)
    cmd = [sys.executable, "-m", "harness.cli", "ab", good, "HEAD", "s.yaml", "--rungs", "community"]
    cmd += ["--pairs", "3", "--bisect", "--target", "cpu", "--out", "../ab", "--force"]  # each step replaces the last
    env = {**os.environ, **GIT_ENV}
    env.pop("PYTHONPATH", None)  # the bisected commit's code runs, from the repository's directory
    tries = []
    for _ in range(2):
        git(repo, "bisect", "start", head, good)
        done = subprocess.run(["git", "bisect", "run", *cmd], cwd=repo, capture_output=True, text=True, env=env)
        git(repo, "bisect", "reset")
        if "only 'skip'ped commits left" not in done.stdout:
            break
        tries.append(spread(json.loads((tmp_path / "ab" / "ab.json").read_text())))
    else:
        rule_fails_a_clear_slowdown()
        pytest.skip("the machine moved too much for 3 pairs to decide commit 2, twice: " + "; ".join(tries))
    assert f"{bad} is the first bad commit" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    assert len(git(repo, "worktree", "list").splitlines()) == 1  # every temporary worktree removed
    assert json.loads((tmp_path / "ab" / "ab.json").read_text())["b"]["commit"] == bad
