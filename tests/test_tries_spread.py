"""scripts/tries_spread.py over the committed runs of the `--repeats auto` tries prints what docs/gates.md cites."""

import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRIES = ROOT / "docs/history/measurements/cpu/gate-aa-tries"


def spread_lines(tmp_path, name: str, *extra: str) -> str:
    with tarfile.open(TRIES / f"{name}.tar.xz") as archive:
        archive.extractall(tmp_path, filter="data")
    cmd = [sys.executable, str(ROOT / "scripts/tries_spread.py"), str(tmp_path / name), *extra]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout


def test_the_drift_between_runs_the_docs_cite(tmp_path):
    slow = spread_lines(tmp_path, "slow10-auto", "--slowdown", "0.1")
    assert "within a run (40 runs): rate 6.7%, probe 2.3%, rate/probe 6.8%, correlation +0.50" in slow
    assert "B/A spreads 9.1%" in slow and "explain 4.3%" in slow and "about 8.1%" in slow
    quiet = spread_lines(tmp_path, "quiet-auto")
    assert "B/A spreads 5.8%" in quiet and "explain 3.9%" in quiet and "about 4.3%" in quiet
    docs = " ".join((ROOT / "docs/gates.md").read_text().split())
    assert "the rate spread 6.7% between processes" in docs and "the level drifted by about 8.1%" in docs
