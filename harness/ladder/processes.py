"""Child processes that can always be stopped: each runs in a process group of its own, its output is read
on a thread (so a deadline holds while it prints nothing), and stopping it ends the whole group (torchrun
and every rank it started), politely first (SIGTERM), then by force (SIGKILL).
"""

from __future__ import annotations

import collections
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

GRACE_S = 5.0  # how long a group gets to exit after SIGTERM before SIGKILL


@dataclass
class Finished:
    returncode: int | None  # None: it was ended (deadline or interruption)
    timed_out: bool = False
    tail: list[str] = field(default_factory=list)  # the last lines it printed


def _pump(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)  # end of output


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else (cannot happen for our own group)
        return True
    return True


def end_group(proc: subprocess.Popen, grace_s: float = GRACE_S) -> None:
    """SIGTERM to every process of proc's group, SIGKILL to whatever is left after `grace_s`; returns once
    none is left (the leader reaped)."""
    pgid = proc.pid  # start_new_session made the child the leader of a group with its own pid
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        until = time.monotonic() + wait_s
        while time.monotonic() < until:
            proc.poll()  # reap the leader, or its zombie keeps the group alive
            if not group_alive(pgid):
                return
            time.sleep(0.05)
    proc.poll()


def run_group(
    cmd: list[str],
    env: dict,
    progress: Callable[[str], None],
    timeout_s: float | None,
    tail_lines: int = 40,
    grace_s: float = GRACE_S,
    cwd: str | os.PathLike | None = None,
) -> Finished:
    """Run `cmd` (in `cwd`) in its own session, streaming each output line to `progress`; at `timeout_s` (wall
    clock, output or not) the whole group is ended. Ctrl-C (KeyboardInterrupt) ends the group too, then propagates."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, start_new_session=True, cwd=cwd
    )
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=_pump, args=(proc.stdout, lines), daemon=True).start()
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    tail: collections.deque = collections.deque(maxlen=tail_lines)
    try:
        output_open = True
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                end_group(proc, grace_s)
                return Finished(None, timed_out=True, tail=list(tail))
            if not output_open:  # it closed its output; wait for it to exit, deadline still holding
                try:
                    return Finished(proc.wait(timeout=0.2 if left is None else min(left, 0.2)), tail=list(tail))
                except subprocess.TimeoutExpired:
                    continue
            try:
                line = lines.get(timeout=0.2 if left is None else min(left, 0.2))
            except queue.Empty:
                continue
            if line is None:
                output_open = False
                continue
            tail.append(line)
            progress(line)
    except BaseException:  # Ctrl-C or an error here: never leave the group running
        end_group(proc, grace_s)
        raise
    finally:
        if proc.stdout is not None:
            proc.stdout.close()


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # a cancelled CI job, a closed terminal or ssh session


@contextmanager
def signals_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP stop the command as Ctrl-C does (a KeyboardInterrupt naming the signal): the running
    process group is ended, temporary folders removed and the interruption recorded. Only the first one
    interrupts; repeats are ignored so that the cleanup they would cut short runs to its end."""
    fired = False

    def interrupt(signum, frame):
        nonlocal fired
        if not fired:
            fired = True
            raise KeyboardInterrupt(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, interrupt) for sig in STOP_SIGNALS}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
