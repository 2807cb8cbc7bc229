"""Hostile files and signals (issue 52): results checked on load, every committed result loadable, honest exit
statuses (2 only for the user's input, 4 with a log for internal failures), output piped into a reader that
stops early, and YAML that would take minutes or the whole stack. Real files in tmp_path, the real CLI."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import harness.results
from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent
LADDER = ROOT / "tests/fixtures/ladder-h200.json"  # a ladder result of pi05-loongforge on h200 with 7 rungs
TRAIN_LADDER = ROOT / "results/h200/evidence/train-ladder-2026-12-02-compare/train-ladder.json"


def one_line_exit_2(capsys, argv, *words):
    """`argv` refused on one stderr line holding `words`, with exit 2 and no traceback."""
    code = main([str(a) for a in argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("vlabench: error: "), err
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


def write(tmp_path, name, data) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


# ---- exit statuses: 2 for the user's input only, 4 and a log for internal failures ----------------------------


def test_internal_failure_is_exit_4_with_a_log_holding_the_traceback(tmp_path, monkeypatch, capsys):
    def broken(paths, any_kind=False):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setenv("VLABENCH_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setattr(harness.results, "load_results", broken)
    code = main(["show", str(LADDER)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 4 and code not in (1, 2, 3)
    assert len(err) == 1 and "internal error" in err[0] and "CUDA error" in err[0], err
    (log,) = (tmp_path / "logs").iterdir()
    assert str(log) in err[0]
    text = log.read_text()
    assert "Traceback" in text and "def broken" not in text and "in broken" in text and "vlabench show" in text


def test_setup_problem_is_the_users_exit_2(monkeypatch, capsys):
    from models.extras import SetupError

    def missing(paths, any_kind=False):
        raise SetupError("the fp8 rung needs torchao: install vlabench[fp8]")

    monkeypatch.setattr(harness.results, "load_results", missing)
    one_line_exit_2(capsys, ["show", LADDER], "needs torchao")


def test_help_documents_the_exit_statuses(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("2 unusable input", "3 inconclusive", "4 internal failure", "1 a failed check"):
        assert text in out


def _closed_pipe_run(argv: list[str]) -> subprocess.CompletedProcess:
    """`vlabench argv` writing into a pipe whose reader has already gone (as `| head -1` after its line)."""
    read, write_end = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-m", "harness.cli", *argv], stdout=write_end, stderr=subprocess.PIPE, text=True,
            cwd=ROOT, timeout=120,
        )  # fmt: skip
    finally:
        os.close(write_end)


@pytest.mark.parametrize(
    "argv",
    [
        ["show", str(LADDER)],
        ["gate", str(LADDER), "--baseline", str(LADDER)],
        ["compare", str(LADDER), str(LADDER)],
    ],
    ids=["show", "gate", "compare"],
)
def test_closed_pipe_is_no_traceback_and_keeps_the_exit_status(argv):
    done = _closed_pipe_run(argv)
    assert "Traceback" not in done.stderr and "BrokenPipe" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr  # a passing gate still passes


def test_passing_gate_piped_into_head_exits_0():
    cmd = f"{sys.executable} -m harness.cli gate {LADDER} --baseline {LADDER} | head -1; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert len(done.stdout.splitlines()) == 1


# ---- results checked on load: impossible counts, names written twice, blocks of the wrong type -----------------


def _train_ladder() -> dict:
    return json.loads(TRAIN_LADDER.read_text())


def _suite(data, rung=1):
    return data["train_ladder"]["rungs"][rung]["success_rate"]


def _set(entry, **values):
    entry.update(values)
    if "successes" in values or "trials" in values:
        entry.pop("rate", None)  # the rate is checked against the counts too; here the counts are the subject


TRAIN_LADDER_BREAKS = {
    "successes above trials": (lambda d: _set(_suite(d)["libero_spatial"], successes=150), "successes", "at most"),
    "negative successes": (lambda d: _set(_suite(d)["libero_spatial"], successes=-5), "successes", "-5"),
    "zero trials": (lambda d: _set(_suite(d)["libero_spatial"], trials=0), "trials", "positive integer"),
    "a task's successes above its trials": (
        lambda d: _set(_suite(d)["libero_spatial/3"], successes=11),
        "libero_spatial/3.successes",
        "at most trials (10)",
    ),
    "rungs not a list": (lambda d: d["train_ladder"].update(rungs="oops"), "train_ladder.rungs", "a list"),
    "a rung twice": (
        lambda d: d["train_ladder"]["rungs"].append(copy_of(d["train_ladder"]["rungs"][1])),
        "train_ladder.rungs[3].name",
        "once",
    ),
    "a reference that names no rung": (
        lambda d: d["train_ladder"].update(reference="no-such-rung"),
        "train_ladder.reference",
        "no-such-rung",
    ),
    "a rate its counts do not give": (
        lambda d: _suite(d)["libero_spatial"].update(rate=0.5),
        "libero_spatial.rate",
        "successes / trials",
    ),
    "a seed's successes above trials": (
        lambda d: _set(_seed_runs(d, 0, 1)[1]["rungs"][1]["success_rate"]["libero_spatial"], successes=150),
        "train_ladder.seed_runs[1].rungs[1].success_rate.libero_spatial.successes",
        "at most",
    ),
    "a seed twice": (lambda d: _seed_runs(d, 0, 0), "train_ladder.seed_runs[1].seed", "each seed once"),
    "a curve going back": (
        lambda d: d["train_ladder"]["rungs"][1].update(
            curve=[{"step": s, "success_rate": {}} for s in (d["train_ladder"]["steps"], 1)]
        ),
        "train_ladder.rungs[1].curve[1].step",
        "more than the point before's",
    ),
}


def _seed_runs(data: dict, *seeds: int) -> list[dict]:
    """The ladder's rungs as the runs of `seeds` (train-ladder --seeds), each a copy."""
    data["train_ladder"]["seed_runs"] = [{"seed": s, "rungs": copy_of(data["train_ladder"]["rungs"])} for s in seeds]
    return data["train_ladder"]["seed_runs"]


def copy_of(value):
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("command", ["show", "gate", "compare"])
@pytest.mark.parametrize("case", list(TRAIN_LADDER_BREAKS))
def test_impossible_train_ladder_is_one_line_exit_2(tmp_path, capsys, case, command):
    data = _train_ladder()
    change, key, words = TRAIN_LADDER_BREAKS[case]
    change(data)
    path = write(tmp_path, "train-ladder.json", data)
    argv = {"show": ["show", path], "gate": ["gate", path, "--baseline", TRAIN_LADDER], "compare": ["compare", path]}
    one_line_exit_2(capsys, argv[command], str(path), key, words)


def test_committed_train_ladder_still_gates_and_shows(capsys):
    # inconclusive, not refused: a 1% recorded rate is too close to zero for any drop to show
    assert main(["gate", str(TRAIN_LADDER), "--baseline", str(TRAIN_LADDER)]) == 3
    assert main(["show", str(TRAIN_LADDER)]) == 0
    assert "-5.0%" not in capsys.readouterr().out


def _ladder() -> dict:
    return json.loads(LADDER.read_text())


def _first_result(kind: str) -> dict:
    for path in sorted((ROOT / "results").rglob("*.json")):
        data = json.loads(path.read_text())
        if data.get("kind") == kind and data.get("schema"):
            return data
    raise AssertionError(kind)


OTHER_KINDS = {
    "ladder: a rung twice": (_ladder, lambda d: d["rungs"].append(copy_of(d["rungs"][-1])), "rungs[7].name"),
    "ladder: rungs not a list": (_ladder, lambda d: d.update(rungs="oops"), "rungs"),
    "eval: successes above trials": (
        lambda: _first_result("eval"),
        lambda d: next(iter(d["success_rate"].values())).update(successes=10**6),
        "success_rate.",
    ),
    "eval: a rate its counts do not give": (
        lambda: _first_result("eval"),
        lambda d: d.pop("episodes") and next(iter(d["success_rate"].values())).update(rate=2.0),
        ".rate",
    ),
    "train: steps done beyond those planned": (
        lambda: _first_result("train"),
        lambda d: d["train"].update(steps_done=d["train"]["steps_planned"] + 1),
        "train.steps_done",
    ),
    "train: a block of the wrong type": (lambda: _first_result("train"), lambda d: d.update(train=[1]), "train"),
    "floor: negative FLOPs": (lambda: _first_result("floor"), lambda d: d["floor"].update(flops=-1.0), "floor.flops"),
    "sweep: a rung twice": (
        lambda: _first_result("recompute-sweep"),
        lambda d: d["rungs"].append(copy_of(d["rungs"][0])),
        "name",
    ),
}


@pytest.mark.parametrize("case", list(OTHER_KINDS))
def test_impossible_results_of_other_kinds_are_one_line_exit_2(tmp_path, capsys, case):
    make, change, key = OTHER_KINDS[case]
    data = make()
    change(data)
    path = write(tmp_path, "result.json", data)
    one_line_exit_2(capsys, ["show", path], str(path), key)


# ---- YAML that would take minutes, gigabytes or the whole stack ------------------------------------------------

SCENARIO = """\
name: hostile
model: pi05
workload: {batch_size: 1, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 1, timed_steps: 2,
           seed: 0, dtype: fp32}
ladder:
  - {name: community, options: {camera_slots: 3}}
targets:
  cpu: {model_size: tiny}
"""

BOMB = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(f"{b}: &{b} [*{a},*{a},*{a},*{a},*{a},*{a},*{a},*{a},*{a}]\n" for a, b in zip("abcdefgh", "bcdefghi")),
    ]
)


def _timed_refusal(capsys, argv, *words):
    start = time.perf_counter()
    line = one_line_exit_2(capsys, argv, *words)
    assert time.perf_counter() - start < 1.0
    return line


def test_yaml_alias_bomb_in_a_string_field_is_refused_at_once(tmp_path, capsys):
    path = write(tmp_path, "bomb.yaml", BOMB + SCENARIO.replace("name: hostile", "name: hostile\ndescription: *i"))
    line = _timed_refusal(capsys, ["run", path, "--target", "cpu", "--out", tmp_path / "r.json"], str(path))
    assert "aliases expanded" in line and len(line) < 300


def test_yaml_nested_20000_deep_is_refused_naming_the_file(tmp_path, capsys):
    path = write(tmp_path, "deep.yaml", SCENARIO + "description: " + "[" * 20000 + "]" * 20000 + "\n")
    line = _timed_refusal(capsys, ["run", path, "--target", "cpu", "--out", tmp_path / "r.json"], str(path))
    assert "nesting" in line and "recursion" not in line


def test_yaml_nesting_just_past_the_bound_is_refused(tmp_path, capsys):
    from harness.user_yaml import MAX_DEPTH

    path = write(tmp_path, "deep.yaml", SCENARIO + "description: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH + "\n")
    _timed_refusal(capsys, ["run", path, "--target", "cpu", "--out", tmp_path / "r.json"], str(path), "nesting")


def test_error_messages_truncate_the_values_they_describe():
    from models.schema import describe

    shared = ["x" * 10_000]
    for _ in range(30):  # 2**30 strings if written out in full
        shared = [shared, shared]
    start = time.perf_counter()
    assert len(describe(shared)) < 100 and len(describe("y" * 10**7)) < 100
    assert time.perf_counter() - start < 0.1


def test_json_result_nested_20000_deep_is_one_line(tmp_path, capsys):
    path = write(tmp_path, "deep.json", "[" * 20000 + "]" * 20000)
    _timed_refusal(capsys, ["show", path], str(path), "nesting")


# ---- a truncated checkpoint and an unclosed quote -------------------------------------------------------------


def test_torchrun_args_with_an_unclosed_quote_is_one_line(tmp_path, capsys):
    path = write(tmp_path, "s.yaml", SCENARIO)
    argv = ["run", path, "--target", "cpu", "--out", tmp_path / "r.json", "--torchrun-args", "--rdzv-id 'x"]
    one_line_exit_2(capsys, argv, "--torchrun-args", "quote")


@pytest.mark.parametrize("truncated", ["train_state.safetensors", "model.safetensors"])
def test_resume_from_a_truncated_checkpoint_is_one_line(tmp_path, truncated):
    import torch
    from safetensors.torch import save_file

    from harness.errors import InputError
    from harness.train.checkpoints import STATE_SCHEMA, checkpoint_dir, load_latest

    folder = checkpoint_dir(tmp_path, 100)
    folder.mkdir(parents=True)
    (folder / "train_state.json").write_text(json.dumps({"schema": STATE_SCHEMA, "step": 100}))
    for name in ("train_state.safetensors", "model.safetensors"):
        save_file({"w": torch.zeros(1000)}, str(folder / name))
    assert load_latest(tmp_path).step == 100
    data = (folder / truncated).read_bytes()
    (folder / truncated).write_bytes(data[: len(data) // 2])  # a copy or a disk that stopped half-way
    with pytest.raises(InputError, match="expected a readable training checkpoint") as refused:
        load_latest(tmp_path)
    assert "\n" not in str(refused.value) and str(folder) in str(refused.value)


# ---- committed results still load -------------------------------------------------------------------------------

COMMITTED = sorted((ROOT / "results").rglob("*.json"))


def test_every_committed_result_shows(capsys):
    """Every JSON file under results/ shows with exit 0 (issue 52): the results of runs, the profiles and data-path
    profiles (kinds with schemas of their own); script outputs live under docs/history/measurements/ instead."""
    assert len(COMMITTED) > 100
    failed = [str(p) for p in COMMITTED if main(["show", str(p)]) != 0]
    assert not failed, capsys.readouterr().err


def test_a_profile_shows_its_kernels_and_other_commands_refuse_it(capsys):
    profile = ROOT / "results/h200/evidence/profiles/pi05-beyond-fp8-h200.json"
    assert main(["show", str(profile)]) == 0
    out = capsys.readouterr().out
    assert "profile of pi05-beyond/fp8 on h200, batch 32" in out and "calls per step" in out
    with pytest.raises(harness.results.ResultError, match="a profile"):
        harness.results.load_result(profile)


AB = ROOT / "results/h100/ab/gr00t-loongforge-community-slow10-c5ac1d7/ab.json"  # 5 pairs, B 10% slower: FAIL


def test_an_ab_file_shows_its_verdicts_and_other_commands_refuse_it(capsys):
    assert main(["show", str(AB)]) == 0
    out = capsys.readouterr().out
    assert "A/B of gr00t-loongforge on h100, 5 pairs" in out and "with VLABENCH_TEST_SLOWDOWN=0.1" in out
    assert "0.926 (0.887-0.968)" in out and "FAIL: 1 regressed in B: community" in out
    with pytest.raises(harness.results.ResultError, match="an ab"):
        harness.results.load_result(AB)


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda d: d["verdicts"][0].update(verdict="pass"), ["verdicts[0].verdict", "'FAIL'"]),
        (
            lambda d: d["verdicts"][0]["ratios"].__setitem__(0, 1.0),
            ["verdicts[0].ratios[0]", "B/A of the pair's rates"],
        ),
        (lambda d: d["verdicts"][0]["ratio"].update(low=0.95), ["verdicts[0].ratio", "paired interval"]),
        (lambda d: d["verdicts"][0]["b_samples_per_s"].pop(), ["verdicts[0].ratios", "as many A rates"]),
        (lambda d: d.update(exit_code=0), ["exit_code", "1, as the verdicts give"]),
        (lambda d: d["verdicts"].append(dict(d["verdicts"][0])), ["verdicts[1].rung", "'community' twice"]),
        (lambda d: d["verdicts"][0].update(rung="fc1"), ["verdicts[0].rung", "one of the A/B's rungs"]),
        (lambda d: d["runs"][0].update(pair=9), ["runs[0].pair", "at most the pairs requested (5)"]),
        (lambda d: d["verdicts"][0]["a_samples_per_s"].__setitem__(0, -1), ["a_samples_per_s", "positive"]),
    ],
)
def test_an_ab_file_its_figures_do_not_give_is_refused(tmp_path, capsys, edit, words):
    data = json.loads(AB.read_text())
    edit(data)
    one_line_exit_2(capsys, ["show", write(tmp_path, "ab.json", data)], *words)


ASYNC_AB = ROOT / "results/h200/ab/gr00t-loongforge-async-input-slow10-85e54a7/ab.json"  # rule 1: a pass, 0.898 low


def test_an_ab_file_is_judged_by_the_rule_it_was_decided_by(tmp_path, capsys):
    """A file written before the rule's version 2 (no `rule`) keeps its pass on load; the same figures marked as
    decided by rule 2 must read inconclusive, and a pass there is refused as a hand edit."""
    data = json.loads(ASYNC_AB.read_text())
    assert "rule" not in data and data["verdicts"][0]["verdict"] == "pass"
    assert main(["show", str(ASYNC_AB)]) == 0 and "0.956 (0.898-1.018)" in capsys.readouterr().out
    one_line_exit_2(capsys, ["show", write(tmp_path, "ab.json", {**data, "rule": 2})], "'inconclusive'", "rule (2)")
    one_line_exit_2(capsys, ["show", write(tmp_path, "ab3.json", {**data, "rule": 3})], "rule")


def test_a_profile_with_a_busy_share_not_its_figures_is_refused(tmp_path, capsys):
    data = json.loads((ROOT / "results/h200/evidence/profiles/pi05-beyond-fp8-h200.json").read_text())
    bad = write(tmp_path, "p.json", {**data, "device_busy_share": 0.5})
    assert main(["show", str(bad)]) == 2
    assert "device_busy_share: expected kernel_s / wall_s" in capsys.readouterr().err


def test_a_data_path_profile_shows_its_rate(capsys):
    data_path = ROOT / "results/h200/evidence/gr00t-data-path-alone/gr00t-data-only-community.json"
    assert main(["show", str(data_path)]) == 0
    assert "the input pipeline alone (torch loader, 4 workers" in capsys.readouterr().out


def test_a_result_with_an_option_that_no_longer_exists_shows_with_a_note(capsys):
    stale = ROOT / "results/h200/evidence/repeats/pi05-beyond-2026-12-03-siglip-norm-kernels-ea39da1/pair.json"
    assert main(["show", str(stale)]) == 0
    assert "options no longer understood by this version (layer_norm: unknown key 'layer_norm')" in (
        " ".join(capsys.readouterr().out.split())
    )
