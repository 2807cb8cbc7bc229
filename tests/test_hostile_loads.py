"""Hostile files and signals (issue 52): results checked on load, every committed result loadable, honest exit
statuses (2 only for the user's input, 4 with a log for internal failures), output piped into a reader that
stops early, and YAML that would take minutes or the whole stack. Real files in tmp_path, the real CLI."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import harness.results
from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent
LADDER = ROOT / "tests/fixtures/ladder-h200.json"  # a ladder result of pi05-loongforge on h200 with 7 rungs
TRAIN_LADDER = ROOT / "results/h200/train-ladder-2026-12-02-compare/train-ladder.json"


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
    def broken(paths):
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

    def missing(paths):
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
