"""The utilisation sampler: CPU busy share from /proc/stat while work runs; no GPU figure without a GPU."""

import sys
import time
from pathlib import Path

import pytest

from harness.utilisation import UtilisationSampler, cpu_times, summary

needs_proc = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="CPU utilisation reads Linux /proc/stat")


@needs_proc
def test_cpu_share_rises_with_a_busy_loop():
    import subprocess

    idle = UtilisationSampler(interval_s=0.1).start()
    time.sleep(0.6)
    quiet = idle.stop()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        busy = UtilisationSampler(interval_s=0.1).start()
        time.sleep(0.6)
        loaded = busy.stop()
    finally:
        hog.kill()
        hog.wait()
    assert quiet["cpu_percent"]["samples"] >= 3 and loaded["cpu_percent"]["samples"] >= 3
    assert 0 <= quiet["cpu_percent"]["mean"] <= 100 and 0 < loaded["cpu_percent"]["mean"] <= 100
    # one busy process on an otherwise quiet machine takes at least its share of all the CPUs
    import os

    assert loaded["cpu_percent"]["mean"] >= quiet["cpu_percent"]["mean"] + 50 / os.cpu_count()
    assert loaded["gpu_percent"] is None and loaded["gpu_source"] is None  # no GPU asked for


@needs_proc
def test_cpu_times_are_monotonic():
    a = cpu_times()
    time.sleep(0.05)
    b = cpu_times()
    assert b[1] >= a[1] and b[0] >= a[0] and a[0] <= a[1]


def test_summary():
    assert summary([]) is None
    assert summary([10.0, 20.0, 30.0]) == {"mean": 20.0, "p90": 28.0, "samples": 3}


@needs_proc
def test_a_pinned_process_is_measured_on_its_own_cpus():
    """A process pinned to one CPU that keeps it busy reads close to 100%, however many CPUs the machine has."""
    import os
    import subprocess

    if not hasattr(os, "sched_setaffinity") or os.cpu_count() < 2:
        pytest.skip("needs CPU affinity and two CPUs")
    cpu = min(os.sched_getaffinity(0))
    code = (
        "import os, time, json; from harness.utilisation import UtilisationSampler; "
        f"os.sched_setaffinity(0, {{{cpu}}}); s = UtilisationSampler(interval_s=0.1).start(); "
        "t = time.time()\nwhile time.time() - t < 0.8: pass\nprint(json.dumps(s.stop()))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    import json

    record = json.loads(done.stdout)
    assert record["cpu_source"] == "/proc/stat, the process's CPU affinity (1 CPUs)"
    assert record["cpu_percent"]["mean"] > 80  # the one CPU was busy (the sampler thread shares it)
