"""Other work on the machine, for tests that must hold while it runs (imported by the test modules)."""

import contextlib
import os
import subprocess
import sys

# A busy loop at the ordinary scheduling policy whatever it inherits: a real-time parent thread (SVT-AV1 run as
# root switches the thread that opens an encoder to SCHED_FIFO 99) would make it a loop that never yields its CPU.
BUSY_LOOP = "import os\nos.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))\nwhile True: pass"


@contextlib.contextmanager
def cpu_hog(cpu: int):
    """A busy loop pinned to `cpu` for as long as the block runs: other work on the machine through a whole run."""
    hog = subprocess.Popen([sys.executable, "-c", BUSY_LOOP])
    os.sched_setaffinity(hog.pid, {cpu})
    try:
        yield
    finally:
        hog.kill()
        hog.wait()
