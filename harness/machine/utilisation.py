"""How busy the machine's CPUs and GPU were while a long job ran: a background thread samples both at a fixed
interval, and the job records the mean and the 90th percentile.

CPU: the share of non-idle time over the CPUs this process may run on (its affinity: a job pinned to half of a
machine's cores is measured on that half) between two readings of /proc/stat (Linux; elsewhere none).
GPU: the driver's utilisation counter through NVML (`torch.cuda.utilization`, which needs nvidia-ml-py): the
share of the interval in which a kernel ran on the device, not how much of the device it used.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np

PROC_STAT = Path("/proc/stat")


def allowed_cpus() -> set[int] | None:
    """The CPUs this process may run on, or None where the platform does not say."""
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def cpu_times(cpus: set[int] | None = None) -> tuple[int, int] | None:
    """(busy, total) jiffies since boot over `cpus` (None: all CPUs), or None where /proc/stat is missing."""
    try:
        lines = PROC_STAT.read_text().splitlines()
    except OSError:
        return None
    if cpus is None:
        rows = [lines[0]]  # the "cpu" line: every CPU together
    else:
        rows = [
            line
            for line in lines
            if line[3:4].isdigit() and line.startswith("cpu") and int(line.split()[0][3:]) in cpus
        ]
    busy = total = 0
    for row in rows:
        values = [int(v) for v in row.split()[1:9]]  # user nice system idle iowait irq softirq steal
        busy += sum(values) - values[3] - values[4]
        total += sum(values)
    return busy, total


def gpu_reader(device: int | None):
    """A function returning the GPU's utilisation in percent, or None when there is no GPU or no NVML."""
    if device is None:
        return None
    import torch

    if not torch.cuda.is_available():
        return None
    try:
        torch.cuda.utilization(device)
    except Exception:  # nvidia-ml-py missing, or NVML unusable in this container
        return None
    return lambda: float(torch.cuda.utilization(device))


class UtilisationSampler:
    """Samples CPU and GPU utilisation every `interval_s` from `start()` to `stop()`."""

    def __init__(self, interval_s: float = 0.5, gpu: int | None = None):
        self.interval_s = interval_s
        self.cpu: list[float] = []
        self.gpu: list[float] = []
        self._gpu = gpu_reader(gpu)
        cpus = allowed_cpus()
        # every CPU when the process may run on all of them (one /proc/stat line), else only its own
        self._cpus = None if cpus is None or len(cpus) == os.cpu_count() else cpus
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="vlabench-utilisation", daemon=True)

    def start(self) -> UtilisationSampler:
        self._thread.start()
        return self

    def _loop(self) -> None:
        last = cpu_times(self._cpus)
        while not self._stop.wait(self.interval_s):
            now = cpu_times(self._cpus)
            if now is not None and last is not None and now[1] > last[1]:
                self.cpu.append(100.0 * (now[0] - last[0]) / (now[1] - last[1]))
            last = now
            if self._gpu is not None:
                self.gpu.append(self._gpu())

    def stop(self) -> dict:
        """Ends the sampling; the record: mean and p90 per resource (None where it could not be read)."""
        self._stop.set()
        self._thread.join()
        return {
            "interval_s": self.interval_s,
            "cpu_percent": summary(self.cpu),
            "gpu_percent": summary(self.gpu),
            "cpu_source": "/proc/stat, all CPUs"
            if self._cpus is None
            else f"/proc/stat, the process's CPU affinity ({len(self._cpus)} CPUs)",
            "gpu_source": "NVML utilization.gpu" if self._gpu is not None else None,
        }


def summary(values: list[float]) -> dict | None:
    if not values:
        return None
    arr = np.asarray(values)
    return {"mean": float(arr.mean()), "p90": float(np.percentile(arr, 90)), "samples": len(values)}


__all__ = ["UtilisationSampler", "cpu_times", "summary"]
