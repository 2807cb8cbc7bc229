"""How busy the machine's CPUs and GPU were while a long job ran: a background thread samples both at a fixed
interval, and the job records the mean and the 90th percentile.

CPU: the share of non-idle time over all CPUs between two readings of /proc/stat (Linux; elsewhere none).
GPU: the driver's utilisation counter through NVML (`torch.cuda.utilization`, which needs nvidia-ml-py): the
share of the interval in which a kernel ran on the device, not how much of the device it used.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np

PROC_STAT = Path("/proc/stat")


def cpu_times() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs since boot, or None where /proc/stat is missing."""
    try:
        fields = PROC_STAT.read_text().splitlines()[0].split()
    except OSError:
        return None
    values = [int(v) for v in fields[1:9]]  # user nice system idle iowait irq softirq steal
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


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
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="vlabench-utilisation", daemon=True)

    def start(self) -> UtilisationSampler:
        self._thread.start()
        return self

    def _loop(self) -> None:
        last = cpu_times()
        while not self._stop.wait(self.interval_s):
            now = cpu_times()
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
            "cpu_source": "/proc/stat, all CPUs",
            "gpu_source": "NVML utilization.gpu" if self._gpu is not None else None,
        }


def summary(values: list[float]) -> dict | None:
    if not values:
        return None
    arr = np.asarray(values)
    return {"mean": float(arr.mean()), "p90": float(np.percentile(arr, 90)), "samples": len(values)}


__all__ = ["UtilisationSampler", "cpu_times", "summary"]
