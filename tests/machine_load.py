"""Other work on the machine, for tests that must hold while it runs (imported by the test modules)."""

import contextlib
import os
import subprocess
import sys


@contextlib.contextmanager
def cpu_hog(cpu: int):
    """A busy loop pinned to `cpu` for as long as the block runs: other work on the machine through a whole run."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    os.sched_setaffinity(hog.pid, {cpu})
    try:
        yield
    finally:
        hog.kill()
        hog.wait()
