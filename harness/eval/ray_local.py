"""A Ray cluster of nodes on this machine, for the tests of `--ray` and the measurement of Ray against the local pool
(scripts/eval_ray_vs_local.py): each node is a `ray start` in a process session of its own, whose daemons and
workers stay in that session (Ray's workers take process groups of their own, not sessions), so the cluster is ended
by killing those sessions' processes, as `ray stop --force` would end every Ray process of the machine."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

# this Python's Ray (its `ray` command need not be on PATH: wheels installed with --target have none there); the
# nodes' workers run this Python
RAY = [sys.executable, "-m", "ray.scripts.scripts"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def session_processes(sessions: Sequence[int]) -> list[int]:
    """The live processes (zombies left out) of these sessions (Linux: read from /proc)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _, _, session = stat.read_text().rsplit(")", 1)[1].split()[:4]
        except (OSError, IndexError, ValueError):
            continue
        if int(session) in sessions and state != "Z":
            pids.append(int(stat.parent.name))
    return pids


def kill_sessions(sessions: Sequence[int], within_s: float = 10.0) -> None:
    """SIGKILL to every process of the sessions until none is left (or `within_s` has passed)."""
    deadline = time.monotonic() + within_s
    while (pids := session_processes(sessions)) and time.monotonic() < deadline:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


@contextlib.contextmanager
def local_cluster(cpus: Sequence[int], object_store_bytes: int = 100_000_000) -> Iterator[tuple[str, list[int]]]:
    """A head with cpus[0] CPUs and a worker node for each further entry, on 127.0.0.1: yields the head's address
    and the nodes' session ids (the head's first). Every node's processes are killed on the way out, even on
    failure, and the cluster's temporary folder removed."""
    temp = tempfile.mkdtemp(prefix="vr", dir="/tmp")  # short: Ray's unix sockets live under it
    port = free_port()
    starts, sessions = [], []
    try:
        for i, n in enumerate(cpus):
            role = ["--head", f"--port={port}", f"--temp-dir={temp}", "--include-dashboard=false"] if i == 0 else []
            common = [f"--num-cpus={n}", "--disable-usage-stats", f"--object-store-memory={object_store_bytes}"]
            start = subprocess.Popen(
                [*RAY, "start", *(role or [f"--address=127.0.0.1:{port}"]), *common],
                start_new_session=True,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            starts.append(start)
            sessions.append(start.pid)
            output, _ = start.communicate(timeout=120)
            if start.returncode != 0:
                raise RuntimeError(f"ray start (node {i}) exited {start.returncode}: {output[-2000:]}")
        yield f"127.0.0.1:{port}", sessions
    finally:
        for start in starts:
            if start.poll() is None:
                start.kill()
                start.wait()
        kill_sessions(sessions)
        shutil.rmtree(temp, ignore_errors=True)
