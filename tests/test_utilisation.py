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
