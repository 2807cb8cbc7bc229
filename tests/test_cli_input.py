"""Bad command-line input is one line on stderr and exit 2, before anything runs and with nothing overwritten:
time limits and counts that make no sense, an --out that cannot take the result or already holds one, and a
key written twice in a scenario or published-figure YAML."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cli_errors import one_line_error

import harness.eval.main as eval_main
import harness.ladder.runner
from harness.cli import build_parser, main
from harness.errors import InputError
from harness.results import ResultWriter
from harness.user_yaml import load_yaml

ROOT = Path(__file__).resolve().parent.parent
LADDER = ROOT / "tests/fixtures/ladder-h200.json"  # a ladder result of pi05-loongforge on h200 with 7 rungs

SCENARIO = """\
name: cli-input
model: pi05
workload: {batch_size: 1, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 1, timed_steps: 2,
           seed: 0, dtype: fp32}
ladder:
  - {name: community, options: {camera_slots: 3, recompute: nested-full}}
targets:
  cpu: {model_size: tiny}
"""


class Reached(BaseException):
    """Raised by a stand-in for the work a command does once its input is checked (a BaseException, so that the
    CLI lets it through instead of reporting it as an internal failure, exit 4)."""


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO)
    return str(path)


@pytest.fixture(autouse=True)
def nothing_runs(monkeypatch):
    """Every test here is about input refused (or accepted) before any rung, floor or episode runs."""

    def reached(*args, **kwargs):
        raise Reached

    monkeypatch.setattr(harness.ladder.runner, "run_scenario", reached)
    monkeypatch.setattr(harness.ladder.runner, "measure_floor_process", reached)
    monkeypatch.setattr(eval_main, "run_eval", reached)


def command(name: str, scenario: str) -> list:
    return {
        "run": ["run", scenario, "--target", "cpu"],
        "recompute-sweep": ["recompute-sweep", scenario, "--target", "cpu"],
        "floor": ["floor", scenario, "--target", "cpu"],
        "profile": ["profile", scenario, "--target", "cpu", "--rung", "community"],
        "eval": ["eval", "--suite", "libero_goal", "--policy", "noop"],
    }[name]


FILE_COMMANDS = ["run", "recompute-sweep", "floor", "profile", "eval"]
MERGE_FLAG = {"run": "--append", "eval": "--resume"}


# ----------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    "name, flag, value, expected",
    [
        ("run", "--rung-timeout", "-5", "--rung-timeout: expected a positive number of seconds, got -5"),
        ("run", "--rung-timeout", "0", "--rung-timeout: expected a positive number of seconds, got 0"),
        ("run", "--rung-timeout", "nan", "--rung-timeout: expected a positive number of seconds, got nan"),
        ("recompute-sweep", "--rung-timeout", "-5", "--rung-timeout: expected a positive number of seconds, got -5"),
        ("recompute-sweep", "--batch-size", "0", "--batch-size: expected an integer 1..65536, got integer 0"),
        ("recompute-sweep", "--warmup-steps", "-1", "--warmup-steps: expected an integer 0..100000, got integer -1"),
        ("recompute-sweep", "--timed-steps", "0", "--timed-steps: expected an integer 1..100000, got integer 0"),
        ("floor", "--timeout", "0", "--timeout: expected a positive number of seconds, got 0"),
        ("profile", "--steps", "0", "--steps: expected a positive number of steps, got 0"),
        ("profile", "--batch-size", "-2", "--batch-size: expected an integer 1..65536, got integer -2"),
        ("profile", "--batches", "1", "--batches: expected at least 2 batches, got 1"),
        ("eval", "--episode-timeout", "-1", "--episode-timeout: expected a positive number of seconds, got -1"),
        ("eval", "--sim-workers", "0", "--sim-workers: expected a positive number of worker processes, got 0"),
        ("eval", "--trials", "0", "--trials: expected a positive number of episodes per task, got 0"),
        ("eval", "--batch-wait", "-0.5", "--batch-wait: expected a non-negative number of seconds, got -0.5"),
        ("eval", "--max-steps", "0", "--max-steps: expected a positive number of steps, got 0"),
        ("eval", "--seed", "-1", "--seed: expected a non-negative seed, got -1"),
        ("eval", "--first-trial", "-1", "--first-trial: expected a non-negative state index, got -1"),
    ],
)
def test_nonsense_numbers_are_refused_before_anything_runs(scenario, tmp_path, capsys, name, flag, value, expected):
    out = tmp_path / "r.json"
    err = one_line_error(capsys, [*command(name, scenario), flag, value, "--out", out])
    assert err == f"vlabench: error: {expected}"
    assert not out.exists()


@pytest.mark.parametrize(
    "argv, former, new, dest",
    [
        (["eval"], "--workers", "--sim-workers", "sim_workers"),
        (["make-dataset", "--source", "libero", "--episodes", "1", "--out", "d"], "--workers", "--sim-workers", "sim_workers"),
        (["train", "s.yaml", "--rung", "r", "--dataset", "d", "--steps", "1"], "--workers", "--loader-workers", "loader_workers"),
        (["train-ladder", "s.yaml"], "--workers", "--loader-workers", "loader_workers"),
        (["train-ladder", "s.yaml"], "--eval-workers", "--sim-workers", "sim_workers"),
    ],
)  # fmt: skip
def test_a_workers_flag_is_named_for_what_it_counts_and_its_former_name_still_works(capsys, argv, former, new, dest):
    """Simulator workers (eval, make-dataset, the train-ladder's evaluation) and DataLoader workers (train) had the
    same name; the former spelling still sets the value, with one line on stderr naming the new flag, and is
    not offered by --help."""
    args = build_parser().parse_args([*argv, new, "3"])
    assert getattr(args, dest) == 3 and capsys.readouterr().err == ""
    args = build_parser().parse_args([*argv, former, "3"])
    assert getattr(args, dest) == 3 and capsys.readouterr().err == f"vlabench: {former} is deprecated: use {new}\n"
    with pytest.raises(SystemExit):
        build_parser().parse_args([argv[0], "--help"])
    shown = capsys.readouterr().out
    assert new in shown and f"{former} " not in shown


def test_a_former_flag_name_is_checked_as_the_new_one(capsys):
    assert main(["eval", "--suite", "libero_goal", "--policy", "noop", "--workers", "0"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "vlabench: --workers is deprecated: use --sim-workers",
        "vlabench: error: --sim-workers: expected a positive number of worker processes, got 0",
    ]


def test_a_negative_rung_timeout_is_one_line_from_the_shell(scenario, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", scenario, "--target", "cpu", "--rung-timeout", "-5"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == "vlabench: error: --rung-timeout: expected a positive number of seconds, got -5\n"


# ----------------------------------------------------------------------------- --out that cannot take a file


@pytest.mark.parametrize("name", FILE_COMMANDS)
def test_out_naming_a_directory_is_refused(scenario, tmp_path, capsys, name):
    folder = tmp_path / "results"
    (folder / "keep.json").parent.mkdir()
    (folder / "keep.json").write_text("{}")
    err = one_line_error(capsys, [*command(name, scenario), "--out", folder])
    assert (
        err == f"vlabench: error: {folder}: --out: expected a file path for the result JSON, got an existing directory"
    )
    assert (folder / "keep.json").read_text() == "{}" and sorted(os.listdir(folder)) == ["keep.json"]


@pytest.mark.parametrize("name", FILE_COMMANDS)
def test_out_under_a_file_is_refused(scenario, tmp_path, capsys, name):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("not a directory")
    err = one_line_error(capsys, [*command(name, scenario), "--out", blocker / "sub" / "r.json"])
    assert err.endswith(f"--out: expected a path under a directory, got {blocker} is a file")
    assert blocker.read_text() == "not a directory"


@pytest.mark.parametrize("name", ["run", "recompute-sweep", "floor", "eval"])
@pytest.mark.parametrize("where", ["read-only", "sys"])
def test_out_under_an_unwritable_directory_is_refused(scenario, tmp_path, capsys, name, where):
    folder = tmp_path / "ro"
    if where == "read-only":
        folder.mkdir()
        folder.chmod(0o555)
    else:
        folder = Path("/sys")
    try:
        if not folder.is_dir() or (where == "read-only" and os.access(folder, os.W_OK)):
            pytest.skip("root may write to a read-only directory (the /sys case covers root)")
        out = folder / "runs" / "r.json"
        err = one_line_error(capsys, [*command(name, scenario), "--out", out])
        assert err.startswith(
            f"vlabench: error: {out}: --out: expected a path under a writable directory, got {folder}"
        )
        assert not out.parent.exists()
    finally:
        if where == "read-only":
            folder.chmod(0o755)


def test_out_naming_a_device_is_refused_even_with_overwrite(scenario, capsys):
    err = one_line_error(capsys, [*command("run", scenario), "--out", os.devnull, "--overwrite"])
    assert err.endswith("--out: expected a file path for the result JSON, got an existing character device")


# ----------------------------------------------------------------------------- --out that holds a result


def test_run_refuses_to_overwrite_an_unrelated_result(scenario, tmp_path, capsys):
    out = tmp_path / "x.json"
    shutil.copy(LADDER, out)
    before = out.read_bytes()
    err = one_line_error(capsys, [*command("run", scenario), "--out", out])
    assert err == (
        f"vlabench: error: {out}: --out: expected a new file (or --append to merge, --overwrite to replace), "
        "got an existing result of pi05-loongforge on h200 with 7 rungs"
    )
    assert out.read_bytes() == before


def test_run_refuses_to_overwrite_a_longer_result_of_the_same_scenario(scenario, tmp_path, capsys):
    out = tmp_path / "x.json"
    header = {"scenario": {"name": "cli-input"}, "target": {"name": "cpu"}, "provenance": {}}
    ResultWriter(out, {**header, "rungs": [{"name": f"r{i}", "status": "ok"} for i in range(3)]})
    before = out.read_bytes()
    err = one_line_error(capsys, [*command("run", scenario), "--rungs", "community", "--out", out])
    assert err.endswith("got an existing result of cli-input on cpu with 3 rungs")
    assert out.read_bytes() == before


@pytest.mark.parametrize("name", FILE_COMMANDS)
def test_every_command_refuses_an_existing_file_without_a_flag(scenario, tmp_path, capsys, name):
    out = tmp_path / "notes.txt"
    out.write_text("someone's notes\n")
    err = one_line_error(capsys, [*command(name, scenario), "--out", out])
    how = f"{MERGE_FLAG[name]} to merge, --overwrite to replace" if name in MERGE_FLAG else "--overwrite to replace"
    assert err == (
        f"vlabench: error: {out}: --out: expected a new file (or {how}), "
        "got an existing file of 16 bytes (not a vlabench result)"
    )
    assert out.read_text() == "someone's notes\n"


@pytest.mark.parametrize("name", FILE_COMMANDS)
def test_overwrite_lets_the_command_go_on(scenario, tmp_path, name):
    out = tmp_path / "x.json"
    shutil.copy(LADDER, out)
    args = [*command(name, scenario), "--out", str(out), "--overwrite"]
    if name == "profile":  # no stand-in for the profiler: stop it at the first step after the checks
        args += ["--rung", "nope"]
        assert main(args) == 2
    else:
        with pytest.raises(Reached):
            main(args)
    assert out.read_bytes() == LADDER.read_bytes()  # replaced only once something new is written


@pytest.mark.parametrize("name", ["run", "eval"])
def test_merging_is_allowed_and_conflicts_with_overwrite(scenario, tmp_path, capsys, name):
    out = tmp_path / "x.json"
    shutil.copy(LADDER, out)
    with pytest.raises(Reached):
        main([*command(name, scenario), "--out", str(out), MERGE_FLAG[name]])
    err = one_line_error(capsys, [*command(name, scenario), "--out", out, MERGE_FLAG[name], "--overwrite"])
    assert (
        err
        == f"vlabench: error: --overwrite: expected either {MERGE_FLAG[name]} (merge) or --overwrite (replace), got both"
    )
    assert out.read_bytes() == LADDER.read_bytes()


@pytest.mark.parametrize("name", ["compare", "report"])
def test_compare_and_report_out_must_be_a_directory(tmp_path, capsys, name):
    out = tmp_path / "report.md"
    out.write_text("mine")
    err = one_line_error(capsys, [name, LADDER, "--out", out])
    assert err == f"vlabench: error: {out}: --out: expected a directory (made if missing), got an existing file"
    assert out.read_text() == "mine"


def test_make_dataset_out_under_a_file_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "notes.txt"
    blocker.write_text("x")
    args = ["make-dataset", "--source", "synthetic", "--episodes", "1", "--image-size", "16"]
    err = one_line_error(capsys, [*args, "--out", blocker / "data"])
    assert err.endswith(f"--out: expected a path under a directory, got {blocker} is a file")


def test_make_dataset_refuses_a_negative_encoder_count_in_one_line(tmp_path, capsys):
    args = ["make-dataset", "--source", "synthetic", "--episodes", "1", "--image-size", "16", "--encoders", "-1"]
    err = one_line_error(capsys, [*args, "--out", tmp_path / "data"])
    assert err == "vlabench: error: --encoders: expected a non-negative number of processes, got -1"
    assert not (tmp_path / "data").exists()


# ----------------------------------------------------------------------------- duplicate YAML keys


def test_a_duplicate_key_in_a_scenario_names_the_file_the_line_and_the_key(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("  cpu: {model_size: tiny}", "  cpu: {model_size: tiny}\nname: other"))
    out = tmp_path / "r.json"
    err = one_line_error(capsys, ["run", path, "--target", "cpu", "--out", out])
    assert err == (
        f"vlabench: error: {path}: line 9: name: expected each key once per mapping, got 'name' again (first at line 1)"
    )
    assert not out.exists()


def test_a_duplicate_nested_key_gives_its_key_path(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.replace("camera_slots: 3,", "camera_slots: 3, camera_slots: 2,"))
    err = one_line_error(capsys, ["run", path, "--target", "cpu"])
    assert err.endswith(
        f"{path}: line 6: ladder[0].options.camera_slots: expected each key once per mapping, got 'camera_slots' again (first at line 6)"
    )


def test_a_duplicate_key_in_published_figures_is_one_line(tmp_path, capsys):
    published = tmp_path / "published"
    published.mkdir()
    source = ROOT / "results/published/loongforge-pi05.yaml"
    text = source.read_text()
    (published / "x.yaml").write_text(text.replace("\nfigures:", "\nsource: again\nfigures:", 1))
    line = text[: text.index("\nfigures:")].count("\n") + 2
    err = one_line_error(capsys, ["compare", LADDER, "--published", "--published-dir", published])
    assert err.startswith(f"vlabench: error: {published / 'x.yaml'}: line {line}: source: expected each key once")


def test_the_loader_keeps_yaml_merges_and_safe_loading():
    text = "base: &b {a: 1, b: 2}\nx: {<<: *b, a: 3}\ny: *b\n"
    assert load_yaml(text, "f.yaml") == {"base": {"a": 1, "b": 2}, "x": {"a": 3, "b": 2}, "y": {"a": 1, "b": 2}}
    with pytest.raises(InputError, match=r"^f.yaml: line 4: b\[0\].x: expected each key once per mapping"):
        load_yaml("a: 1\nb:\n  - x: 1\n    x: 2\n", "f.yaml")
    with pytest.raises(InputError, match=r"^f.yaml: line 1: expected valid YAML"):
        load_yaml("a: !!python/object:os.system x\n", "f.yaml")
    with pytest.raises(InputError, match="expected UTF-8 text, got undecodable byte at offset 3"):
        load_yaml(b"a: \xff\n", "f.yaml")


def test_every_shipped_yaml_has_each_key_once():
    from harness.judge.published import load_published
    from harness.scenario import load_scenario

    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        load_scenario(path)
    assert load_published()


@pytest.mark.slow  # two one-rung ladders on the CPU
def test_overwrite_replaces_and_append_merges_a_real_result(scenario, tmp_path, monkeypatch, capsys):
    monkeypatch.undo()  # the real runner
    out = tmp_path / "r.json"
    assert main(["run", scenario, "--target", "cpu", "--repeats", "1", "--out", str(out)]) == 0
    first = out.read_bytes()
    assert (
        main(["run", scenario, "--target", "cpu", "--repeats", "1", "--out", str(out)]) == 2
        and out.read_bytes() == first
    )
    assert main(["run", scenario, "--target", "cpu", "--repeats", "1", "--out", str(out), "--overwrite"]) == 0
    assert out.read_bytes() != first and "provenance_earlier" not in json.loads(out.read_text())
    assert main(["run", scenario, "--target", "cpu", "--repeats", "1", "--out", str(out), "--append"]) == 0
    merged = json.loads(out.read_text())
    assert [r["name"] for r in merged["rungs"]] == ["community"] and len(merged["provenance_earlier"]) == 1


def test_a_missing_extra_is_one_line_naming_it_and_another_missing_module_is_a_bug(tmp_path):
    """`make-dataset` without PyAV (the data extra), as on a machine that never installed it: one line naming the
    extra and its install command, exit 2; a module no extra brings stays an internal failure (exit 4, logged)."""
    code = (
        "import sys; sys.modules['av'] = None; sys.modules['pyarrow'] = None\n"
        "from harness.cli import main\n"
        f"sys.exit(main(['make-dataset', '--source', 'synthetic', '--episodes', '1', '--out', {str(tmp_path / 'd')!r}]))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and line.startswith("vlabench: error: ") and "Traceback" not in line, line
    assert "is not installed: it comes with the data extra: pip install torch==" in line and "'.[data]'" in line
    from models.extras import missing_extra

    assert missing_extra(ModuleNotFoundError("x", name="not_an_extra_module")) is None
    assert missing_extra(ModuleNotFoundError("x", name="ray.util")).startswith("ray is not installed")
