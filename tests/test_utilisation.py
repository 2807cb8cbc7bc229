"""The utilisation sampler: CPU busy share from /proc/stat while work runs; no GPU figure without a GPU."""

import sys
import time
from pathlib import Path

import pytest
from machine_load import BUSY_LOOP

from harness.machine.utilisation import UtilisationSampler, cpu_times, summary

needs_proc = pytest.mark.skipif(not Path("/proc/stat").exists(), reason="CPU utilisation reads Linux /proc/stat")


def process_cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (the unit of /proc/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def proc_stat_cpus() -> int:
    """How many CPUs /proc/stat counts (in a container, possibly the host's, not os.cpu_count())."""
    return sum(1 for line in Path("/proc/stat").read_text().splitlines() if line[:3] == "cpu" and line[3:4].isdigit())


@needs_proc
def test_cpu_share_counts_at_least_the_busy_loops_cpu_time():
    """The busy share the sampler reads is at least the share that busy loops' own CPU time accounts for over the
    same window: whatever else runs on the machine (a shared machine may be near 100% busy already), its CPUs
    were busy for at least the loops' CPU seconds. Counting, not timing: the bound holds however much CPU the
    loops got. One loop per CPU, so on a quiet machine the bound is near 100% and a sampler that read idle time
    as busy (or read nothing) falls far below it; on a busy one the loops still get their share."""
    import os
    import subprocess

    from harness.machine.utilisation import allowed_cpus

    cpus = allowed_cpus() or set(range(os.cpu_count()))
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY_LOOP]) for _ in cpus]
    try:
        time.sleep(0.3)  # past the interpreters' start
        sampler = UtilisationSampler(interval_s=0.1).start()
        ticks, wall = sum(map(process_cpu_ticks, (h.pid for h in hogs))), time.monotonic()
        time.sleep(1.0)
        ticks = sum(map(process_cpu_ticks, (h.pid for h in hogs))) - ticks
        wall = time.monotonic() - wall
        loaded = sampler.stop()
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    # the CPUs the sampler measured: all of /proc/stat's, or the process's affinity (which the loops inherit)
    measured = proc_stat_cpus() if loaded["cpu_source"] == "/proc/stat, all CPUs" else len(cpus)
    loops_share = 100 * ticks / os.sysconf("SC_CLK_TCK") / wall / measured
    assert ticks > 0, "the busy loops never ran"
    assert loaded["cpu_percent"]["samples"] >= 5
    # 0.8: the sampler's window and ours differ by up to one interval (0.1 s of 1 s) and ticks are coarse
    assert 0.8 * loops_share <= loaded["cpu_percent"]["mean"] <= 100, (loops_share, loaded["cpu_percent"])
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
        "import os, time, json; from harness.machine.utilisation import UtilisationSampler; "
        f"os.sched_setaffinity(0, {{{cpu}}}); s = UtilisationSampler(interval_s=0.1).start(); "
        "t = time.time()\nwhile time.time() - t < 0.8: pass\nprint(json.dumps(s.stop()))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    import json

    record = json.loads(done.stdout)
    assert record["cpu_source"] == "/proc/stat, the process's CPU affinity (1 CPUs)"
    assert record["cpu_percent"]["mean"] > 80  # the one CPU was busy (the sampler thread shares it)


def test_gpu_state_samples_are_tagged_with_the_step_the_run_had_reached():
    """The GPU-state sampler writes each reading beside the loop's step, so that slow steps can be matched with
    the clock; readers stand in for NVML (no GPU here), and without readers nothing is sampled."""
    from harness.machine.gpu_state import COLUMNS, GpuStateSampler

    clock = iter(range(1980, 0, -10))
    readers = {
        "sm_clock_mhz": lambda: float(next(clock)),
        "power_w": lambda: 400.0,
        "temperature_c": lambda: 50.0,
        "utilisation_percent": lambda: 99.0,
    }
    sampler = GpuStateSampler(readers, interval_s=0.01).start()
    deadline = time.perf_counter() + 30
    for step in range(5):
        sampler.step = step
        seen = len(sampler.samples)  # a reading under way may still carry the step before: wait for two more
        while len(sampler.samples) < seen + 2 and time.perf_counter() < deadline:
            time.sleep(0.005)
    record = sampler.stop()
    rows = record["samples"]
    assert record["columns"] == list(COLUMNS) and len(rows) >= 10
    steps = [row[1] for row in rows]
    assert steps == sorted(steps) and set(steps) == set(range(5))  # every step seen, in order
    clocks = [row[2] for row in rows]
    assert clocks == list(range(1980, 1980 - 10 * len(rows), -10))  # one reading per sample, in order
    assert record["summary"]["power_w"]["mean"] == 400.0 and sampler.latest("sm_clock_mhz") == clocks[-1]
    assert GpuStateSampler(None).start().stop() is None
