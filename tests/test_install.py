"""The LIBERO install line as the docs give it keeps the user's torch: pip resolves it from scratch (a dry run,
nothing installed) and must not pick another torch. Without the pin it picked torch 2.14.1 over 2.13.0."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


def documented_install_line() -> str:
    text = (ROOT / "docs" / "libero.md").read_text()
    (line,) = [ln for ln in text.splitlines() if "pip install" in ln and "'.[sim]'" in ln and ln.startswith(".venv")]
    return line


@pytest.mark.slow
def test_the_documented_sim_install_keeps_torch(tmp_path):
    line = documented_install_line()
    version = torch.__version__.split("+")[0]
    # the line as a shell would run it in this environment: our interpreter, the pin it computes
    args = re.sub(r"\"torch==\$\(.*?\)\"", f"torch=={version}", line.split("pip install", 1)[1]).split()
    assert f"torch=={version}" in args, line
    report = tmp_path / "report.json"
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            *[a.strip("'") for a in args],
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    chosen = {
        i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]
    }
    assert chosen["torch"].split("+")[0] == version
    assert "libero" in chosen and "mujoco" in chosen
