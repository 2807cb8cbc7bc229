"""The LIBERO install line as the docs give it keeps the user's torch: pip resolves it from scratch (a dry run,
nothing installed) and must not pick another torch. Without the pin it picked torch 2.14.1 over 2.13.0.

It needs the package index: offline (or behind a firewall) it is skipped, decided by a quick probe of the index
pip is configured with, so that it never waits out pip's own retries and timeouts."""

import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent


PROBE_TIMEOUT_S = 5.0


def package_index() -> str:
    """The index pip resolves from: $PIP_INDEX_URL, else pip's configuration, else PyPI."""
    url = os.environ.get("PIP_INDEX_URL", "").split()
    if url:
        return url[0]
    for key in ("install.index-url", "global.index-url"):
        done = subprocess.run(
            [sys.executable, "-m", "pip", "config", "get", key], capture_output=True, text=True, timeout=60
        )
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.split()[0]
    return "https://pypi.org/simple"


def index_unreachable(index: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why pip could not use `index` (None when it serves): one request for the project page of pip itself,
    which every index of Python packages has, with a short timeout. Only a page counts: a sandbox's network
    layer may answer for any host, with a 404."""
    url = index.rstrip("/") + "/pip/"
    if url.startswith("file:"):
        return None if Path(urllib.request.url2pathname(url[5:])).exists() else f"{url} does not exist"
    try:
        urllib.request.urlopen(url, timeout=timeout_s).close()
    except urllib.error.HTTPError as exc:
        return f"{url} answered HTTP {exc.code}, not the project page"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return f"{url} could not be reached within {timeout_s:g} s ({getattr(exc, 'reason', exc)})"
    return None


def test_the_probe_tells_an_unreachable_index_quickly():
    """Nothing listens on port 9 (discard) of this machine: refused at once, never a wait for pip's timeouts."""
    import time

    start = time.monotonic()
    why = index_unreachable("http://127.0.0.1:9/simple", timeout_s=2.0)
    assert why is not None and why.startswith("http://127.0.0.1:9/simple/pip/ could not be reached within 2 s")
    assert time.monotonic() - start < 30  # generous: the point is that it is not pip's 180 s default timeout


def documented_install_line() -> str:
    text = (ROOT / "docs" / "libero.md").read_text()
    (line,) = [ln for ln in text.splitlines() if "pip install" in ln and "'.[sim]'" in ln and ln.startswith(".venv")]
    return line


@pytest.mark.slow
def test_the_documented_sim_install_keeps_torch(tmp_path):
    index = package_index()
    why = index_unreachable(index)
    if why:
        pytest.skip(f"needs the package index to resolve the install line: {why}")
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
