"""Result files: the JSON contract that gates, tables and users read (see DESIGN.md "Result files").

A run writes its header at once and rewrites the file atomically after every rung, so an
interrupted run keeps every rung that finished and the file is never half-written.
"""
from __future__ import annotations

import copy
import datetime
import importlib.metadata
import json
import math
import os
import platform
import shlex
import socket
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .errors import InputError, describe

SCHEMA = "vlabench.result/1"
RUNG_STATUSES = ("ok", "oom", "error", "unsupported", "skipped")

_REPO_ROOT = Path(__file__).resolve().parent.parent


class ResultError(InputError):
    """A result file the harness cannot use."""


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=_REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None  # git missing or hung
    return out.stdout.strip() if out.returncode == 0 else None


def _dist_version(*names: str) -> str | None:
    """Installed version of the first distribution found, without importing it."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def provenance(command: list[str]) -> dict:
    """Where and how a result was produced: code version, library versions, machine, time."""
    import torch

    git_sha = _git("rev-parse", "HEAD")  # None outside a checkout or before the first commit
    # Result files land under results/ inside the checkout; they do not make the code dirty.
    # Untracked files (carried wheels, scratch output) are not code that ran; modified tracked files are.
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results")
    sha_from, dirty = "git", None if status is None or git_sha is None else bool(status)
    seen = None
    if os.environ.get("VLABENCH_GIT_SHA"):
        # A copy of the tree shipped to a remote machine: its .git may be missing or stale (a copy of an older
        # checkout whose HEAD is not the commit sent), so the sender's word on the commit and on uncommitted
        # changes wins; what the local git said is kept beside it when it differs.
        if git_sha is not None and (git_sha, dirty) != (os.environ["VLABENCH_GIT_SHA"], False):
            seen = {"git_sha": git_sha, "dirty": dirty}
        git_sha, sha_from = os.environ["VLABENCH_GIT_SHA"], "VLABENCH_GIT_SHA"
        dirty = {"0": False, "1": True}.get(os.environ.get("VLABENCH_GIT_DIRTY", ""))
    return {
        "git_sha": git_sha,
        "git_sha_from": sha_from,
        "dirty": dirty,
        **({"local_git": seen} if seen else {}),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": _dist_version("triton", "pytorch-triton"),
        "torch_npu": _dist_version("torch_npu"),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "created_at": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": shlex.join(command),
    }


def _jsonable(value: Any) -> Any:
    """NaN and infinities become null (JSON has no such numbers); tuples become lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def _write_atomic(path: Path, data: dict):
    text = json.dumps(data, indent=1, allow_nan=False) + "\n"  # fails before touching disk
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # readers see the old file or the new one, never a partial one
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


class ResultWriter:
    """Writes one run's result file: the header now, then the file again after each rung."""

    def __init__(self, path, header: dict):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = {"schema": SCHEMA, **header}
        data.setdefault("rungs", [])
        self._commit(data)

    def _commit(self, data: dict):
        # Hold exactly what the file holds (a fresh copy, NaN as None), and only once it is written.
        data = _jsonable(data)
        _write_atomic(self.path, data)
        self._data = data

    def append_rung(self, rung: dict):
        if rung.get("status") not in RUNG_STATUSES:
            raise ValueError(f"rung status must be one of {', '.join(RUNG_STATUSES)}, got {rung.get('status')!r}")
        data = dict(self._data)
        data["rungs"] = [*self._data["rungs"], rung]
        self._commit(data)

    def set(self, key: str, value: Any):
        """Add or replace an extra top-level key (e.g. a summary once the ladder is done)."""
        data = dict(self._data)
        data[key] = value
        self._commit(data)

    def update(self, values: dict):
        """Set several top-level keys in one write, so readers never see them out of step with each other."""
        self._commit({**self._data, **values})

    @property
    def data(self) -> dict:
        return copy.deepcopy(self._data)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def load_result(path) -> dict:
    """Read a result file and check the keys other tools rely on; raises a one-line ResultError."""
    path = str(path)

    def fail(key, expected, got):
        raise ResultError(path, key, expected, got)

    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        fail(None, "an existing result file", "no such file")
    except (OSError, UnicodeDecodeError) as e:
        fail(None, "a readable UTF-8 result file", str(e))
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        fail(f"line {e.lineno}", "valid JSON", e.msg)

    if not isinstance(data, dict):
        fail("(top level)", "a JSON object", describe(data))
    if data.get("schema") != SCHEMA:
        fail("schema", repr(SCHEMA), describe(data.get("schema")))
    for section in ("scenario", "target", "provenance", "workload"):
        if not isinstance(data.get(section), dict):
            fail(section, "an object", describe(data.get(section)))
    for section in ("scenario", "target"):
        name = data[section].get("name")
        if not isinstance(name, str) or not name:
            fail(f"{section}.name", "a non-empty string", describe(name))
    rungs = data.get("rungs")
    if not isinstance(rungs, list):
        fail("rungs", "a list", describe(rungs))
    for i, rung in enumerate(rungs):
        key = f"rungs[{i}]"
        if not isinstance(rung, dict):
            fail(key, "an object", describe(rung))
        if not isinstance(rung.get("name"), str) or not rung["name"]:
            fail(f"{key}.name", "a non-empty string", describe(rung.get("name")))
        status = rung.get("status")
        if status not in RUNG_STATUSES:
            fail(f"{key}.status", "one of " + ", ".join(RUNG_STATUSES), describe(status))
        if status != "ok":
            if not isinstance(rung.get("reason"), str) or not rung["reason"]:
                fail(f"{key}.reason", f"a reason for status {status!r}", describe(rung.get("reason")))
            continue
        if not _is_number(rung.get("samples_per_s")):
            fail(f"{key}.samples_per_s", "a number", describe(rung.get("samples_per_s")))
        steps = rung.get("step_times_s")
        if not isinstance(steps, list) or not steps or not all(_is_number(t) for t in steps):
            fail(f"{key}.step_times_s", "a non-empty list of numbers", describe(steps))
        losses = rung.get("losses")
        # A non-finite loss was written as null; it is a finding, not a broken file.
        if not isinstance(losses, list) or not all(v is None or _is_number(v) for v in losses):
            fail(f"{key}.losses", "a list of numbers", describe(losses))
    return data
