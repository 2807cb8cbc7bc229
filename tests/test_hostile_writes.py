"""Hostile files and signals (issue 52): a name read from a file never chooses where a command writes, an
`--append` never loses a rung that measured ok, SIGTERM and SIGHUP clean up as Ctrl-C does, and no command
replaces its earlier output unasked. docs/reliability.md lists each guarantee with the test that shows it."""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_errors import files_under, one_line_error

import harness.ladder.runner
from harness.cli import main
from harness.ladder.processes import Finished

ROOT = Path(__file__).resolve().parent.parent
LADDER = ROOT / "tests/fixtures/ladder-h200.json"  # a ladder result of pi05-loongforge on h200 with 7 rungs

# The smallest real ladder: one rung of the tiny Pi0.5 on the CPU (about 10 s, most of it importing torch).
SCENARIO = """\
name: {name}
model: pi05
workload: {{batch_size: 1, cameras: 2, text_tokens: 16, action_horizon: 4, warmup_steps: 1, timed_steps: 2,
           seed: 0, dtype: fp32}}
ladder:
  - {{name: community, options: {{camera_slots: 3, recompute: nested-full}}}}
targets:
  cpu: {{model_size: tiny}}
"""

HOSTILE_NAMES = ["../../../tmp/x", "/tmp/vlabench-absolute", "a" * 300, "a\0b", "a\nb", "a\tb", "..", "-rf"]


def scenario_file(folder: Path, name: str = "hostile") -> Path:
    path = folder / "s.yaml"
    path.write_text(SCENARIO.format(name=json.dumps(name)))  # a JSON string is a YAML double-quoted scalar
    return path


# ---- 1. output paths never come from file contents -------------------------------------------------------------


@pytest.mark.parametrize(
    "key, name", [("scenario", "../../victim"), ("scenario", "/tmp/vlabench-passwd-evil"), ("target", "../cpu")]
)
def test_record_refuses_a_result_whose_name_is_a_path(tmp_path, capsys, key, name):
    result = json.loads(LADDER.read_text())
    result[key]["name"] = name
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(result))
    victim = tmp_path / "victim.json"
    victim.write_text('{"unrelated": true}\n')
    (tmp_path / "results").mkdir()
    before = files_under(tmp_path)
    err = one_line_error(capsys, ["record", hostile, "--results-dir", tmp_path / "results", "--force"])
    assert str(hostile) in err and f"{key}.name" in err and "plain name" in err
    assert victim.read_text() == '{"unrelated": true}\n' and files_under(tmp_path) == before
    assert not Path("/tmp/vlabench-passwd-evil.json").exists()


def test_record_writes_under_the_results_dir_and_not_through_a_link_out_of_it(tmp_path, capsys):
    results, elsewhere = tmp_path / "results", tmp_path / "elsewhere"
    assert main(["record", str(LADDER), "--results-dir", str(results), "--force"]) == 0
    assert (results / "h200" / "pi05-loongforge.json").read_bytes() == LADDER.read_bytes()
    capsys.readouterr()
    shutil.rmtree(results / "h200")
    elsewhere.mkdir()
    (results / "h200").symlink_to(elsewhere)  # a planted link: what it leads to is not under --results-dir
    err = one_line_error(capsys, ["record", LADDER, "--results-dir", results, "--force"])
    assert "a path inside" in err and not any(elsewhere.iterdir())


@pytest.mark.parametrize("name", HOSTILE_NAMES, ids=lambda n: repr(n)[:16])
def test_run_without_out_refuses_a_scenario_name_that_is_not_a_plain_name(tmp_path, capsys, monkeypatch, name):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the ladder ran")

    monkeypatch.setattr(harness.ladder.runner, "run_scenario", must_not_run)
    scenario = scenario_file(tmp_path, name)
    monkeypatch.chdir(tmp_path)
    err = one_line_error(capsys, ["run", scenario, "--target", "cpu"])
    assert err.startswith(f"vlabench: error: {scenario}: name: expected a plain name"), err
    assert files_under(tmp_path) == {"s.yaml"}  # no runs/ folder, nothing anywhere else


# ---- 2. --append is a transaction ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[Path, Path]:
    """(scenario, result): one real rung measured ok, to append to."""
    folder = tmp_path_factory.mktemp("measured")
    scenario = scenario_file(folder)
    out = folder / "r.json"
    assert main(["run", str(scenario), "--target", "cpu", "--repeats", "1", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["rungs"][0]["status"] == "ok"
    return scenario, out


def earlier_result(measured, tmp_path) -> tuple[Path, Path, dict]:
    scenario, result = measured
    out = tmp_path / "r.json"
    shutil.copyfile(result, out)
    out.chmod(0o644)
    return scenario, out, json.loads(out.read_text())["rungs"][0]


def test_append_keeps_the_ok_rung_when_the_remeasure_fails(measured, tmp_path, capsys):
    scenario, out, old = earlier_result(measured, tmp_path)
    # the rung process cannot even import torch in 0.5 s: a real re-measure that fails
    args = ["run", scenario, "--target", "cpu", "--repeats", "1", "--out", out, "--append", "--rung-timeout", "0.5"]
    assert main([str(a) for a in args]) == 1  # the attempt failed: said in the exit code
    assert "failed rungs: community" in capsys.readouterr().err
    (rung,) = json.loads(out.read_text())["rungs"]
    assert rung["status"] == "ok" and rung["samples_per_s"] == old["samples_per_s"]
    (attempt,) = rung["failed_attempts"]
    assert attempt["status"] == "error" and "timed out after 0.5s" in attempt["reason"] and attempt["at"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # the file keeps its mode through the atomic rewrite


def test_append_interrupted_keeps_the_ok_rung(measured, tmp_path, monkeypatch, capsys):
    scenario, out, old = earlier_result(measured, tmp_path)

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(harness.ladder.runner, "run_group", ctrl_c)  # Ctrl-C while the rung process runs
    assert main(["run", str(scenario), "--target", "cpu", "--repeats", "1", "--out", str(out), "--append"]) == 130
    (rung,) = json.loads(out.read_text())["rungs"]
    assert rung["status"] == "ok" and rung["samples_per_s"] == old["samples_per_s"]
    assert rung["failed_attempts"][0]["reason"].startswith("interrupted (Ctrl-C)")
    assert not list(tmp_path.glob(".r.json.*"))  # no temporary file left beside it


def test_append_through_a_symlink_writes_the_file_it_points_to(measured, tmp_path, monkeypatch, capsys):
    scenario, out, old = earlier_result(measured, tmp_path)
    link = tmp_path / "link.json"
    link.symlink_to(out)
    monkeypatch.setattr(harness.ladder.runner, "run_group", lambda *a, **k: Finished(3))
    assert main(["run", str(scenario), "--target", "cpu", "--repeats", "1", "--out", str(link), "--append"]) == 1
    assert link.is_symlink() and link.resolve() == out
    data = json.loads(out.read_text())
    assert data["provenance_earlier"] and data["rungs"][0]["samples_per_s"] == old["samples_per_s"]
    assert "exit code 3" in data["rungs"][0]["failed_attempts"][0]["reason"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o644


# ---- 3. SIGTERM and SIGHUP clean up as Ctrl-C does -------------------------------------------------------------


def children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (from /proc: the field after the command name is the parent)."""
    found = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat_file.parent.name))
    return found


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds the rung process through /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_ends_the_rung_process_group_and_its_temporary_folder(tmp_path, sig):
    scenario, out, tmp = scenario_file(tmp_path), tmp_path / "r.json", tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(ROOT)}
    cmd = [
        sys.executable,
        "-m",
        "harness.cli",
        "run",
        str(scenario),
        "--target",
        "cpu",
        "--repeats",
        "1",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (list(tmp.glob("vlabench-rung-*")) and children(proc.pid)):
            assert proc.poll() is None and time.monotonic() < deadline, "the rung never started"
            time.sleep(0.1)
        (rung_pid,) = children(proc.pid)  # the leader of the rung's process group (start_new_session)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert group_gone(rung_pid) and not list(tmp.glob("vlabench-rung-*"))
    (rung,) = json.loads(out.read_text())["rungs"]
    assert rung["status"] == "error" and rung["reason"].startswith(f"interrupted ({sig.name})")


# ---- 4. no silent replacement ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command, written", [(["compare"], "comparison.md"), (["report", "--no-published"], "report.md")]
)
def test_compare_and_report_refuse_an_existing_output_unless_forced(tmp_path, capsys, command, written):
    out = tmp_path / "out"
    out.mkdir()
    (out / written).write_text("an earlier one\n")
    err = one_line_error(capsys, [command[0], LADDER, *command[1:], "--out", out])
    assert written in err and "--force" in err and (out / written).read_text() == "an earlier one\n"
    assert main([command[0], str(LADDER), *command[1:], "--out", str(out), "--force"]) == 0
    assert (out / written).read_text() != "an earlier one\n"


def test_ab_refuses_an_out_folder_holding_an_ab_json(tmp_path, capsys, monkeypatch):
    out = tmp_path / "ab"
    out.mkdir()
    (out / "ab.json").write_text("{}\n")
    (out / "a-1.json").write_text("{}\n")
    err = one_line_error(capsys, ["ab", "HEAD", "HEAD", scenario_file(tmp_path), "--target", "cpu", "--out", out])
    assert "ab.json" in err and "--force" in err
    assert (out / "a-1.json").read_text() == "{}\n"  # an earlier A/B's runs are kept


@pytest.mark.parametrize("rungs", ["", ",", " "])
def test_an_empty_rung_list_is_refused(tmp_path, capsys, rungs):
    err = one_line_error(capsys, ["run", scenario_file(tmp_path), "--target", "cpu", "--rungs", rungs])
    assert "--rungs" in err and "an empty rung list" in err and files_under(tmp_path) == {"s.yaml"}


def test_gate_without_a_recorded_baseline_says_how_to_record_one(tmp_path, capsys):
    """A newcomer's first `gate` on a target with no baseline: the line names the command that records one."""
    result = json.loads((ROOT / "results" / "h200" / "pi05-loongforge.json").read_text())
    current = tmp_path / "current.json"
    current.write_text(json.dumps(result))
    assert main(["gate", str(current), "--results-dir", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert f"vlabench record {current} --results-dir {tmp_path / 'empty'}" in err and "none recorded yet" in err
